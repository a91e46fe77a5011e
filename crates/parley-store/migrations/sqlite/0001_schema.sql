-- Authoritative state of Parley (SPEC §3) for the embedded store: the same tables, columns and
-- constraints as migrations/postgres, in SQLite's types. Every per-conversation table leads its
-- primary key with conv_id.
--
-- Timestamps are TEXT in RFC 3339, UTC, with exactly six fractional digits
-- ("2026-01-02T03:04:05.123456Z"): the precision of PostgreSQL's timestamptz, readable with the
-- sqlite3 shell, and fixed-width, so comparing the text compares the times. The store writes
-- every timestamp itself (SQLite's own clock functions stop at milliseconds).
-- UUIDs are TEXT in their hyphenated form. Tables are STRICT, so a value of the wrong type is an
-- error, as it is in PostgreSQL.
--
-- Change tracking for the sync feed: PostgreSQL stamps changed rows with transaction ids and
-- hands out snapshots as tokens. SQLite has one writer, so a counter does the same job exactly:
-- every write transaction that changes what a feed shows takes the next value of change_clock
-- and stamps the rows it changed; a token is the clock value of the snapshot an answer was read
-- in, and "changed since" is "stamped above it". Writes commit in clock order, so a snapshot
-- that sees value N sees every stamp up to N and none above.

CREATE TABLE change_clock (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
) STRICT;
INSERT INTO change_clock (id, last) VALUES (1, 0);

CREATE TABLE users (
    user_id      TEXT PRIMARY KEY,
    display_name TEXT,
    created_at   TEXT NOT NULL
) STRICT;

CREATE TABLE devices (
    user_id    TEXT NOT NULL REFERENCES users,
    device_id  TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    PRIMARY KEY (user_id, device_id)
) STRICT;
-- Authentication looks a device up by the hash of its token.
CREATE UNIQUE INDEX devices_token_hash ON devices (token_hash);

CREATE TABLE conversations (
    conv_id          TEXT PRIMARY KEY,
    kind             TEXT NOT NULL CHECK (kind IN ('direct', 'group')),
    title            TEXT,
    delivery_mode    TEXT NOT NULL DEFAULT 'push' CHECK (delivery_mode IN ('push', 'pull')),
    -- Member count at which a push group switches to pull; NULL when the creator chose the
    -- mode or the conversation is direct. Fixed at creation from the deployment's setting.
    pull_threshold   INTEGER,
    next_seq         INTEGER NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    min_seq          INTEGER NOT NULL DEFAULT 1 CHECK (min_seq >= 1),
    epoch            INTEGER NOT NULL DEFAULT 1,
    recall_window_ms INTEGER NOT NULL,
    retention_ms     INTEGER,
    -- Derived, maintained in the same transaction as every join and leave.
    member_count     INTEGER NOT NULL DEFAULT 0 CHECK (member_count >= 0),
    -- The change_clock value of the transaction that last changed what a member's feed shows of
    -- this conversation (an event, a min_seq move, a role change).
    change_seq       INTEGER NOT NULL,
    created_at       TEXT NOT NULL,
    CHECK (min_seq <= next_seq)
) STRICT;

CREATE TABLE membership_periods (
    conv_id  TEXT NOT NULL REFERENCES conversations,
    user_id  TEXT NOT NULL REFERENCES users,
    from_seq INTEGER NOT NULL,
    to_seq   INTEGER,
    role     TEXT NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    PRIMARY KEY (conv_id, user_id, from_seq),
    CHECK (to_seq IS NULL OR to_seq >= from_seq)
) STRICT;
-- P3: at most one open period per user and conversation.
CREATE UNIQUE INDEX membership_one_open ON membership_periods (conv_id, user_id) WHERE to_seq IS NULL;
-- A user's conversations.
CREATE INDEX membership_by_user ON membership_periods (user_id, conv_id);

CREATE TABLE events (
    conv_id       TEXT NOT NULL REFERENCES conversations,
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('msg', 'recall', 'join', 'leave')),
    message_id    TEXT,
    sender_user   TEXT,
    sender_device TEXT,
    client_msg_id TEXT,
    request_hash  TEXT,
    body          TEXT,
    subject_user  TEXT,
    target_seq    INTEGER,
    created_at    TEXT NOT NULL,
    recalled_at   TEXT,
    PRIMARY KEY (conv_id, seq)
) STRICT;
-- P2: the last guard of the request key. The send path checks the key inside its write
-- transaction first, so a violation reaching a client is a bug.
CREATE UNIQUE INDEX events_request_key ON events (conv_id, sender_user, client_msg_id)
    WHERE client_msg_id IS NOT NULL;

-- Request keys of purged messages (P2 after retention).
CREATE TABLE idem_tombstones (
    conv_id       TEXT NOT NULL,
    sender_user   TEXT NOT NULL,
    client_msg_id TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    message_id    TEXT NOT NULL,
    purged_at     TEXT NOT NULL,
    PRIMARY KEY (conv_id, sender_user, client_msg_id)
) STRICT;
CREATE INDEX idem_tombstones_purged_at ON idem_tombstones (purged_at);

CREATE TABLE read_marks (
    conv_id    TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    read_seq   INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL,
    -- The change_clock value of the transaction that last moved this read position.
    change_seq INTEGER NOT NULL,
    PRIMARY KEY (conv_id, user_id)
) STRICT;
-- The sync feed finds a user's moved read positions by one index range.
CREATE INDEX read_marks_by_user ON read_marks (user_id, change_seq);

CREATE TABLE gateways (
    gateway_id  TEXT PRIMARY KEY,
    address     TEXT,
    started_at  TEXT NOT NULL,
    lease_until TEXT NOT NULL
) STRICT;

CREATE TABLE routes (
    user_id      TEXT NOT NULL,
    device_id    TEXT NOT NULL,
    gateway_id   TEXT NOT NULL,
    conn_id      TEXT NOT NULL,
    connected_at TEXT NOT NULL,
    PRIMARY KEY (user_id, device_id)
) STRICT;
CREATE INDEX routes_by_gateway ON routes (gateway_id);
