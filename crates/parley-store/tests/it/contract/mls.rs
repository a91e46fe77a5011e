//! The MLS Delivery Service (docs/E2EE.md) on every store: the epoch rule under the lock,
//! Commits that write their joins, leaves and Welcome, replays, refused plaintext, and the
//! KeyPackage directory handing each package out once.

use std::sync::Arc;

use anyhow::{ensure, Context, Result};
use parley_domain::event::WelcomeDevice;
use parley_domain::{
    ClientMsgId, ConvId, ConvKind, DeviceId, EventKind, Rejection, RequestHash, UserId,
};
use parley_store::{EventsQuery, KeyPackageBatch, MlsOutcome, MlsRequest, Store, StoreError};

use super::{new_conv, user};

fn post(
    conv: &ConvId,
    from: &UserId,
    key: &str,
    kind: EventKind,
    epoch: i64,
    message: &str,
) -> MlsRequest {
    MlsRequest {
        conv_id: conv.clone(),
        sender_user: from.clone(),
        sender_device: DeviceId::parse("d1").expect("device"),
        client_msg_id: ClientMsgId::parse(key).expect("key"),
        kind,
        epoch,
        message: message.to_owned(),
        welcome: None,
        add_users: Vec::new(),
        remove_users: Vec::new(),
        request_hash: RequestHash::of_mls(kind.as_str(), epoch, message, &[]),
    }
}

fn rejected(r: Result<MlsOutcome, StoreError>) -> Option<Rejection> {
    match r {
        Err(StoreError::Rejected(r)) => Some(r),
        _ => None,
    }
}

/// Creates an encrypted conversation of `ana` and has her Commit add `ben` with a Welcome for
/// his device d1: answers the conversation and the Commit's outcome.
async fn group_of_two(store: &dyn Store) -> Result<(ConvId, UserId, UserId, MlsOutcome)> {
    let ana = user(store, "ana").await?;
    let ben = user(store, "ben").await?;
    let created = store
        .create_conversation(&new_conv(&ana, ConvKind::Encrypted, Some("e2ee-1"), &[]))
        .await?;
    let conv = created.conv_id;
    let mut commit = post(&conv, &ana, "c0", EventKind::MlsCommit, 0, "Q09NTUlU");
    commit.add_users = vec![ben.clone()];
    commit.welcome = Some((
        "V0VMQ09NRQ==".to_owned(),
        vec![WelcomeDevice {
            user_id: "ben".into(),
            device_id: "d1".into(),
        }],
    ));
    let outcome = store.post_mls(&commit).await?;
    Ok((conv, ana, ben, outcome))
}

pub async fn commit_writes_joins_and_welcome(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben, outcome) = group_of_two(store).await?;
    ensure!(outcome.epoch == 1 && !outcome.dup, "{outcome:?}");
    ensure!(outcome.welcome_seq == Some(outcome.seq + 2), "{outcome:?}");
    let kinds: Vec<EventKind> = outcome.events.iter().map(|e| e.kind).collect();
    ensure!(
        kinds == [EventKind::MlsCommit, EventKind::Join, EventKind::MlsWelcome],
        "{kinds:?}"
    );
    // Ben reads from his join on: the Welcome is in his log, the Commit before it is not.
    let page = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            50,
        )
        .await?;
    let seen: Vec<EventKind> = page.events.iter().map(|e| e.kind).collect();
    ensure!(seen == [EventKind::Join, EventKind::MlsWelcome], "{seen:?}");
    let welcome = page.events[1].mls.as_deref().context("welcome fields")?;
    ensure!(welcome.mls_epoch == 1 && welcome.mls_message.as_deref() == Some("V0VMQ09NRQ=="));
    // The same request again replays the first answer; another one under the key is refused.
    let mut again = post(&conv, &ana, "c0", EventKind::MlsCommit, 0, "Q09NTUlU");
    again.add_users = vec![ben.clone()];
    let replay = store.post_mls(&again).await?;
    ensure!(
        replay.dup
            && replay.seq == outcome.seq
            && replay.epoch == 1
            && replay.welcome_seq == outcome.welcome_seq,
        "{replay:?}"
    );
    let other = post(&conv, &ana, "c0", EventKind::MlsCommit, 0, "T1RIRVI=");
    ensure!(rejected(store.post_mls(&other).await) == Some(Rejection::IdempotencyMismatch));
    let members = store.current_members(&conv).await?;
    ensure!(members.members.len() == 2, "{:?}", members.members);
    Ok(())
}

pub async fn epoch_rule_first_commit_wins(store: Arc<dyn Store>) -> Result<()> {
    let (conv, ana, ben, first) = group_of_two(&*store).await?;
    // Two Commits for epoch 1 at once: exactly one is written, the other learns its seq.
    let a = post(&conv, &ana, "a1", EventKind::MlsCommit, 1, "QUFB");
    let b = post(&conv, &ben, "b1", EventKind::MlsCommit, 1, "QkJC");
    let (sa, sb) = (store.clone(), store.clone());
    let (ra, rb) = tokio::join!(async move { sa.post_mls(&a).await }, async move {
        sb.post_mls(&b).await
    });
    let (won, lost) = match (ra, rb) {
        (Ok(w), Err(l)) | (Err(l), Ok(w)) => (w, l),
        other => anyhow::bail!("not exactly one winner: {other:?}"),
    };
    ensure!(won.epoch == 2);
    match lost {
        StoreError::Rejected(Rejection::EpochConflict {
            sent_in: 1,
            epoch: 2,
            winning_seq,
        }) => ensure!(
            winning_seq == won.seq,
            "winning_seq {winning_seq} != {}",
            won.seq
        ),
        other => anyhow::bail!("the loser got {other:?}"),
    }
    // An application message of an epoch that was left names the Commit that ended it.
    let stale = post(&conv, &ben, "m0", EventKind::MlsApplication, 0, "c3RhbGU=");
    match rejected(store.post_mls(&stale).await) {
        Some(Rejection::EpochConflict {
            winning_seq, epoch, ..
        }) => ensure!(winning_seq == first.seq && epoch == 2),
        other => anyhow::bail!("a stale message got {other:?}"),
    }
    let fresh = post(&conv, &ben, "m1", EventKind::MlsApplication, 2, "ZnJlc2g=");
    let ok = store.post_mls(&fresh).await?;
    ensure!(ok.epoch == 2 && ok.welcome_seq.is_none());
    // A retry of the accepted message replays its answer.
    let replay = store.post_mls(&fresh).await?;
    ensure!(replay.dup && replay.seq == ok.seq && replay.events.is_empty());
    Ok(())
}

pub async fn removal_and_kind_rules(store: &dyn Store) -> Result<()> {
    let (conv, ana, ben, _) = group_of_two(store).await?;
    let mut remove = post(&conv, &ana, "r1", EventKind::MlsCommit, 1, "UkVN");
    remove.remove_users = vec![ben.clone()];
    let out = store.post_mls(&remove).await?;
    let kinds: Vec<EventKind> = out.events.iter().map(|e| e.kind).collect();
    ensure!(
        kinds == [EventKind::MlsCommit, EventKind::Leave],
        "{kinds:?}"
    );
    let after = post(&conv, &ana, "m2", EventKind::MlsApplication, 2, "bGF0ZXI=");
    store.post_mls(&after).await?;
    let page = store
        .events(
            &conv,
            &ben,
            EventsQuery::After {
                after: 0,
                epoch: None,
            },
            50,
        )
        .await?;
    ensure!(
        page.events.last().map(|e| e.kind) == Some(EventKind::Leave),
        "the removed user reads up to their leave and nothing after"
    );
    // The committer cannot remove itself; a plain send is refused by the edge, not here, but an
    // MLS write into a plain group is refused by the store.
    let mut own = post(&conv, &ana, "r2", EventKind::MlsCommit, 2, "T1dO");
    own.remove_users = vec![ana.clone()];
    ensure!(matches!(
        rejected(store.post_mls(&own).await),
        Some(Rejection::BadRequest(_))
    ));
    let plain = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("plain-1"), &[]))
        .await?;
    let into_plain = post(
        &plain.conv_id,
        &ana,
        "p1",
        EventKind::MlsApplication,
        0,
        "eA==",
    );
    ensure!(rejected(store.post_mls(&into_plain).await) == Some(Rejection::NotEncrypted));
    ensure!(store.is_encrypted(&conv).await? == Some(true));
    ensure!(store.is_encrypted(&plain.conv_id).await? == Some(false));
    ensure!(
        store
            .add_member(&conv, &ana, &ben)
            .await
            .err()
            .and_then(|e| match e {
                StoreError::Rejected(r) => Some(r),
                _ => None,
            })
            == Some(Rejection::EncryptedConversation)
    );
    Ok(())
}

pub async fn key_packages_claimed_once(store: Arc<dyn Store>) -> Result<()> {
    let ana = user(&*store, "ana").await?;
    let ben = user(&*store, "ben").await?;
    let batch = KeyPackageBatch {
        user_id: ben.clone(),
        device_id: DeviceId::parse("d1")?,
        key_packages: vec!["S1AxCg==".into(), "S1AyCg==".into(), "S1AzCg==".into()],
        last_resort: Some("TEFTVA==".into()),
    };
    let stock = store.publish_key_packages(&batch).await?;
    ensure!(
        stock.stored == 4 && stock.available == 3 && stock.last_resort,
        "{stock:?}"
    );
    // Three claims at once take three different packages.
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let store = store.clone();
            let ben = ben.clone();
            tokio::spawn(async move { store.claim_key_packages(&ben).await })
        })
        .collect();
    let mut claims = Vec::new();
    for task in tasks {
        claims.push(task.await?);
    }
    let mut got: Vec<String> = Vec::new();
    for claim in claims {
        let claim = claim?;
        ensure!(claim.len() == 1 && !claim[0].last_resort, "{claim:?}");
        got.push(claim[0].key_package.clone());
    }
    got.sort();
    ensure!(got == ["S1AxCg==", "S1AyCg==", "S1AzCg=="], "{got:?}");
    for _ in 0..2 {
        let claim = store.claim_key_packages(&ben).await?;
        ensure!(
            claim.len() == 1 && claim[0].last_resort && claim[0].key_package == "TEFTVA==",
            "{claim:?}"
        );
    }
    let left = store
        .key_package_stock(&ben, &DeviceId::parse("d1")?)
        .await?;
    ensure!(left.available == 0 && left.last_resort, "{left:?}");
    // Ana published none: her claim is empty, an unknown user's is NOT_FOUND.
    ensure!(store.claim_key_packages(&ana).await?.is_empty());
    let ghost = UserId::parse("ghost")?;
    ensure!(matches!(
        store.claim_key_packages(&ghost).await,
        Err(StoreError::Rejected(Rejection::NotFound(_)))
    ));
    Ok(())
}
