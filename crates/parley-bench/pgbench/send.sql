-- One send of a Parley message, as `parley bench` and the server run it: the statements of
-- crates/parley-store/src/pg/send.rs (SEND_LOCK_SQL, SEND_KEY_CHECK_SQL, SEND_INSERT_SQL) with
-- their parameters written as pgbench expressions. To a random one of the 1,000 direct chats
-- of setup.sql, from a random one of its two members, with a fresh client_msg_id.
--   pgbench -n -f send.sql -c 16 -T 30 parley_pgbench
\set i random(0, 999)
\set s 2 * :i + random(0, 1)
\set k random(1, 9000000000000000000)
BEGIN;
SELECT next_seq, msg_count FROM conversations WHERE conv_id = ('c' || :i) FOR NO KEY UPDATE \gset
SELECT 'event' AS src, seq, message_id, request_hash FROM events
   WHERE conv_id = ('c' || :i) AND sender_user = ('u' || :s) AND client_msg_id = ('pgb-' || :k)
 UNION ALL
 SELECT 'tombstone', seq, message_id, request_hash FROM idem_tombstones
   WHERE conv_id = ('c' || :i) AND sender_user = ('u' || :s) AND client_msg_id = ('pgb-' || :k)
 UNION ALL
 SELECT 'member', NULL, NULL, NULL FROM membership_periods
   WHERE conv_id = ('c' || :i) AND user_id = ('u' || :s) AND to_seq IS NULL;
WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   VALUES (('c' || :i), :next_seq, 'msg', gen_random_uuid(), ('u' || :s), 'pgbench', ('pgb-' || :k), '6f6abcc367b7a3ab113f21821e705cb9c00f1e2673eb931f6dda036d153d9d82', 'benchmark message body', (:msg_count + 1))
   RETURNING created_at
 ), counter AS (
   UPDATE conversations
      SET next_seq = :next_seq + 1, msg_count = (:msg_count + 1), change_xid = pg_current_xact_id()
    WHERE conv_id = ('c' || :i)
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq) VALUES (('c' || :i), ('u' || :s), :next_seq)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT created_at FROM ins;
COMMIT;
