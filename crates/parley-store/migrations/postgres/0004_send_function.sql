-- The send transaction of a lone send (SPEC §4) as one server-side function, so that a send
-- costs one round trip instead of five (BEGIN, lock, key check, insert, COMMIT). Called as a
-- single statement outside an explicit transaction, its implicit transaction commits before
-- the answer is sent, so an answer still follows its commit (P6).
--
-- The steps are the statements of the plain transaction (parley-store src/pg/send.rs), in the
-- same order: the row lock, then the key check, then the insert. Each statement of a volatile
-- function takes a fresh snapshot under READ COMMITTED, so the key check, issued after the lock
-- was granted, sees every send that committed before it (P2).
--
-- The function writes only when the decision can only be a write: the conversation exists,
-- the key is neither in the log nor in the tombstones, and the sender has an open period. It
-- returns what the key check read, so the caller decides every answer (replay, mismatch,
-- not a member) with the same decision as every other send path.
--
-- p_lock_row and p_check_first exist for the test breaks `no-row-lock` and `no-unique-index`
-- only; a build without test breaks always passes true and false.
CREATE FUNCTION send_message(
    p_conv_id text,
    p_sender_user text,
    p_sender_device text,
    p_client_msg_id text,
    p_request_hash text,
    p_body text,
    p_message_id uuid,
    p_lock_row boolean,
    p_check_first boolean,
    OUT conv_found boolean,
    OUT log_seq bigint,
    OUT log_message_id uuid,
    OUT log_request_hash text,
    OUT tomb_seq bigint,
    OUT tomb_message_id uuid,
    OUT tomb_request_hash text,
    OUT is_member boolean,
    OUT written_seq bigint,
    OUT written_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_next_seq bigint;
    v_msg_count bigint;
    v_checked boolean := false;
BEGIN
    FOR step IN 1..2 LOOP
        -- Step 1 is the lock and step 2 the key check; the test break `no-unique-index` swaps
        -- them.
        IF (step = 1) <> p_check_first THEN
            IF p_lock_row THEN
                SELECT c.next_seq, c.msg_count INTO v_next_seq, v_msg_count
                  FROM conversations c WHERE c.conv_id = p_conv_id FOR NO KEY UPDATE;
            ELSE
                SELECT c.next_seq, c.msg_count INTO v_next_seq, v_msg_count
                  FROM conversations c WHERE c.conv_id = p_conv_id;
            END IF;
            conv_found := FOUND;
        ELSE
            -- Planned at every call (EXECUTE): a plan cached while `events` was small may
            -- probe it by conv_id alone and read a whole conversation per send ever after.
            EXECUTE 'SELECT e.seq, e.message_id, e.request_hash FROM events e
                      WHERE e.conv_id = $1 AND e.sender_user = $2
                        AND e.client_msg_id = $3 AND e.client_msg_id IS NOT NULL'
               INTO log_seq, log_message_id, log_request_hash
              USING p_conv_id, p_sender_user, p_client_msg_id;
            SELECT t.seq, t.message_id, t.request_hash
              INTO tomb_seq, tomb_message_id, tomb_request_hash
              FROM idem_tombstones t
             WHERE t.conv_id = p_conv_id AND t.sender_user = p_sender_user
               AND t.client_msg_id = p_client_msg_id;
            is_member := EXISTS (
                SELECT 1 FROM membership_periods m
                 WHERE m.conv_id = p_conv_id AND m.user_id = p_sender_user
                   AND m.to_seq IS NULL);
            v_checked := true;
        END IF;
    END LOOP;
    IF NOT (conv_found AND v_checked AND is_member)
       OR log_seq IS NOT NULL OR tomb_seq IS NOT NULL THEN
        RETURN;
    END IF;
    -- The insert at next_seq, the counter and message count past it, and the sender's read
    -- position moved to it (an own message is read), as in the plain transaction.
    INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                        client_msg_id, request_hash, body, msg_ordinal)
    VALUES (p_conv_id, v_next_seq, 'msg', p_message_id, p_sender_user, p_sender_device,
            p_client_msg_id, p_request_hash, p_body, v_msg_count + 1)
    RETURNING events.created_at INTO written_at;
    UPDATE conversations c
       SET next_seq = v_next_seq + 1, msg_count = v_msg_count + 1,
           change_xid = pg_current_xact_id()
     WHERE c.conv_id = p_conv_id;
    INSERT INTO read_marks AS r (conv_id, user_id, read_seq)
    VALUES (p_conv_id, p_sender_user, v_next_seq)
    ON CONFLICT (conv_id, user_id) DO UPDATE
       SET read_seq = GREATEST(r.read_seq, EXCLUDED.read_seq), updated_at = now(),
           change_xid = pg_current_xact_id();
    written_seq := v_next_seq;
END
$$;

-- The send transaction of a batch (SPEC §4, "Batching") as one function: the steps of
-- send_message for several requests with distinct request keys, in one round trip. The
-- caller passes each key once (a later request of the batch with the same key is answered
-- from the first's outcome) and decides every answer from the returned rows, one per request
-- by position `n` (from 1), with the same decision as every other send path.
--
-- The conversations are locked one by one in byte order of conv_id, the order of every batch;
-- every other transaction locks at most one conversation row, so no two wait in a cycle. A
-- request is written when its conversation exists, its key is neither in the log nor in the
-- tombstones, and its sender has an open period; the writes of a conversation take its seqs
-- in request order. Any error rolls the whole batch back.
CREATE FUNCTION send_messages(
    p_conv_ids text[],
    p_sender_users text[],
    p_sender_devices text[],
    p_client_msg_ids text[],
    p_request_hashes text[],
    p_bodies text[],
    p_message_ids uuid[],
    p_lock_row boolean,
    p_check_first boolean)
RETURNS TABLE (
    n integer,
    conv_found boolean,
    log_seq bigint,
    log_message_id uuid,
    log_request_hash text,
    tomb_seq bigint,
    tomb_message_id uuid,
    tomb_request_hash text,
    is_member boolean,
    written_seq bigint,
    written_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_len integer := cardinality(p_conv_ids);
    -- The batch's conversations in lock order, with their counters as the batch advances them
    -- (NULL: no such conversation) and whether the batch wrote to them.
    v_convs text[];
    v_next bigint[] := '{}';
    v_count bigint[] := '{}';
    v_wrote boolean[] := '{}';
    -- Per request.
    v_log_seq bigint[] := '{}';
    v_log_id uuid[] := '{}';
    v_log_hash text[] := '{}';
    v_tomb_seq bigint[] := '{}';
    v_tomb_id uuid[] := '{}';
    v_tomb_hash text[] := '{}';
    v_member boolean[] := '{}';
    v_seq bigint[] := '{}';
    v_ordinal bigint[] := '{}';
    v_one_seq bigint;
    v_one_id uuid;
    v_one_hash text;
    v_one_next bigint;
    v_one_count bigint;
    v_found record;
    k integer;
BEGIN
    v_convs := ARRAY(SELECT DISTINCT c COLLATE "C" FROM unnest(p_conv_ids) AS u(c) ORDER BY 1);
    FOR step IN 1..2 LOOP
        -- Step 1 is the locks and step 2 the key checks; the test break `no-unique-index`
        -- swaps them.
        IF (step = 1) <> p_check_first THEN
            FOR i IN 1..cardinality(v_convs) LOOP
                IF p_lock_row THEN
                    SELECT c.next_seq, c.msg_count INTO v_one_next, v_one_count
                      FROM conversations c WHERE c.conv_id = v_convs[i] FOR NO KEY UPDATE;
                ELSE
                    SELECT c.next_seq, c.msg_count INTO v_one_next, v_one_count
                      FROM conversations c WHERE c.conv_id = v_convs[i];
                END IF;
                v_next[i] := v_one_next;
                v_count[i] := v_one_count;
                v_wrote[i] := false;
            END LOOP;
        ELSE
            -- The log's key check for every request in one statement, planned at every call
            -- (EXECUTE): a plan cached while `events` was small may probe it by conv_id alone
            -- and read a whole conversation per request ever after.
            v_log_seq := array_fill(NULL::bigint, ARRAY[v_len]);
            v_log_id := array_fill(NULL::uuid, ARRAY[v_len]);
            v_log_hash := array_fill(NULL::text, ARRAY[v_len]);
            FOR v_found IN EXECUTE
                'SELECT k.n::integer AS n, e.seq, e.message_id, e.request_hash
                   FROM unnest($1::text[], $2::text[], $3::text[])
                        WITH ORDINALITY AS k(conv_id, sender_user, client_msg_id, n)
                  CROSS JOIN LATERAL (
                     SELECT seq, message_id, request_hash FROM events
                      WHERE conv_id = k.conv_id AND sender_user = k.sender_user
                        AND client_msg_id = k.client_msg_id AND client_msg_id IS NOT NULL
                      LIMIT 1) e'
                USING p_conv_ids, p_sender_users, p_client_msg_ids
            LOOP
                v_log_seq[v_found.n] := v_found.seq;
                v_log_id[v_found.n] := v_found.message_id;
                v_log_hash[v_found.n] := v_found.request_hash;
            END LOOP;
            FOR i IN 1..v_len LOOP
                SELECT t.seq, t.message_id, t.request_hash INTO v_one_seq, v_one_id, v_one_hash
                  FROM idem_tombstones t
                 WHERE t.conv_id = p_conv_ids[i] AND t.sender_user = p_sender_users[i]
                   AND t.client_msg_id = p_client_msg_ids[i];
                v_tomb_seq[i] := v_one_seq;
                v_tomb_id[i] := v_one_id;
                v_tomb_hash[i] := v_one_hash;
                v_member[i] := EXISTS (
                    SELECT 1 FROM membership_periods m
                     WHERE m.conv_id = p_conv_ids[i] AND m.user_id = p_sender_users[i]
                       AND m.to_seq IS NULL);
            END LOOP;
        END IF;
    END LOOP;
    -- Seqs in request order, each conversation's from its locked counter.
    FOR i IN 1..v_len LOOP
        k := array_position(v_convs, p_conv_ids[i]);
        IF v_next[k] IS NOT NULL AND v_member[i]
           AND v_log_seq[i] IS NULL AND v_tomb_seq[i] IS NULL THEN
            v_seq[i] := v_next[k];
            v_count[k] := v_count[k] + 1;
            v_ordinal[i] := v_count[k];
            v_next[k] := v_next[k] + 1;
            v_wrote[k] := true;
        ELSE
            v_seq[i] := NULL;
            v_ordinal[i] := NULL;
        END IF;
    END LOOP;
    INSERT INTO events (conv_id, seq, kind, message_id, sender_user, sender_device,
                        client_msg_id, request_hash, body, msg_ordinal)
    SELECT r.conv_id, r.seq, 'msg', r.message_id, r.sender_user, r.sender_device,
           r.client_msg_id, r.request_hash, r.body, r.msg_ordinal
      FROM unnest(p_conv_ids, v_seq, p_message_ids, p_sender_users, p_sender_devices,
                  p_client_msg_ids, p_request_hashes, p_bodies, v_ordinal)
           AS r(conv_id, seq, message_id, sender_user, sender_device, client_msg_id,
                request_hash, body, msg_ordinal)
     WHERE r.seq IS NOT NULL;
    FOR i IN 1..cardinality(v_convs) LOOP
        IF v_wrote[i] THEN
            UPDATE conversations c
               SET next_seq = v_next[i], msg_count = v_count[i],
                   change_xid = pg_current_xact_id()
             WHERE c.conv_id = v_convs[i];
        END IF;
    END LOOP;
    -- Each sender's read position moves to their last new message of each conversation.
    INSERT INTO read_marks AS r (conv_id, user_id, read_seq)
    SELECT m.conv_id, m.user_id, max(m.seq)
      FROM unnest(p_conv_ids, p_sender_users, v_seq) AS m(conv_id, user_id, seq)
     WHERE m.seq IS NOT NULL
     GROUP BY m.conv_id, m.user_id
    ON CONFLICT (conv_id, user_id) DO UPDATE
       SET read_seq = GREATEST(r.read_seq, EXCLUDED.read_seq), updated_at = now(),
           change_xid = pg_current_xact_id();
    -- The events' created_at is their default, now(): the start of this transaction.
    RETURN QUERY
    SELECT q.n::integer, v_next[array_position(v_convs, q.conv_id)] IS NOT NULL,
           q.log_seq, q.log_id, q.log_hash, q.tomb_seq, q.tomb_id, q.tomb_hash, q.member,
           q.seq, CASE WHEN q.seq IS NOT NULL THEN now() END
      FROM unnest(p_conv_ids, v_log_seq, v_log_id, v_log_hash, v_tomb_seq, v_tomb_id,
                  v_tomb_hash, v_member, v_seq)
           WITH ORDINALITY AS q(conv_id, log_seq, log_id, log_hash, tomb_seq, tomb_id,
                                tomb_hash, member, seq, n);
END
$$;
