//! End-to-end encrypted conversations (chapter 16, docs/E2EE.md): the server is the MLS
//! Delivery Service. It orders opaque MLS messages under the conversation's row lock: the first
//! Commit of an epoch wins, a message of another epoch is refused with the winning Commit's seq,
//! a Welcome reaches only the devices it names, the membership follows the Commits, and each
//! KeyPackage is handed out once.
//!
//! The server never parses an MLS message, so these checks post arbitrary bytes (standard base64
//! of the check's own nonce) and observe only the Delivery Service's rules.

use parley_client::{Client, Method, NewConversation};
use serde_json::{json, Value};

use super::{refusal, Observed};
use crate::context::Ctx;
use crate::error::{ensure, CheckError};

/// Characters of a check's opaque payloads: a multiple of 4 letters and digits is standard
/// base64 without padding (here 12 bytes).
const PAYLOAD_LEN: usize = 16;

/// Base64 of arbitrary bytes: letters and digits, new for each call.
fn payload() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..PAYLOAD_LEN)
        .map(|_| char::from(ALPHABET[rand::random::<usize>() % ALPHABET.len()]))
        .collect()
}

/// Creates the encrypted conversation `name` owned by `owner`: the owner is its only member and
/// the group is at epoch 0.
async fn encrypted(ctx: &Ctx, owner: &Client, name: &str) -> Result<String, CheckError> {
    let conv = ctx.id(name);
    let body = json!({"conv_id": conv, "kind": "encrypted", "members": []});
    let (status, answer) = owner
        .raw(Method::POST, "/v1/conversations")
        .json(&body)
        .send()
        .await?;
    ctx.note(format!("POST /v1/conversations {body} → {status} {answer}"));
    ensure!(
        (200..300).contains(&status),
        "creating the encrypted conversation answered {status} {answer}"
    );
    Ok(conv)
}

/// An MLS write's body without welcome or membership changes.
fn mls(client_msg_id: &str, kind: &str, epoch: i64) -> Value {
    json!({"client_msg_id": client_msg_id, "kind": kind, "epoch": epoch, "message": payload()})
}

/// `POST /v1/conversations/{conv}/mls` as `who`: the status and the body.
async fn post_mls(
    ctx: &Ctx,
    who: &str,
    c: &Client,
    conv: &str,
    body: &Value,
) -> Result<(u16, Value), CheckError> {
    let path = format!("/v1/conversations/{conv}/mls");
    let (status, answer) = c.raw(Method::POST, &path).json(body).send().await?;
    ctx.note(format!("{who}: POST {path} {body} → {status} {answer}"));
    Ok((status, answer))
}

/// An MLS write that must be accepted: its ack.
async fn accepted(
    ctx: &Ctx,
    who: &str,
    c: &Client,
    conv: &str,
    body: &Value,
) -> Result<Value, CheckError> {
    let (status, answer) = post_mls(ctx, who, c, conv, body).await?;
    ensure!(
        status == 200,
        "{who}'s {} of epoch {} answered {status} {answer}",
        body["kind"],
        body["epoch"]
    );
    Ok(answer)
}

/// The commit of epoch 0 by the owner adding `ben` with a Welcome for `ben_device`: its ack.
async fn add_ben(
    ctx: &Ctx,
    ana: &Client,
    conv: &str,
    ben_device: &str,
) -> Result<Value, CheckError> {
    let ben_id = ctx.id("ben");
    let mut body = mls("commit-0", "commit", 0);
    body["add_users"] = json!([ben_id]);
    body["welcome"] = json!({"message": payload(),
        "devices": [{"user_id": ben_id, "device_id": ben_device}]});
    let ack = accepted(ctx, "ana", ana, conv, &body).await?;
    ensure!(
        ack["epoch"] == 1,
        "the commit of epoch 0 answered epoch {}, expected 1",
        ack["epoch"]
    );
    Ok(ack)
}

/// Every event of `conv` that `who` reads from the start, as JSON.
async fn events(ctx: &Ctx, who: &str, c: &Client, conv: &str) -> Result<Vec<Value>, CheckError> {
    let path = format!("/v1/conversations/{conv}/events?after=0");
    let (status, page) = c.raw(Method::GET, &path).send().await?;
    ensure!(status == 200, "{who}: GET {path} answered {status} {page}");
    let events = page["events"].as_array().cloned().unwrap_or_default();
    ctx.note(format!(
        "{who}: GET {path} → {:?}",
        events
            .iter()
            .map(|e| format!("{}@{}", e["kind"].as_str().unwrap_or("?"), e["seq"]))
            .collect::<Vec<_>>()
    ));
    Ok(events)
}

/// The seq of an ack or event.
fn seq(v: &Value) -> i64 {
    v["seq"].as_i64().unwrap_or(-1)
}

/// Two Commits for one epoch posted at once: the first wins, the other is refused with the
/// winner's seq, and the log holds one Commit of that epoch.
pub async fn commit_first_wins(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = encrypted(ctx, &ana, "e").await?;
    add_ben(ctx, &ana, &conv, "d1").await?;
    let (a_body, b_body) = (mls("commit-a", "commit", 1), mls("commit-b", "commit", 1));
    let (a, b) = tokio::join!(
        post_mls(ctx, "ana", &ana, &conv, &a_body),
        post_mls(ctx, "ben", &ben, &conv, &b_body)
    );
    let (a, b) = (a?, b?);
    let ((winner, won), (loser, lost)) = match (a.0, b.0) {
        (200, 409) => (("ana", a.1), ("ben", b.1)),
        (409, 200) => (("ben", b.1), ("ana", a.1)),
        _ => {
            return Err(CheckError::Failed(format!(
                "two commits of epoch 1: ana {} {}, ben {} {}; expected one 200 and one 409",
                a.0, a.1, b.0, b.1
            )))
        }
    };
    let error = &lost["error"];
    ensure!(
        error["code"] == "EPOCH_CONFLICT"
            && error["epoch"] == 2
            && error["winning_seq"] == seq(&won),
        "{loser}'s losing commit answered {lost}, expected EPOCH_CONFLICT with epoch 2 and \
         winning_seq {} ({winner}'s)",
        seq(&won)
    );
    ensure!(
        won["epoch"] == 2,
        "{winner}'s winning commit answered {won}"
    );
    let log = events(ctx, "ana", &ana, &conv).await?;
    let commits: Vec<i64> = log
        .iter()
        .filter(|e| e["kind"] == "mls_commit" && e["mls_epoch"] == 1)
        .map(seq)
        .collect();
    ensure!(
        commits == vec![seq(&won)],
        "commits of epoch 1 in the log at {commits:?}, expected only {winner}'s at {}",
        seq(&won)
    );
    Ok(format!(
        "{winner}'s commit of epoch 1 won at seq {}; {loser}'s 409 EPOCH_CONFLICT epoch 2 \
         winning_seq {}; one commit of epoch 1 in the log",
        seq(&won),
        error["winning_seq"]
    ))
}

/// An application message made in an epoch the conversation has left is refused with the
/// Commit that ended it; one of the current epoch is accepted.
pub async fn stale_epoch_refused(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let conv = encrypted(ctx, &ana, "e").await?;
    let commit = add_ben(ctx, &ana, &conv, "d1").await?;
    let (status, answer) =
        post_mls(ctx, "ana", &ana, &conv, &mls("app-0", "application", 0)).await?;
    ensure!(
        status != 200,
        "the stale application message of epoch 0 was accepted after the epoch moved to 1: \
         {status} {answer}"
    );
    let error = &answer["error"];
    ensure!(
        status == 409
            && error["code"] == "EPOCH_CONFLICT"
            && error["epoch"] == 1
            && error["winning_seq"] == seq(&commit),
        "the stale application message answered {status} {answer}, expected 409 \
         EPOCH_CONFLICT epoch 1 winning_seq {}",
        seq(&commit)
    );
    let fresh = accepted(ctx, "ben", &ben, &conv, &mls("app-1", "application", 1)).await?;
    ensure!(
        fresh["epoch"] == 1,
        "the application message of epoch 1 answered {fresh}"
    );
    Ok(format!(
        "epoch 0 after the commit at seq {}: 409 EPOCH_CONFLICT winning_seq {}; epoch 1: 200 \
         at seq {}",
        seq(&commit),
        error["winning_seq"],
        seq(&fresh)
    ))
}

/// A Welcome is delivered with its message to the devices it names only; every other reader
/// sees the event without it.
pub async fn welcome_only_named_devices(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    ctx.user("ben").await?;
    let phone = ctx.device("ben", "phone").await?;
    let laptop = ctx.device("ben", "laptop").await?;
    let conv = encrypted(ctx, &ana, "e").await?;
    let ack = add_ben(ctx, &ana, &conv, "phone").await?;
    let Some(welcome_seq) = ack["welcome_seq"].as_i64() else {
        return Err(CheckError::Failed(format!(
            "the commit with a welcome answered no welcome_seq: {ack}"
        )));
    };
    let ben_id = ctx.id("ben");
    let mut seen = Vec::new();
    for (who, c, named) in [
        ("ben/phone", &phone, true),
        ("ben/laptop", &laptop, false),
        ("ana", &ana, false),
    ] {
        let log = events(ctx, who, c, &conv).await?;
        let seqs: Vec<i64> = log.iter().map(seq).collect();
        let gapless = seqs.windows(2).all(|w| w[1] == w[0] + 1);
        ensure!(gapless, "{who} reads seqs {seqs:?}: a gap");
        let Some(w) = log.iter().find(|e| seq(e) == welcome_seq) else {
            return Err(CheckError::Failed(format!(
                "{who} does not see the welcome at seq {welcome_seq}: seqs {seqs:?}"
            )));
        };
        ensure!(
            w["kind"] == "mls_welcome",
            "{who} sees {w} at the welcome's seq {welcome_seq}"
        );
        let has_message = w.get("mls_message").is_some_and(|m| !m.is_null());
        let has_devices = w
            .get("mls_devices")
            .and_then(Value::as_array)
            .is_some_and(|d| !d.is_empty());
        if named {
            let devices = &w["mls_devices"];
            ensure!(
                has_message && *devices == json!([{"user_id": ben_id, "device_id": "phone"}]),
                "the named device ben/phone sees the welcome as {w}, without its message or \
                 devices"
            );
        } else {
            ensure!(
                !has_message && !has_devices,
                "{who}, not named by the welcome, sees it as {w}"
            );
        }
        seen.push(format!(
            "{who} {}",
            if named { "with its message" } else { "without" }
        ));
    }
    Ok(format!(
        "the welcome at seq {welcome_seq}: {}; no gaps",
        seen.join(", ")
    ))
}

/// A Commit's `add_users` joins right after it, `remove_users` leaves; the removed member reads
/// nothing after the leave; plaintext writes and the MLS route refuse the wrong kind of
/// conversation.
pub async fn membership_follows_commits(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    ctx.user("cai").await?;
    ctx.user("dan").await?;
    let (ben_id, cai_id, dan_id) = (ctx.id("ben"), ctx.id("cai"), ctx.id("dan"));
    let conv = encrypted(ctx, &ana, "e").await?;
    let mut add = mls("commit-0", "commit", 0);
    add["add_users"] = json!([ben_id, cai_id]);
    let added = accepted(ctx, "ana", &ana, &conv, &add).await?;
    let n = seq(&added);
    let mut remove = mls("commit-1", "commit", 1);
    remove["remove_users"] = json!([ben_id]);
    let removed = accepted(ctx, "ana", &ana, &conv, &remove).await?;
    let m = seq(&removed);
    let later = accepted(ctx, "ana", &ana, &conv, &mls("app-2", "application", 2)).await?;
    let log = events(ctx, "ana", &ana, &conv).await?;
    let at = |s: i64| {
        log.iter()
            .find(|e| seq(e) == s)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let membership = |s: i64, kind: &str, user: &str| {
        let e = at(s);
        e["kind"] == kind && e["subject_user"] == user
    };
    ensure!(
        at(n)["kind"] == "mls_commit"
            && membership(n + 1, "join", &ben_id)
            && membership(n + 2, "join", &cai_id),
        "the adding commit at {n}: expected ben's and cai's joins at {} and {}, the log holds \
         {} and {}",
        n + 1,
        n + 2,
        at(n + 1),
        at(n + 2)
    );
    ensure!(
        at(m)["kind"] == "mls_commit" && membership(m + 1, "leave", &ben_id),
        "the removing commit at {m}: expected ben's leave at {}, the log holds {}",
        m + 1,
        at(m + 1)
    );
    let bens = events(ctx, "ben", &ben, &conv).await?;
    let bens_last = bens.iter().map(seq).max().unwrap_or(0);
    ensure!(
        bens_last == m + 1,
        "the removed ben reads up to seq {bens_last}, expected his leave at {} and nothing \
         after it (the application message is at {})",
        m + 1,
        seq(&later)
    );
    let plaintext = ana.send(&conv, "plain-1", "plaintext").await;
    ensure!(
        refusal(&plaintext) == "409 ENCRYPTED_CONVERSATION",
        "a plaintext message in the encrypted conversation: {}",
        refusal(&plaintext)
    );
    let member = ana.add_member(&conv, &dan_id).await;
    ensure!(
        refusal(&member) == "409 ENCRYPTED_CONVERSATION",
        "POST /members on the encrypted conversation: {}",
        refusal(&member)
    );
    let plain = ctx.id("plain");
    ana.create_conversation(&NewConversation::group([ben_id.clone()]).with_conv_id(&plain))
        .await?;
    let (status, answer) = post_mls(
        ctx,
        "ana",
        &ana,
        &plain,
        &mls("mls-plain", "application", 0),
    )
    .await?;
    ensure!(
        status == 409 && answer["error"]["code"] == "NOT_ENCRYPTED",
        "POST /mls into a plain group answered {status} {answer}, expected 409 NOT_ENCRYPTED"
    );
    Ok(format!(
        "commit {n}, joins {} and {}; commit {m}, leave {}; ben reads up to {bens_last}, not \
         {}; plaintext and members 409 ENCRYPTED_CONVERSATION, mls into a group 409 NOT_ENCRYPTED",
        n + 1,
        n + 2,
        m + 1,
        seq(&later)
    ))
}

/// A claim of `user`'s packages by `c`: the one package of the user's only device.
async fn claim_one(
    ctx: &Ctx,
    c: &Client,
    user: &str,
    label: &str,
) -> Result<(String, bool), CheckError> {
    let path = format!("/v1/users/{user}/key-packages/claim");
    let (status, answer) = c.raw(Method::POST, &path).send().await?;
    ctx.note(format!("{label}: POST {path} → {status} {answer}"));
    ensure!(status == 200, "{label} answered {status} {answer}");
    let packages = answer["key_packages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        packages.len() == 1,
        "{label} answered {} packages for a user with one device: {answer}",
        packages.len()
    );
    let p = &packages[0];
    Ok((
        p["key_package"].as_str().unwrap_or_default().to_owned(),
        p["last_resort"] == true,
    ))
}

/// Each ordinary KeyPackage is claimed once, two racing claims included; then the last-resort
/// one, which stays.
pub async fn key_packages_claimed_once(ctx: &Ctx) -> Observed {
    let ana = ctx.user("ana").await?;
    let ben = ctx.user("ben").await?;
    let ben_id = ctx.id("ben");
    let ordinary: Vec<String> = (0..3).map(|_| payload()).collect();
    let last_resort = payload();
    let upload = json!({"key_packages": ordinary, "last_resort": last_resort});
    let (status, answer) = ben
        .raw(Method::POST, "/v1/devices/me/key-packages")
        .json(&upload)
        .send()
        .await?;
    ctx.note(format!(
        "ben: POST /v1/devices/me/key-packages {upload} → {status} {answer}"
    ));
    ensure!(
        status == 200 && answer["available"] == 3 && answer["last_resort"] == true,
        "publishing 3 packages and a last-resort one answered {status} {answer}"
    );
    let (a, b) = tokio::join!(
        claim_one(ctx, &ana, &ben_id, "claim 1 (concurrent)"),
        claim_one(ctx, &ana, &ben_id, "claim 2 (concurrent)")
    );
    let mut claimed = vec![a?, b?];
    claimed.push(claim_one(ctx, &ana, &ben_id, "claim 3").await?);
    let mut got: Vec<&String> = claimed.iter().map(|c| &c.0).collect();
    got.sort();
    let mut want: Vec<&String> = ordinary.iter().collect();
    want.sort();
    ensure!(
        got == want && claimed.iter().all(|c| !c.1),
        "three claims answered {claimed:?}, expected the 3 ordinary packages {ordinary:?} once \
         each"
    );
    for label in ["claim 4", "claim 5"] {
        let c = claim_one(ctx, &ana, &ben_id, label).await?;
        ensure!(
            c == (last_resort.clone(), true),
            "{label} answered {c:?}, expected the last-resort package {last_resort}"
        );
    }
    let (status, stock) = ben
        .raw(Method::GET, "/v1/devices/me/key-packages")
        .send()
        .await?;
    ctx.note(format!(
        "ben: GET /v1/devices/me/key-packages → {status} {stock}"
    ));
    ensure!(
        status == 200 && stock["available"] == 0 && stock["last_resort"] == true,
        "after the claims the device holds {status} {stock}, expected available 0, last_resort \
         true"
    );
    Ok(
        "3 ordinary packages each claimed once (two claims racing), then the last-resort one \
         twice; available 0, last_resort true"
            .to_owned(),
    )
}
