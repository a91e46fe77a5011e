-- The same send transaction as send.sql, every client on one conversation: the group `hot`
-- of setup.sql, whose 64 members w0..w63 are the pgbench clients (so at most -c 64).
--   pgbench -n -f send_hot.sql -c 16 -T 30 parley_pgbench
\set k random(1, 9000000000000000000)
BEGIN;
SELECT next_seq, msg_count FROM conversations WHERE conv_id = 'hot' FOR NO KEY UPDATE \gset
SELECT 'event' AS src, seq, message_id, request_hash FROM events
   WHERE conv_id = 'hot' AND sender_user = ('w' || :client_id) AND client_msg_id = ('pgb-' || :k)
 UNION ALL
 SELECT 'tombstone', seq, message_id, request_hash FROM idem_tombstones
   WHERE conv_id = 'hot' AND sender_user = ('w' || :client_id) AND client_msg_id = ('pgb-' || :k)
 UNION ALL
 SELECT 'member', NULL, NULL, NULL FROM membership_periods
   WHERE conv_id = 'hot' AND user_id = ('w' || :client_id) AND to_seq IS NULL;
WITH ins AS (
   INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                       client_msg_id, request_hash, body, msg_ordinal)
   VALUES ('hot', :next_seq, 'msg', gen_random_uuid(), ('w' || :client_id), 'pgbench', ('pgb-' || :k), '6f6abcc367b7a3ab113f21821e705cb9c00f1e2673eb931f6dda036d153d9d82', 'benchmark message body', (:msg_count + 1))
   RETURNING created_at
 ), counter AS (
   UPDATE conversations
      SET next_seq = :next_seq + 1, msg_count = (:msg_count + 1), change_xid = pg_current_xact_id()
    WHERE conv_id = 'hot'
 ), mark AS (
   INSERT INTO read_marks (conv_id, user_id, read_seq) VALUES ('hot', ('w' || :client_id), :next_seq)
   ON CONFLICT (conv_id, user_id) DO UPDATE
     SET read_seq = GREATEST(read_marks.read_seq, EXCLUDED.read_seq), updated_at = now(),
         change_xid = pg_current_xact_id()
 )
 SELECT created_at FROM ins;
COMMIT;
