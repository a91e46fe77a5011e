-- Message search (docs/SEARCH.md). The index is derived from the log by the triggers below, in
-- the transaction of the event that changes it: a message is findable exactly when it is
-- committed, and a recall, an edit or a purge takes its old words out in the same transaction,
-- so no index entry ever outlives the body it was made from.

-- The language a conversation's messages are split and stemmed with.
ALTER TABLE conversations ADD COLUMN search_lang regconfig NOT NULL DEFAULT 'simple'
    CHECK (search_lang IN ('simple'::regconfig, 'english'::regconfig));

-- A body's words in a language, each lexeme prefixed by its conversation: `'hello':1` of
-- conversation c becomes `'c:hello':1`. The GIN index then finds a word of one conversation by
-- that key alone: a search over a user's conversations reads one small posting list per
-- conversation instead of a common word's list over every conversation, and a prefix
-- (`c:wor*`) ranges over that conversation's words only. Conversation ids hold no quote, so
-- rewriting the text form is safe, and it keeps the positions phrases need.
CREATE FUNCTION search_words(conv text, lang regconfig, body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT regexp_replace(to_tsvector(lang, body)::text,
                          '''((?:[^'']|'''')*)''', '''' || conv || ':\1''', 'g')::tsvector
$$;

-- A query in a language, its lexemes scoped to the conversation as search_words scopes a
-- body's; NULL when the language leaves no lexeme (a query of stop words).
CREATE FUNCTION search_query(conv text, lang regconfig, q text) RETURNS tsquery
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN numnode(t) = 0 THEN NULL
                ELSE regexp_replace(t::text, '''((?:[^'']|'''')*)''', '''' || conv || ':\1''',
                                    'g')::tsquery END
      FROM to_tsquery(lang, q) t
$$;

-- One row per message with a body that is neither recalled nor purged: its current body's
-- words (an edit replaces them) and what a search filters and orders by.
CREATE TABLE search_docs (
    conv_id     text NOT NULL,
    seq         bigint NOT NULL,
    sender_user text NOT NULL,
    -- The message's time in microseconds since the epoch: newest-first order and its cursors.
    at_us       bigint NOT NULL,
    lang        regconfig NOT NULL,
    -- search_words(conv_id, lang, body).
    words       tsvector NOT NULL,
    PRIMARY KEY (conv_id, seq)
);
-- New entries wait in the index's pending list, which every search reads whole until it is
-- merged: a small list keeps that read short (the default 4 MB cost each lookup milliseconds at
-- a million messages) and each merge, paid by the insert that overflows it, small.
CREATE INDEX search_docs_words ON search_docs USING gin (words)
    WITH (gin_pending_list_limit = 256);
-- from: lists a sender's messages without words to match.
CREATE INDEX search_docs_sender ON search_docs (sender_user, at_us);

-- A statement trigger with a transition table: a batch of sends written by one INSERT indexes
-- its messages with one INSERT too.
CREATE FUNCTION search_index_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang, words)
    SELECT n.conv_id, n.seq, n.sender_user,
           (extract(epoch FROM n.created_at) * 1000000)::bigint,
           c.search_lang, search_words(n.conv_id, c.search_lang, n.body)
      FROM new_events n JOIN conversations c ON c.conv_id = n.conv_id
     WHERE n.kind = 'msg' AND n.body IS NOT NULL AND n.body <> '' AND n.recalled_at IS NULL
           AND n.sender_user IS NOT NULL;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_search_insert AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION search_index_inserted();

-- An edit gives a message a new body, a recall takes it away: the words follow the body.
CREATE FUNCTION search_index_body_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.body IS NULL OR NEW.body = '' OR NEW.recalled_at IS NOT NULL
       OR NEW.sender_user IS NULL THEN
        DELETE FROM search_docs WHERE conv_id = NEW.conv_id AND seq = NEW.seq;
    ELSE
        -- An upsert: a message sent with attachments only has no row until an edit gives it words.
        INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang, words)
        SELECT NEW.conv_id, NEW.seq, NEW.sender_user,
               (extract(epoch FROM NEW.created_at) * 1000000)::bigint,
               c.search_lang, search_words(NEW.conv_id, c.search_lang, NEW.body)
          FROM conversations c WHERE c.conv_id = NEW.conv_id
        ON CONFLICT (conv_id, seq) DO UPDATE SET lang = EXCLUDED.lang, words = EXCLUDED.words;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER events_search_body AFTER UPDATE OF body, recalled_at ON events
    FOR EACH ROW WHEN (NEW.kind = 'msg' AND (OLD.body IS DISTINCT FROM NEW.body
                       OR OLD.recalled_at IS DISTINCT FROM NEW.recalled_at))
    EXECUTE FUNCTION search_index_body_changed();

-- A purge deletes a range of events with one statement, and their words with one more.
CREATE FUNCTION search_index_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM search_docs d USING old_events o
     WHERE d.conv_id = o.conv_id AND d.seq = o.seq AND o.kind = 'msg';
    RETURN NULL;
END
$$;
CREATE TRIGGER events_search_delete AFTER DELETE ON events
    REFERENCING OLD TABLE AS old_events
    FOR EACH STATEMENT EXECUTE FUNCTION search_index_deleted();

-- A conversation that changes language has its messages split again, in the same transaction.
CREATE FUNCTION search_language_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_docs d SET lang = NEW.search_lang,
           words = search_words(d.conv_id, NEW.search_lang, e.body)
      FROM events e
     WHERE d.conv_id = NEW.conv_id AND e.conv_id = d.conv_id AND e.seq = d.seq;
    RETURN NULL;
END
$$;
CREATE TRIGGER conversations_search_lang AFTER UPDATE OF search_lang ON conversations
    FOR EACH ROW WHEN (OLD.search_lang IS DISTINCT FROM NEW.search_lang)
    EXECUTE FUNCTION search_language_changed();

-- Messages written before this migration.
INSERT INTO search_docs (conv_id, seq, sender_user, at_us, lang, words)
SELECT e.conv_id, e.seq, e.sender_user, (extract(epoch FROM e.created_at) * 1000000)::bigint,
       c.search_lang, search_words(e.conv_id, c.search_lang, e.body)
  FROM events e JOIN conversations c ON c.conv_id = e.conv_id
 WHERE e.kind = 'msg' AND e.body IS NOT NULL AND e.body <> '' AND e.recalled_at IS NULL
       AND e.sender_user IS NOT NULL;
