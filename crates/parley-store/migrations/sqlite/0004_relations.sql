-- Replies, threads, mentions, edits and reactions (docs/RELATIONS.md): new event kinds and the
-- columns and tables that keep what a read folds into a message, each maintained in the
-- transaction of the event that changes it. SQLite cannot change a CHECK constraint, so the
-- events table is rebuilt with the new kinds and columns.
CREATE TABLE events_v2 (
    conv_id           TEXT NOT NULL REFERENCES conversations,
    seq               INTEGER NOT NULL,
    kind              TEXT NOT NULL
                      CHECK (kind IN ('msg', 'recall', 'join', 'leave', 'edit', 'react', 'unreact')),
    message_id        TEXT,
    sender_user       TEXT,
    sender_device     TEXT,
    client_msg_id     TEXT,
    request_hash      TEXT,
    body              TEXT,
    subject_user      TEXT,
    target_seq        INTEGER,
    created_at        TEXT NOT NULL,
    recalled_at       TEXT,
    -- A message's own relations, written with it.
    reply_to          INTEGER,
    thread_root       INTEGER,
    -- The mentioned members, a JSON array of user ids.
    mentions          TEXT,
    -- The key of a react or unreact event.
    reaction_key      TEXT,
    -- Derived on the edited message, by each edit's transaction.
    edited_at         TEXT,
    -- Derived on a thread's root, by each reply's (and each recalled reply's) transaction.
    thread_replies    INTEGER NOT NULL DEFAULT 0,
    thread_latest_seq INTEGER,
    PRIMARY KEY (conv_id, seq)
) STRICT;
INSERT INTO events_v2 (conv_id, seq, kind, message_id, sender_user, sender_device, client_msg_id,
                       request_hash, body, subject_user, target_seq, created_at, recalled_at)
    SELECT conv_id, seq, kind, message_id, sender_user, sender_device, client_msg_id,
           request_hash, body, subject_user, target_seq, created_at, recalled_at
      FROM events;
DROP TABLE events;
ALTER TABLE events_v2 RENAME TO events;
-- P2: the last guard of the request key. The send path checks the key inside its write
-- transaction first, so a violation reaching a client is a bug.
CREATE UNIQUE INDEX events_request_key ON events (conv_id, sender_user, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
-- A thread's page reads its replies in seq order.
CREATE INDEX events_thread ON events (conv_id, thread_root, seq) WHERE thread_root IS NOT NULL;
-- A recall or a purge erases the bodies of the edits of a message.
CREATE INDEX events_edits ON events (conv_id, target_seq) WHERE kind = 'edit';

-- Derived: who reacted with which key to which message (docs/RELATIONS.md).
CREATE TABLE reactions (
    conv_id      TEXT NOT NULL,
    target_seq   INTEGER NOT NULL,
    reaction_key TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    PRIMARY KEY (conv_id, target_seq, reaction_key, user_id)
) STRICT;

-- Derived: the members a message mentions (never its sender).
CREATE TABLE mentions (
    conv_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (conv_id, user_id, seq)
) STRICT;
