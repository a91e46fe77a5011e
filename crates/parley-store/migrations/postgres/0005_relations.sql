-- Replies, threads, mentions, edits and reactions (docs/RELATIONS.md): new event kinds and the
-- columns and tables that keep what a read folds into a message, each maintained in the
-- transaction of the event that changes it.
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('msg', 'recall', 'join', 'leave', 'edit', 'react', 'unreact'));
ALTER TABLE events
    -- A message's own relations, written with it.
    ADD COLUMN reply_to          bigint,
    ADD COLUMN thread_root       bigint,
    -- The mentioned members, a JSON array of user ids.
    ADD COLUMN mentions          text,
    -- The key of a react or unreact event.
    ADD COLUMN reaction_key      text,
    -- Derived on the edited message, by each edit's transaction.
    ADD COLUMN edited_at         timestamptz,
    -- Derived on a thread's root, by each reply's (and each recalled reply's) transaction.
    ADD COLUMN thread_replies    bigint NOT NULL DEFAULT 0,
    ADD COLUMN thread_latest_seq bigint;
-- A thread's page reads its replies in seq order.
CREATE INDEX events_thread ON events (conv_id, thread_root, seq) WHERE thread_root IS NOT NULL;
-- A recall or a purge erases the bodies of the edits of a message.
CREATE INDEX events_edits ON events (conv_id, target_seq) WHERE kind = 'edit';

-- Derived: who reacted with which key to which message, one row per user and key, kept by the
-- react and unreact events' transactions; a recall or a purge of the message deletes its rows.
CREATE TABLE reactions (
    conv_id      text NOT NULL,
    target_seq   bigint NOT NULL,
    reaction_key text NOT NULL,
    user_id      text NOT NULL,
    -- The react event that added it.
    seq          bigint NOT NULL,
    PRIMARY KEY (conv_id, target_seq, reaction_key, user_id)
);

-- Derived: the members a message mentions (never its sender), kept by the send's transaction;
-- a recall or a purge of the message deletes its rows. Mention counts are counts of these rows
-- past a read position.
CREATE TABLE mentions (
    conv_id text NOT NULL,
    user_id text NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (conv_id, user_id, seq)
);
