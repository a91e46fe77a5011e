-- Authoritative state of Parley (SPEC §3). Every per-conversation table leads its primary key
-- with conv_id, the distribution key if the store is ever sharded.

CREATE TABLE users (
    user_id      text PRIMARY KEY,
    display_name text,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE devices (
    user_id    text NOT NULL REFERENCES users,
    device_id  text NOT NULL,
    token_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    PRIMARY KEY (user_id, device_id)
);
-- Authentication looks a device up by the hash of its token.
CREATE UNIQUE INDEX devices_token_hash ON devices (token_hash);

CREATE TABLE conversations (
    conv_id          text PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('direct', 'group')),
    title            text,
    delivery_mode    text NOT NULL DEFAULT 'push' CHECK (delivery_mode IN ('push', 'pull')),
    -- Member count at which a push group switches to pull; NULL when the creator chose the
    -- mode or the conversation is direct. Fixed at creation from the deployment's setting.
    pull_threshold   integer,
    next_seq         bigint NOT NULL DEFAULT 1 CHECK (next_seq >= 1),
    min_seq          bigint NOT NULL DEFAULT 1 CHECK (min_seq >= 1),
    epoch            bigint NOT NULL DEFAULT 1,
    recall_window_ms bigint NOT NULL,
    retention_ms     bigint,
    -- Derived, maintained in the same transaction as every join and leave.
    member_count     integer NOT NULL DEFAULT 0 CHECK (member_count >= 0),
    -- Derived: msg events ever written (the msg_ordinal of the head), same transaction as each.
    msg_count        bigint NOT NULL DEFAULT 0 CHECK (msg_count >= 0),
    -- The transaction that last changed what a member's feed shows of this conversation (an
    -- event, a min_seq move, a role change). Sync tokens are snapshot horizons over these ids.
    change_xid       xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (min_seq <= next_seq)
);

CREATE TABLE membership_periods (
    conv_id  text NOT NULL REFERENCES conversations,
    user_id  text NOT NULL REFERENCES users,
    from_seq bigint NOT NULL,
    to_seq   bigint,
    role     text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    PRIMARY KEY (conv_id, user_id, from_seq),
    CHECK (to_seq IS NULL OR to_seq >= from_seq)
);
-- P3: at most one open period per user and conversation.
CREATE UNIQUE INDEX membership_one_open ON membership_periods (conv_id, user_id) WHERE to_seq IS NULL;
-- A user's conversations.
CREATE INDEX membership_by_user ON membership_periods (user_id, conv_id);

CREATE TABLE events (
    conv_id       text NOT NULL REFERENCES conversations,
    seq           bigint NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('msg', 'recall', 'join', 'leave')),
    message_id    uuid,
    sender_user   text,
    sender_device text,
    client_msg_id text,
    request_hash  text,
    body          text,
    subject_user  text,
    target_seq    bigint,
    created_at    timestamptz NOT NULL DEFAULT now(),
    recalled_at   timestamptz,
    -- Derived: msg events of the conversation up to and including this seq. Unread counts are
    -- differences of two ordinals, so their cost does not grow with the backlog.
    msg_ordinal   bigint NOT NULL,
    PRIMARY KEY (conv_id, seq)
);
-- Recalled messages are few; unread counts subtract those inside a range with this index.
CREATE INDEX events_recalled_msgs ON events (conv_id, seq) WHERE recalled_at IS NOT NULL AND kind = 'msg';
-- P2: the last guard of the request key. The send path checks the key under the conversation
-- lock first, so a violation reaching a client is a bug.
CREATE UNIQUE INDEX events_request_key ON events (conv_id, sender_user, client_msg_id)
    WHERE client_msg_id IS NOT NULL;

-- Request keys of purged messages (P2 after retention).
CREATE TABLE idem_tombstones (
    conv_id       text NOT NULL,
    sender_user   text NOT NULL,
    client_msg_id text NOT NULL,
    request_hash  text NOT NULL,
    seq           bigint NOT NULL,
    message_id    uuid NOT NULL,
    purged_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conv_id, sender_user, client_msg_id)
);
CREATE INDEX idem_tombstones_purged_at ON idem_tombstones (purged_at);

CREATE TABLE read_marks (
    conv_id    text NOT NULL,
    user_id    text NOT NULL,
    read_seq   bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- The transaction that last moved this read position (see conversations.change_xid).
    change_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (conv_id, user_id)
);
-- The sync feed finds a user's moved read positions by one index range.
CREATE INDEX read_marks_by_user ON read_marks (user_id, change_xid);

CREATE TABLE gateways (
    gateway_id  text PRIMARY KEY,
    address     text,
    started_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL
);

CREATE TABLE routes (
    user_id      text NOT NULL,
    device_id    text NOT NULL,
    gateway_id   text NOT NULL,
    conn_id      text NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, device_id)
);
CREATE INDEX routes_by_gateway ON routes (gateway_id);
