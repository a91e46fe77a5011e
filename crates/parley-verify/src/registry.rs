//! Every named check: SPEC §12's table and the later chapters' checks, under the ids the cargo
//! tests use (`check_04_normal_history` is `04-normal-history`).

use futures::future::BoxFuture;

use crate::checks::{
    access, concurrency, database, gateways, media, mls, more, push, realtime, recall, relations,
    retention, search, seed, sync_read, Observed,
};
use crate::context::Ctx;

/// A check's code: the observed value, or why it did not pass.
pub type CheckFn = for<'a> fn(&'a Ctx) -> BoxFuture<'a, Observed>;

/// What a check needs of the deployment beyond HTTP and WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// HTTP and WebSocket only.
    Api,
    /// `--database-url` (rows, plans, locks, scratch schemas).
    Database,
    /// At least this many gateways listed by `/v1/admin/gateways`.
    Gateways(usize),
    /// A build with the test-only cargo feature `test-breaks`, whose guards a control removes
    /// (`PARLEY_TEST_BREAKS`): a negative control of the cargo tests, never run against a
    /// deployment.
    TestBuild,
}

/// One named check.
#[derive(Clone, Copy)]
pub struct CheckDef {
    pub id: &'static str,
    pub chapter: &'static str,
    pub claim: &'static str,
    pub expected: &'static str,
    pub needs: Needs,
    /// `None`: not implemented in verify (reported `NOT_RUN`).
    pub run: Option<CheckFn>,
}

/// Wraps an `async fn(&Ctx) -> Observed` as a [`CheckFn`].
macro_rules! boxed {
    ($f:path) => {{
        fn run(ctx: &Ctx) -> BoxFuture<'_, Observed> {
            Box::pin($f(ctx))
        }
        Some(run as CheckFn)
    }};
}

macro_rules! check {
    ($id:literal, $claim:literal, $expected:literal, $needs:expr, $run:expr) => {
        CheckDef {
            id: $id,
            chapter: chapter_of($id),
            claim: $claim,
            expected: $expected,
            needs: $needs,
            run: $run,
        }
    };
}

/// The chapter of an id: its first two characters.
const fn chapter_of(id: &'static str) -> &'static str {
    match id.as_bytes() {
        [b'0', b'4', ..] => "04",
        [b'0', b'5', ..] => "05",
        [b'0', b'6', ..] => "06",
        [b'0', b'7', ..] => "07",
        [b'0', b'8', ..] => "08",
        [b'0', b'9', ..] => "09",
        [b'1', b'0', ..] => "10",
        [b'1', b'1', ..] => "11",
        [b'1', b'2', ..] => "12",
        [b'1', b'3', ..] => "13",
        [b'1', b'4', ..] => "14",
        [b'1', b'5', ..] => "15",
        [b'1', b'6', ..] => "16",
        _ => "??",
    }
}

use Needs::{Api, Database, Gateways, TestBuild};

/// Every check, in chapter order. Ids are unique (a unit test holds it).
pub fn registry() -> Vec<CheckDef> {
    vec![
        check!("04-normal-history", "A conversation's first message follows the joins; each member reads from their own join.",
            "first message gets seq 3; ana sees join@1, join@2, msg@3; ben sees join@2, msg@3", Api, boxed!(seed::normal_history)),
        check!("04-non-member-rejected", "A non-member cannot write.",
            "cai's send gets NOT_MEMBER; head stays 3", Api, boxed!(seed::non_member_rejected)),
        check!("04-unknown-conv-same-error", "A missing conversation cannot be told from one the caller is not in.",
            "a missing conversation answers exactly like a non-member", Api, boxed!(seed::unknown_conv_same_error)),
        check!("04-idempotency-mismatch", "A request key is bound to its request.",
            "same client_msg_id, other body → IDEMPOTENCY_MISMATCH", Api, boxed!(seed::idempotency_mismatch)),
        check!("04-concurrent-replay-one-row", "Concurrent identical sends store one message.",
            "32 concurrent identical sends → 1 row, 1 message_id, 1 seq, exactly 1 dup=false", Api, boxed!(concurrency::concurrent_replay_one_row)),
        check!("04-control-check-then-insert-duplicates", "Negative control: without the unique constraint, check-then-insert duplicates under the same race.",
            "check-then-insert without the constraint under the same race → more than 1 row", Database, boxed!(database::control_check_then_insert_duplicates)),
        check!("04-seq-gapless", "Concurrent distinct sends leave a gapless log.",
            "200 concurrent distinct sends → count = max(seq), next_seq = max + 1", Api, boxed!(concurrency::seq_gapless)),
        check!("04-control-sequence-gaps", "Negative control: a database sequence leaves gaps on rollback.",
            "a database sequence with 3 of 10 transactions rolled back → 7 rows, max 10", Database, boxed!(database::control_sequence_gaps)),
        check!("04-control-seq-without-row-lock", "Negative control: Parley's own send path without the conversation's row lock breaks the log under the same race.",
            "200 concurrent distinct sends over 4 stores with no-row-lock → sends fail on the (conv_id, seq) key: two transactions took one seq", TestBuild, None),
        check!("04-history-uses-pk", "The range read of the log is a primary-key range scan.",
            "the range query's plan uses the primary key", Database, boxed!(database::history_uses_pk)),
        check!("04-concurrent-mixed-sends-answered-each", "Concurrent sends of a batch are each answered with their own outcome.",
            "68 concurrent sends: 49 messages at consecutive seqs, one winner per key, replays answered like it, the other body IDEMPOTENCY_MISMATCH, a non-member NOT_MEMBER", Api, boxed!(more::concurrent_mixed_sends_answered_each)),
        check!("04-concurrent-sends-to-many-conversations", "Concurrent sends spread over conversations keep each log gapless.",
            "8 conversations × 12 concurrent sends → every log 1..=13", Api, boxed!(concurrency::concurrent_sends_to_many_conversations)),
        check!("04-mixed-replays-and-distinct-sends", "Replays and distinct sends at once: one event per request key, gapless.",
            "80 sends of 20 keys → 20 messages, seqs 3..=22", Api, boxed!(concurrency::mixed_replays_and_distinct_sends)),
        check!("04-two-nodes-replay-one-row-and-gapless", "Replays and distinct sends through two nodes on one database.",
            "one row per key and a gapless log across nodes", Gateways(2), None),
        check!("04-stuck-transaction-bounded", "A transaction stuck holding a conversation's row lock is ended by idle_in_transaction_session_timeout, which the server sets on its own connections.",
            "the server reports a timeout > 0; a lock-holding idle transaction on a connection built like the server's is ended within timeout + 5 s and the blocked send goes through; no session idles in a transaction longer", Database, boxed!(database::stuck_transaction_bounded)),
        check!("04-hot-conversation-write-ceiling", "Measures sends/s into one conversation: 16 closed-loop senders for 3 s (a measurement).",
            "a rate, every send acked, head = 1 + sends", Api, boxed!(concurrency::hot_conversation_write_ceiling)),
        check!("05-kick-old-connection", "A device's new connection replaces its old one.",
            "old connection: kicked + close 4001; new one receives pushes", Api, boxed!(realtime::kick_old_connection)),
        check!("05-old-cleanup-keeps-new-route", "The old connection's cleanup keeps the new route.",
            "after the old connection's cleanup the device still receives pushes on the new one", Api, boxed!(more::old_cleanup_keeps_new_route)),
        check!("05-revoked-token-closes-socket", "Revoking a token closes its sockets.",
            "close 4003", Api, boxed!(realtime::revoked_token_closes_socket)),
        check!("05-reissued-token-closes-socket", "Re-issuing a device's token closes the old token's sockets only.",
            "old token's socket: close 4003, the old token refused with 401; the new token connects; the user's other device stays connected", Api, boxed!(realtime::reissued_token_closes_socket)),
        check!("05-control-cleanup-without-compare-and-delete", "Negative control: the old connection's cleanup without compare-and-delete deletes the new route.",
            "with cleanup-without-cad the kicked connection's cleanup leaves the device without a route", TestBuild, None),
        check!("06-control-ack-before-commit", "Negative control: a send acked before its commit loses an acked message when the commit fails.",
            "with ack-before-commit a failed commit is acked at seq 3, the log has no seq 3, and the next send gets seq 3", TestBuild, None),
        check!("06-ack-after-commit", "No push before commit.",
            "while the conversation's row lock is held the send blocks and nothing is pushed; after the release the ack and the push of seq 3", Database, boxed!(database::ack_after_commit)),
        check!("06-commit-failure-answers-outcome-unknown", "A failed commit is answered OUTCOME_UNKNOWN.",
            "503 OUTCOME_UNKNOWN, nothing pushed", Database, None),
        check!("06-failure-before-commit-answers-unavailable", "A failure before the commit is answered UNAVAILABLE.",
            "503 UNAVAILABLE, nothing written", Database, None),
        check!("06-member-change-commit-failure-outcome-unknown", "A failed commit of a member change is answered OUTCOME_UNKNOWN.",
            "503 OUTCOME_UNKNOWN", Database, None),
        check!("06-push-to-all-devices", "A message reaches every online device of every member.",
            "one event frame on each other device, the sender's included", Api, boxed!(realtime::push_to_all_devices)),
        check!("06-retry-after-lost-ack", "A retry with the same key after a lost ack learns the original outcome.",
            "dup=true, same seq and message_id, one message", Api, boxed!(sync_read::retry_after_lost_ack)),
        check!("06-send-with-retry-recovers-from-one-failed-commit", "The SDK's retry turns one failed commit into a known outcome.",
            "one message after one failed commit", Database, None),
        check!("06-slow-consumer-isolated", "A slow consumer is closed without slowing others.",
            "the fast member gets every message in order; the socket that never reads ends (4008, or dropped) before the last", Api, boxed!(realtime::slow_consumer_isolated)),
        check!("07-epoch-invalidates-cursor", "An epoch bump invalidates cursors.",
            "409 EPOCH_CHANGED over HTTP and WebSocket; refetch at the new epoch", Database, boxed!(database::epoch_invalidates_cursor)),
        check!("07-offline-device-catches-up", "A gap is detected and filled: an offline device catches up from its cursor.",
            "every missed event once, in order", Api, boxed!(sync_read::offline_device_catches_up)),
        check!("07-read-state-across-devices", "Read state is the same on every device after sync.",
            "every device's view and feed show the same read_seq and unread", Api, boxed!(more::read_state_across_devices)),
        check!("07-sync-feed-only-changed", "The feed returns only conversations that changed.",
            "1 of 3 conversations after one change; a bad token is 400", Api, boxed!(sync_read::sync_feed_only_changed)),
        check!("07-through-seq-skips-invisible", "through_seq moves past events the reader cannot see.",
            "away: through_seq 4 = head; after the rejoin events 7, 8 through 8; a page of one through 7", Api, boxed!(more::through_seq_skips_invisible)),
        check!("08-leave-closes-interval", "Leaving closes the member's interval.",
            "the leaver sees their leave event and nothing after it", Api, boxed!(seed::leave_closes_interval)),
        check!("08-member-cannot-remove-others", "A plain member cannot remove others.",
            "403 FORBIDDEN; nothing changes", Api, boxed!(sync_read::member_cannot_remove_others)),
        check!("08-pull-group-hints-coalesced", "A pull group gets few hints per burst, no events.",
            "fewer hints than messages, heads increasing to the head, 0 events; sync pulls all", Api, boxed!(realtime::pull_group_hints_coalesced)),
        check!("08-threshold-switches-to-pull", "A group switches to pull at the join that reaches the threshold.",
            "delivery_mode pull after that join; a hint, no event, for the next message", Api, boxed!(more::threshold_switches_to_pull)),
        check!("09-own-send-advances-read", "An own message counts as read.",
            "read_seq = own message's seq, unread 0", Api, boxed!(sync_read::own_send_advances_read)),
        check!("09-read-monotonic", "Read positions never move back.",
            "a lower mark answers the current position; beyond the head clamps", Api, boxed!(sync_read::read_monotonic)),
        check!("09-read-position-monotonic", "The store keeps read positions monotonic under concurrent marks.",
            "the highest mark wins; no answer below its mark", Api, boxed!(more::read_position_monotonic)),
        check!("09-read-reaches-other-devices", "A read position reaches every other device.",
            "read frame on the other device, none on the marking one; unread drops", Api, boxed!(realtime::read_reaches_other_devices)),
        check!("09-unread-respects-membership", "Unread counts only messages inside the member's periods.",
            "1 unread after joining at 5; none from before", Api, boxed!(sync_read::unread_respects_membership)),
        check!("10-cross-gateway-kick", "A device's connection on another gateway is kicked.",
            "kicked + 4001 across gateways", Gateways(2), None),
        check!("10-device-route-names-the-last-claim", "A device's route names its last claim.",
            "the route is the last connection's", Gateways(2), None),
        check!("10-every-device-on-every-gateway", "Every device receives on whichever gateway it is.",
            "every device gets every event", Gateways(2), None),
        check!("10-expired-routes-are-reaped-in-batches", "Expired routes are reaped in batches.",
            "routes of an expired lease deleted in bounded batches", Gateways(2), None),
        check!("10-gateway-listing-is-sorted", "The gateways listing is sorted and includes this node.",
            "sorted by gateway_id, no repeats, this node listed", Api, boxed!(gateways::gateway_listing_is_sorted)),
        check!("10-graceful-drain", "A drained gateway hands its devices over.",
            "no acked message lost across a drain", Gateways(2), None),
        check!("10-killed-gateway-converges", "A killed gateway's routes converge and no acked message is lost.",
            "routes 0 within two leases, nothing lost", Gateways(2), None),
        check!("10-lease-lost-refuses-connections", "A gateway without a lease refuses connections.",
            "503 LEASE_EXPIRED", Gateways(2), None),
        check!("10-nats-restart", "Gateways recover after the NATS server restarts.",
            "deliveries resume", Gateways(2), None),
        check!("10-reaper-skips-locked-routes", "The reaper skips routes being claimed.",
            "no locked route deleted", Gateways(2), None),
        check!("10-released-gateway-leaves-nothing", "A released gateway leaves no rows.",
            "no lease, no routes", Gateways(2), None),
        check!("10-renewed-lease-keeps-its-routes", "A renewed lease keeps its routes.",
            "routes kept", Gateways(2), None),
        check!("11-access-time-matrix", "Reads, writes and recalls follow the member's periods.",
            "never-member = unknown conversation everywhere; former member reads its period, writes refused; rejoined member reads both periods; pushes follow the periods", Api, boxed!(access::access_time_matrix)),
        check!("11-periods-bound-reads", "A member reads only inside their periods.",
            "a member who left and rejoined reads 2, 3, 4, 6, 7: nothing of the gap", Api, boxed!(more::periods_bound_reads)),
        check!("11-purge-advances-min-seq", "A purge advances min_seq.",
            "min_seq past the purged events; truncated read; the next send continues the sequence", Api, boxed!(retention::purge_advances_min_seq)),
        check!("11-purge-never-waits-for-a-busy-conversation", "The purge skips a busy conversation instead of waiting.",
            "with one retention conversation locked, a free one and a later one are purged (no round stuck); the locked one after the release", Database, boxed!(retention::purge_never_waits_for_a_busy_conversation)),
        check!("11-recall-erases-body", "A recall erases the body for every reader.",
            "recalled, no body, for sender and reader", Api, boxed!(recall::recall_erases_body)),
        check!("11-recall-idempotent", "Recalling twice answers the first recall.",
            "same answer, one recall event", Api, boxed!(recall::recall_idempotent)),
        check!("11-recall-over-http", "Recall over HTTP.",
            "{seq, target_seq}, recall event pushed, target recalled without a body, a repeat pushes nothing; NOT_SENDER, NOT_FOUND for a join, BAD_REQUEST; late: RECALL_WINDOW_EXPIRED", Api, boxed!(recall::recall_over_http)),
        check!("11-recall-window", "A recall outside the window is refused.",
            "409 RECALL_WINDOW_EXPIRED; body kept", Api, boxed!(recall::recall_window)),
        check!("11-retry-after-purge-hits-tombstone", "A retry after purge hits the tombstone.",
            "the original seq and message id, dup and purged, over HTTP and WebSocket", Api, boxed!(retention::retry_after_purge_hits_tombstone)),
        check!("11-tombstone-expiry", "Tombstones expire after their TTL.",
            "retries answered purged while the tombstone lives, then the same request is a new message", Api, boxed!(retention::tombstone_expiry)),
        check!("11-tombstone-expiry-in-background", "Tombstones expire in the background.",
            "the server's own job frees the key after the TTL: retries purged, then a new message", Api, boxed!(retention::tombstone_expiry)),
        check!("12-relations-fold-into-reads", "Replies, edits, reactions and threads are events of the log, folded into what every reader reads.",
            "reply names 4; body edited with edited_at; 👍 2 (me) 🎉 1 per reader; thread 1 reply, latest 10; log 1..=10; edits and reactions not unread", Api, boxed!(relations::relations_fold_into_reads)),
        check!("12-hidden-target", "A relation to a message the actor cannot see answers like one to a message that does not exist.",
            "reply, thread, react, edit to a seq before the actor's period or of a join → 404 NOT_FOUND, byte for byte as for a missing seq; a stranger NOT_MEMBER like a missing conversation; nothing written", Api, boxed!(relations::hidden_target)),
        check!("12-control-target-without-visibility", "Negative control: without the period check on relation targets a late member relates to earlier messages.",
            "with no-target-visibility, 12-hidden-target's store check fails on the hidden reply target; without it the check passes (both stores)", TestBuild, None),
        check!("12-edit-keyed-and-recall-erases", "An edit is idempotent like a send; a recall erases the edits' bodies and closes the message to relations.",
            "retry dup with the same seq; other body IDEMPOTENCY_MISMATCH; another member NOT_SENDER; after recall no body anywhere, RECALLED for edit, react, reply; the edit's retry still dup", Api, boxed!(relations::edit_keyed_and_recall_erases)),
        check!("12-relations-resolve-once", "Concurrent identical reactions and edits write one event each.",
            "16 racing PUTs → 1 changed; 16 racing edits → 1 dup=false; head 6; DELETE twice → one unreact", Api, boxed!(relations::relations_resolve_once)),
        check!("12-relations-pushed-and-caught-up", "Edits and reactions are pushed in seq order and caught up exactly once.",
            "pushed edit@5, react@6, unreact@7, react@8 (a WebSocket react frame); an edit frame of another's message NOT_SENDER; pages of 2 from 1 bring 2..=8 once", Api, boxed!(relations::relations_pushed_and_caught_up)),
        check!("12-thread-pages", "A thread pages its root and replies by the log's cursors.",
            "pages [4, 6], [7, 8]; newest [8, 7, 6, 4]; a reply as root 400; a hidden root 404", Api, boxed!(relations::thread_pages)),
        check!("12-purge-takes-relations", "Purging a message erases its later edits' bodies and its reactions; later events keep their seqs.",
            "after the cut: the late edit and the reaction stay at their seqs without body or count; both edits' retries dup (tombstone and log)", Api, None),
        check!("12-mentions-counted", "Mentions of members are counted per member after their read position.",
            "ben 2, cai 1, ana 0; reading past one → 1; recall → 0", Api, boxed!(relations::mentions_counted)),
        check!("13-upload-stored-once", "Uploads are content-addressed and typed from their bytes.",
            "one sha256 for the same bytes; the same uploader gets the same media id, another uploader another; sniffed image/png 1x1 whatever was declared; the path stripped from the file name; a text declared image/png 415 MEDIA_TYPE_MISMATCH", Api, boxed!(media::upload_stored_once)),
        check!("13-media-served-to-readers", "A message's media are served to those who may read it, never run in the browser, and to no one else.",
            "a reader downloads with ETag, Cache-Control private, nosniff, inline only for raster images (an SVG is an attachment with a sandbox CSP); Range 206, past the end 416, If-None-Match 304; a member who joined later, a stranger and a missing id 404 alike; no token 401; a send naming another's upload 400 and nothing written", Api, boxed!(media::media_served_to_readers)),
        check!("13-control-media-without-visibility", "Negative control: without the membership check a download is served to a member who joined after the message.",
            "with no-media-visibility, the store serves a late member the media of a message before their period; without it None (both stores)", TestBuild, None),
        check!("13-recall-stops-serving", "A recall takes a message's media from everyone, signed URLs included.",
            "signed url 200 before; after the recall the reader, the sender and the signed url 404; the recalled message lists no attachments", Api, boxed!(media::recall_stops_serving)),
        check!("13-signed-urls", "Signed URLs need no header and bind their user, variant and expiry.",
            "url and thumbnail url fetched without a header; another user, variant or expiry 404; a url for a missing id NOT_FOUND", Api, boxed!(media::signed_urls)),
        check!("14-webpush-delivered", "A message to an offline member reaches their browser, encrypted for it and signed with the deployment's VAPID key.",
            "one notification to ben, decrypted: conv_id, seq, sender ana, preview, kind message, unread 1; VAPID key = GET /v1/push/vapid; TTL and Topic set; none to ana's own device", Api, boxed!(push::webpush_delivered)),
        check!("14-outbox-after-commit", "Notifications follow commits only.",
            "a reused request key with another body (IDEMPOTENCY_MISMATCH) and a non-member's send notify no one; the one notification names the committed seq with its committed text", Api, boxed!(push::outbox_after_commit)),
        check!("14-no-push-after-read", "A device is not notified of a message its user read on another device.",
            "first attempt refused 503; the laptop reads; no notification after the retry; the next message notified", Api, boxed!(push::no_push_after_read)),
        check!("14-control-push-after-read", "Negative control: without the read check at claim time a device is notified of a message already read.",
            "with push-ignores-read, the store's claim reports the read message unread; without it read_seq >= seq (both stores)", TestBuild, None),
        check!("14-muted-silent", "A muted conversation is silent; the mentions level rings for mentions and replies only.",
            "level none: nothing; mentions: the reply (kind reply) and the mention (kind mention), not the plain messages; all: the message; a level loud 400", Api, boxed!(push::muted_silent)),
        check!("14-dedupe-across-gateway-kill", "A gateway killed mid-work loses no notification, and another gateway does not send again what was sent.",
            "two gateway processes on PostgreSQL, kill -9 of one during a burst to 24 offline devices: each device notified of its latest seq; no (device, conv, seq) twice beyond those in flight at the kill", Gateways(2), None),
        check!("15-nonmember-finds-nothing", "A user who never was a member of a conversation finds nothing of it by search.",
            "the member finds the message by its word, in: and from:; the stranger finds nothing by any of them, and in: the conversation answers byte for byte like in: a missing one", Api, boxed!(search::nonmember_finds_nothing)),
        check!("15-outside-periods-not-found", "A member finds only the messages inside their membership periods.",
            "a member who joined after message 2, left before message 6 and rejoined finds 4 and 8, neither 2 nor 6; a member throughout finds all four", Api, boxed!(search::outside_periods_not_found)),
        check!("15-control-search-ignores-periods", "Negative control: without the period check a member finds messages from before they joined and after they left.",
            "with search-ignores-periods, 15-outside-periods-not-found fails on the messages outside the periods, through the server and the store; without it the check passes (both stores)", TestBuild, None),
        check!("15-recalled-not-found", "A recalled message is never found.",
            "found before the recall; after it neither the sender nor the reader finds it, the other message still found", Api, boxed!(search::recalled_not_found)),
        check!("15-purged-not-found", "A purged message is never found.",
            "found before the server's purge; after it (min_seq past it) no one finds it; a message sent later is found", Api, boxed!(search::purged_not_found)),
        check!("15-edit-matches-current-body", "An edited message is found by its current body only.",
            "after two edits neither the original nor the first edit's words find it; the last edit's do, at the message's seq, with its current body as the snippet; the edits are no hits", Api, boxed!(search::edit_matches_current_body)),
        check!("15-search-over-websocket", "The search frame answers what GET /v1/search answers.",
            "the same hits, snippets, highlights and cursors page by page, newest first and by rank; an empty query 400 BAD_REQUEST both ways", Api, boxed!(search::search_over_websocket)),
        check!("16-commit-first-wins", "The first Commit of an epoch wins; a concurrent one for the same epoch is refused with the winner's seq.",
            "two concurrent commits of epoch 1: one 200 (epoch 2), the other 409 EPOCH_CONFLICT with epoch 2 and winning_seq = the winner's seq; one mls_commit of epoch 1 in the log", Api, boxed!(mls::commit_first_wins)),
        check!("16-stale-epoch-refused", "An MLS message made in an epoch the conversation has left is refused.",
            "an application message of epoch 0 after the commit to epoch 1: 409 EPOCH_CONFLICT with winning_seq = the commit's seq; one of epoch 1: 200", Api, boxed!(mls::stale_epoch_refused)),
        check!("16-control-mls-any-epoch", "Negative control: without the epoch check a stale application message is accepted.",
            "with mls-any-epoch, 16-stale-epoch-refused fails on the accepted stale message; without it the check passes (both stores)", TestBuild, None),
        check!("16-welcome-only-named-devices", "A Welcome's message reaches only the devices it names.",
            "ben/phone, named, sees mls_message and mls_devices on the mls_welcome; ben/laptop and ana see the same seq (no gap) without them", Api, boxed!(mls::welcome_only_named_devices)),
        check!("16-membership-follows-commits", "The membership of an encrypted conversation follows its Commits; plaintext writes and MLS writes refuse the wrong kind of conversation.",
            "add_users' joins right after the commit, remove_users' leave; the removed member reads nothing after the leave; plaintext send and POST /members 409 ENCRYPTED_CONVERSATION; POST /mls into a group 409 NOT_ENCRYPTED", Api, boxed!(mls::membership_follows_commits)),
        check!("16-key-packages-claimed-once", "Each KeyPackage is claimed once; the last-resort one is kept.",
            "3 packages + a last-resort one: 3 claims (two concurrent) get the 3 ordinary ones once each, the next two the last-resort one; available 0, last_resort true", Api, boxed!(mls::key_packages_claimed_once)),
    ]
}

/// The check of `id`.
pub fn find(id: &str) -> Option<CheckDef> {
    registry().into_iter().find(|c| c.id == id)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use super::*;

    #[test]
    fn ids_are_unique_and_chapters_known() {
        let all = registry();
        let ids: BTreeSet<&str> = all.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), all.len(), "a repeated id");
        for c in &all {
            assert_ne!(c.chapter, "??", "{}", c.id);
            assert!(c.id.starts_with(c.chapter));
        }
    }

    /// The id of a test named `check_NN_…`: without the prefix, `_` as `-`, without a trailing
    /// store, bus or transport variant.
    fn id_of(test_name: &str) -> String {
        let mut id = test_name.trim_start_matches("check_").replace('_', "-");
        for variant in [
            "-postgres-only",
            "-process",
            "-http",
            "-sdk",
            "-ws",
            "-postgres",
            "-sqlite",
            "-nats",
            "-pgbus",
        ] {
            if let Some(stripped) = id.strip_suffix(variant) {
                id = stripped.to_owned();
            }
        }
        id
    }

    fn collect_check_names(dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                collect_check_names(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for part in text.split("fn check_").skip(1) {
                    let name: String = part
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if name.len() > 3 && name.as_bytes()[..2].iter().all(u8::is_ascii_digit) {
                        out.insert(format!("check_{name}"));
                    }
                }
            }
        }
    }

    #[test]
    fn every_check_test_of_the_workspace_has_an_id() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut names = BTreeSet::new();
        collect_check_names(&crates, &mut names);
        assert!(names.len() > 40, "found only {names:?}");
        let ids: BTreeSet<&str> = registry().iter().map(|c| c.id).collect();
        // A name without a sibling keeps its suffix (`check_11_recall_over_http`).
        let full = |n: &str| n.trim_start_matches("check_").replace('_', "-");
        let missing: Vec<String> = names
            .iter()
            .filter(|n| !ids.contains(id_of(n).as_str()) && !ids.contains(full(n).as_str()))
            .cloned()
            .collect();
        assert!(missing.is_empty(), "tests without a verify id: {missing:?}");
    }

    #[test]
    fn docs_list_every_check() {
        let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/VERIFY.md");
        let text = std::fs::read_to_string(&doc).expect("docs/VERIFY.md");
        for c in registry() {
            assert!(
                text.contains(&format!("| `{}` |", c.id)),
                "docs/VERIFY.md does not list {}",
                c.id
            );
        }
    }

    #[test]
    fn test_names_map_to_ids() {
        assert_eq!(id_of("check_04_seq_gapless_http"), "04-seq-gapless");
        assert_eq!(id_of("check_10_graceful_drain_pgbus"), "10-graceful-drain");
        assert_eq!(
            id_of("check_06_send_with_retry_recovers_from_one_failed_commit_postgres_only"),
            "06-send-with-retry-recovers-from-one-failed-commit"
        );
    }
}
