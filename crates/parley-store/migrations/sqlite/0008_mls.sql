-- End-to-end encrypted conversations (docs/E2EE.md): the same state as PostgreSQL's
-- 0009_mls.sql, which explains it. SQLite cannot change a CHECK constraint, so the events table
-- is rebuilt with the MLS kinds and columns, and its indexes and triggers are made again as
-- 0004, 0006 and 0007 made them.

ALTER TABLE conversations ADD COLUMN mls_epoch INTEGER CHECK (mls_epoch >= 0);

CREATE TABLE events_v3 (
    conv_id           TEXT NOT NULL REFERENCES conversations,
    seq               INTEGER NOT NULL,
    kind              TEXT NOT NULL
                      CHECK (kind IN ('msg', 'recall', 'join', 'leave', 'edit', 'react', 'unreact',
                                      'mls_application', 'mls_proposal', 'mls_commit',
                                      'mls_welcome')),
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
    reply_to          INTEGER,
    thread_root       INTEGER,
    mentions          TEXT,
    reaction_key      TEXT,
    edited_at         TEXT,
    thread_replies    INTEGER NOT NULL DEFAULT 0,
    thread_latest_seq INTEGER,
    attachments       TEXT,
    mls_epoch         INTEGER,
    mls_message       TEXT,
    mls_devices       TEXT,
    PRIMARY KEY (conv_id, seq)
) STRICT;
-- The language trigger reads events, so it cannot outlive the table while it is swapped.
DROP TRIGGER conversations_search_lang;
INSERT INTO events_v3 (conv_id, seq, kind, message_id, sender_user, sender_device, client_msg_id, request_hash, body, subject_user, target_seq, created_at, recalled_at, reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments)
    SELECT conv_id, seq, kind, message_id, sender_user, sender_device, client_msg_id, request_hash, body, subject_user, target_seq, created_at, recalled_at, reply_to, thread_root, mentions, reaction_key, edited_at, thread_replies, thread_latest_seq, attachments
      FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;

CREATE UNIQUE INDEX events_request_key ON events (conv_id, sender_user, client_msg_id)
    WHERE client_msg_id IS NOT NULL;
CREATE INDEX events_thread ON events (conv_id, thread_root, seq) WHERE thread_root IS NOT NULL;
CREATE INDEX events_edits ON events (conv_id, target_seq) WHERE kind = 'edit';
CREATE UNIQUE INDEX events_mls_commit_epoch ON events (conv_id, mls_epoch)
    WHERE kind = 'mls_commit';

CREATE TRIGGER events_push_outbox AFTER INSERT ON events WHEN NEW.kind = 'msg'
BEGIN
    INSERT INTO push_outbox (conv_id, seq) VALUES (NEW.conv_id, NEW.seq);
END;

CREATE TRIGGER events_search_insert AFTER INSERT ON events
    WHEN NEW.kind = 'msg' AND NEW.body IS NOT NULL AND NEW.body <> ''
         AND NEW.recalled_at IS NULL AND NEW.sender_user IS NOT NULL
BEGIN
    INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang)
    SELECT NEW.conv_id, NEW.seq, NEW.sender_user,
           CAST(strftime('%s', substr(NEW.created_at, 1, 19)) AS INTEGER) * 1000000
             + CAST(substr(NEW.created_at, 21, 6) AS INTEGER),
           search_lang
      FROM conversations WHERE conv_id = NEW.conv_id;
    INSERT INTO search_words_simple (rowid, body)
    SELECT doc_id, NEW.body FROM search_docs
     WHERE conv_id = NEW.conv_id AND seq = NEW.seq AND lang = 'simple';
    INSERT INTO search_words_english (rowid, body)
    SELECT doc_id, NEW.body FROM search_docs
     WHERE conv_id = NEW.conv_id AND seq = NEW.seq AND lang = 'english';
END;

CREATE TRIGGER events_search_body AFTER UPDATE OF body, recalled_at ON events
    WHEN NEW.kind = 'msg' AND (OLD.body IS NOT NEW.body OR OLD.recalled_at IS NOT NEW.recalled_at)
BEGIN
    DELETE FROM search_words_simple WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = NEW.conv_id AND seq = NEW.seq);
    DELETE FROM search_words_english WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = NEW.conv_id AND seq = NEW.seq);
    DELETE FROM search_docs WHERE conv_id = NEW.conv_id AND seq = NEW.seq;
    INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang)
    SELECT NEW.conv_id, NEW.seq, NEW.sender_user,
           CAST(strftime('%s', substr(NEW.created_at, 1, 19)) AS INTEGER) * 1000000
             + CAST(substr(NEW.created_at, 21, 6) AS INTEGER),
           search_lang
      FROM conversations
     WHERE conv_id = NEW.conv_id AND NEW.body IS NOT NULL AND NEW.body <> ''
           AND NEW.recalled_at IS NULL AND NEW.sender_user IS NOT NULL;
    INSERT INTO search_words_simple (rowid, body)
    SELECT doc_id, NEW.body FROM search_docs
     WHERE conv_id = NEW.conv_id AND seq = NEW.seq AND lang = 'simple';
    INSERT INTO search_words_english (rowid, body)
    SELECT doc_id, NEW.body FROM search_docs
     WHERE conv_id = NEW.conv_id AND seq = NEW.seq AND lang = 'english';
END;

CREATE TRIGGER events_search_delete AFTER DELETE ON events WHEN OLD.kind = 'msg'
BEGIN
    DELETE FROM search_words_simple WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq);
    DELETE FROM search_words_english WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq);
    DELETE FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq;
END;

CREATE TRIGGER conversations_search_lang AFTER UPDATE OF search_lang ON conversations
    WHEN OLD.search_lang IS NOT NEW.search_lang
BEGIN
    DELETE FROM search_words_simple WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = NEW.conv_id);
    DELETE FROM search_words_english WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = NEW.conv_id);
    UPDATE search_docs SET lang = NEW.search_lang WHERE conv_id = NEW.conv_id;
    INSERT INTO search_words_simple (rowid, body)
    SELECT d.doc_id, e.body FROM search_docs d JOIN events e ON e.conv_id = d.conv_id AND e.seq = d.seq
     WHERE d.conv_id = NEW.conv_id AND NEW.search_lang = 'simple';
    INSERT INTO search_words_english (rowid, body)
    SELECT d.doc_id, e.body FROM search_docs d JOIN events e ON e.conv_id = d.conv_id AND e.seq = d.seq
     WHERE d.conv_id = NEW.conv_id AND NEW.search_lang = 'english';
END;

CREATE TABLE key_packages (
    package_id  INTEGER PRIMARY KEY,
    user_id     TEXT NOT NULL,
    device_id   TEXT NOT NULL,
    key_package TEXT NOT NULL,
    last_resort INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    FOREIGN KEY (user_id, device_id) REFERENCES devices ON DELETE CASCADE
) STRICT;
CREATE INDEX key_packages_by_device ON key_packages (user_id, device_id, last_resort, package_id);
CREATE UNIQUE INDEX key_packages_one_last_resort ON key_packages (user_id, device_id)
    WHERE last_resort;
