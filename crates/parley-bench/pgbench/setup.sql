-- Tables and rows for running the raw send transaction under pgbench, in a database of its
-- own (never the server's):
--   createdb -h 127.0.0.1 -U postgres parley_pgbench
--   psql -h 127.0.0.1 -U postgres -d parley_pgbench -f crates/parley-bench/pgbench/setup.sql
-- The tables are the server's own schema (the store's migration, included below); the rows
-- are what the server writes when conversations are created: 1,000 direct chats c0..c999
-- between users u0..u1999, and one group `hot` of 64 members w0..w63, each with its join
-- events, membership periods and next_seq after them.
\set ON_ERROR_STOP on
\ir ../../parley-store/migrations/postgres/0001_schema.sql

INSERT INTO users (user_id)
SELECT 'u' || i FROM generate_series(0, 1999) AS i
UNION ALL
SELECT 'w' || i FROM generate_series(0, 63) AS i;

INSERT INTO conversations (conv_id, kind, next_seq, recall_window_ms, member_count)
SELECT 'c' || i, 'direct', 3, 120000, 2 FROM generate_series(0, 999) AS i
UNION ALL
SELECT 'hot', 'group', 65, 120000, 64;

-- Member m of chat i is user u(2i + m) and joined at seq m + 1; member i of `hot` is w(i),
-- joined at seq i + 1.
INSERT INTO membership_periods (conv_id, user_id, from_seq, role)
SELECT 'c' || i, 'u' || (2 * i + m), m + 1, CASE m WHEN 0 THEN 'owner' ELSE 'member' END
FROM generate_series(0, 999) AS i, generate_series(0, 1) AS m
UNION ALL
SELECT 'hot', 'w' || i, i + 1, CASE i WHEN 0 THEN 'owner' ELSE 'member' END
FROM generate_series(0, 63) AS i;

INSERT INTO events (conv_id, seq, kind, sender_user, subject_user, msg_ordinal)
SELECT conv_id, from_seq, 'join', user_id, user_id, 0 FROM membership_periods;

ANALYZE;
