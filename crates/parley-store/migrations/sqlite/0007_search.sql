-- Message search (docs/SEARCH.md). The index is derived from the log by the triggers below, in
-- the transaction of the event that changes it: a message is findable exactly when it is
-- committed, and a recall, an edit or a purge takes its old words out in the same transaction,
-- so no index entry ever outlives the body it was made from.

-- The language a conversation's messages are split and stemmed with.
ALTER TABLE conversations ADD COLUMN search_lang TEXT NOT NULL DEFAULT 'simple'
    CHECK (search_lang IN ('simple', 'english'));

-- One row per message with a body that is neither recalled nor purged; doc_id is the rowid of
-- its words in the FTS5 table of its language. An explicit INTEGER PRIMARY KEY, so a VACUUM
-- never renumbers it.
CREATE TABLE search_docs (
    doc_id      INTEGER PRIMARY KEY,
    conv_id     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    sender_user TEXT NOT NULL,
    -- The message's time in microseconds since the epoch: newest-first order and its cursors.
    at_us       INTEGER NOT NULL,
    lang        TEXT NOT NULL,
    UNIQUE (conv_id, seq)
) STRICT;
-- from: lists a sender's messages without words to match.
CREATE INDEX search_docs_sender ON search_docs (sender_user, at_us);

-- The words, one contentless table per language (FTS5 sets the tokenizer per table): the
-- bodies stay in events only, and contentless_delete lets a row go by its rowid alone.
-- remove_diacritics 0 keeps the words as PostgreSQL's configurations do.
CREATE VIRTUAL TABLE search_words_simple USING fts5(
    body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 0');
CREATE VIRTUAL TABLE search_words_english USING fts5(
    body, content = '', contentless_delete = 1,
    tokenize = 'porter unicode61 remove_diacritics 0');

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

-- An edit gives a message a new body, a recall takes it away: the words follow the body.
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

-- A purge deletes a range of events; their words go with them.
CREATE TRIGGER events_search_delete AFTER DELETE ON events WHEN OLD.kind = 'msg'
BEGIN
    DELETE FROM search_words_simple WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq);
    DELETE FROM search_words_english WHERE rowid IN
        (SELECT doc_id FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq);
    DELETE FROM search_docs WHERE conv_id = OLD.conv_id AND seq = OLD.seq;
END;

-- A conversation that changes language has its messages split again, in the same transaction.
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

-- Messages written before this migration.
INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang)
SELECT e.conv_id, e.seq, e.sender_user,
       CAST(strftime('%s', substr(e.created_at, 1, 19)) AS INTEGER) * 1000000
         + CAST(substr(e.created_at, 21, 6) AS INTEGER),
       c.search_lang
  FROM events e JOIN conversations c ON c.conv_id = e.conv_id
 WHERE e.kind = 'msg' AND e.body IS NOT NULL AND e.body <> '' AND e.recalled_at IS NULL
       AND e.sender_user IS NOT NULL;
INSERT INTO search_words_simple (rowid, body)
SELECT d.doc_id, e.body FROM search_docs d JOIN events e ON e.conv_id = d.conv_id AND e.seq = d.seq;
