//! Every typed SDK call against a real server on a fresh PostgreSQL database: requests are
//! shaped as the server expects and its answers decode into the SDK's types.

use anyhow::{ensure, Result};
use parley_client::{code, ConvKind, EventKind, NewConversation, Role};
use parley_testkit::{test_on_both_stores, ServerConfig, StoreKind, TestServer};

test_on_both_stores!(
    #[tokio::test]
    admin_calls_create_users_and_devices
);
async fn admin_calls_create_users_and_devices(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let admin = server.admin();
    let user = admin.create_user("ana", Some("Ana")).await?;
    ensure!(user.user_id == "ana" && user.display_name.as_deref() == Some("Ana"));
    let e = admin.create_user("ana", None).await.unwrap_err();
    ensure!(
        e.status() == Some(409) && e.code() == Some(code::ALREADY_EXISTS),
        "{e}"
    );

    let token = admin.create_device("ana", "phone").await?;
    let ana = server.client(&token);
    ensure!(ana.list_conversations(None).await?.conversations.is_empty());

    admin.revoke_device("ana", "phone").await?;
    let e = ana.list_conversations(None).await.unwrap_err();
    ensure!(
        e.status() == Some(401) && e.code() == Some(code::UNAUTHENTICATED),
        "{e}"
    );
    let e = admin.revoke_device("ana", "tablet").await.unwrap_err();
    ensure!(e.code() == Some(code::NOT_FOUND), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    direct_chat_send_and_read_back
);
async fn direct_chat_send_and_read_back(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;

    let chat = ana
        .create_conversation(&NewConversation::direct("ben"))
        .await?;
    ensure!(chat.kind == ConvKind::Direct && chat.head == 2, "{chat:?}");
    let again = ben
        .create_conversation(&NewConversation::direct("ana"))
        .await?;
    ensure!(again.conv_id == chat.conv_id, "{again:?}");

    let ack = ana.send_with_retry(&chat.conv_id, "m-1", "你好").await?;
    ensure!(
        ack.seq == 3 && !ack.dup && ack.conv_id == chat.conv_id,
        "{ack:?}"
    );
    let replay = ana.send(&chat.conv_id, "m-1", "你好").await?;
    ensure!(
        replay.dup && replay.message_id == ack.message_id,
        "{replay:?}"
    );
    let e = ana.send(&chat.conv_id, "m-1", "other").await.unwrap_err();
    ensure!(e.code() == Some(code::IDEMPOTENCY_MISMATCH), "{e}");

    let page = ana
        .events_after(&chat.conv_id, 0, None, Some(chat.epoch))
        .await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [1, 2, 3] && page.through_seq == 3, "{page:?}");
    let msg = &page.events[2];
    ensure!(msg.kind == EventKind::Msg && msg.body.as_deref() == Some("你好"));
    ensure!(
        msg.sender_user.as_deref() == Some("ana") && msg.client_msg_id.as_deref() == Some("m-1")
    );

    let page = ben.events_after(&chat.conv_id, 0, Some(10), None).await?;
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [2, 3], "ben sees {seqs:?}");

    let newest = ana.history(&chat.conv_id, None, Some(2)).await?;
    let seqs: Vec<i64> = newest.events.iter().map(|e| e.seq).collect();
    ensure!(
        seqs == [3, 2] && newest.next_before == Some(2),
        "{newest:?}"
    );
    let older = ana
        .history(&chat.conv_id, newest.next_before, Some(2))
        .await?;
    let seqs: Vec<i64> = older.events.iter().map(|e| e.seq).collect();
    ensure!(seqs == [1] && older.next_before.is_none(), "{older:?}");

    let cai = server.user_with_device("cai").await;
    let e = cai.get_conversation(&chat.conv_id).await.unwrap_err();
    ensure!(
        e.status() == Some(404) && e.code() == Some(code::NOT_MEMBER),
        "{e}"
    );
    let e = cai.send("nowhere", "m-1", "x").await.unwrap_err();
    ensure!(e.code() == Some(code::NOT_MEMBER), "{e}");
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    group_membership_calls
);
async fn group_membership_calls(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let ana = server.user_with_device("ana").await;
    let ben = server.user_with_device("ben").await;
    server.user_with_device("cai").await;

    let group = ana
        .create_conversation(
            &NewConversation::group(["ben"])
                .with_conv_id("g-1")
                .with_title("team"),
        )
        .await?;
    ensure!(group.conv_id == "g-1" && group.title.as_deref() == Some("team"));

    let joined = ana.add_member("g-1", "cai").await?;
    ensure!(joined.seq == 3, "{joined:?}");
    let e = ana.add_member("g-1", "cai").await.unwrap_err();
    ensure!(e.code() == Some(code::ALREADY_MEMBER), "{e}");
    let change = ana.set_role("g-1", "cai", Role::Admin).await?;
    ensure!(
        change.user_id == "cai" && change.role == Role::Admin,
        "{change:?}"
    );
    let e = ben.set_role("g-1", "cai", Role::Member).await.unwrap_err();
    ensure!(e.code() == Some(code::FORBIDDEN), "{e}");
    let left = ana.remove_member("g-1", "cai").await?;
    ensure!(left.seq == 4, "{left:?}");

    let seen = ben.get_conversation("g-1").await?;
    ensure!(seen.head == 4 && seen.kind == ConvKind::Group, "{seen:?}");
    let list = ben.list_conversations(None).await?;
    ensure!(list.conversations.iter().any(|c| c.conv_id == "g-1"));
    let again = ben.list_conversations(Some(&list.sync_token)).await?;
    ensure!(!again.sync_token.is_empty());
    Ok(())
}

test_on_both_stores!(
    #[tokio::test]
    probes_answer_without_a_token
);
async fn probes_answer_without_a_token(store: StoreKind) -> Result<()> {
    let server = TestServer::start_on(store, ServerConfig::default()).await;
    let anyone = server.client("not-a-token");
    anyone.healthz().await?;
    anyone.readyz().await?;
    server.stop().await;
    Ok(())
}
