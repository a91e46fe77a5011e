-- Notifications for devices that are offline (docs/PUSH.md). Times are milliseconds since the
-- epoch, the same integer in both stores.

-- One push endpoint per device: a Web Push subscription or a push-gateway target (the Matrix
-- push-gateway model). A logout, a token revocation or a 404/410 from the push service deletes it.
CREATE TABLE push_targets (
    user_id       text NOT NULL,
    device_id     text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('webpush', 'gateway')),
    -- The subscription's endpoint or the gateway's URL.
    endpoint      text NOT NULL,
    p256dh        text,
    auth          text,
    pushkey       text,
    app_id        text,
    created_at_ms bigint NOT NULL,
    PRIMARY KEY (user_id, device_id)
);

-- A member's notification level of a conversation; no row is 'all'.
CREATE TABLE notify_levels (
    conv_id text NOT NULL,
    user_id text NOT NULL,
    level   text NOT NULL CHECK (level IN ('all', 'mentions', 'none')),
    PRIMARY KEY (conv_id, user_id)
);

-- A user's notification settings; no row is the defaults.
CREATE TABLE push_prefs (
    user_id text PRIMARY KEY,
    -- Notifications carry no sender and no preview.
    privacy bigint NOT NULL DEFAULT 0
);

-- The durable outbox: one row per committed message, written by the trigger below in the
-- transaction of the message itself, so a notification can only follow a commit. The push
-- worker expands each row into push_pending and deletes it.
CREATE TABLE push_outbox (
    conv_id text NOT NULL,
    seq     bigint NOT NULL,
    PRIMARY KEY (conv_id, seq)
);

-- A statement trigger with a transition table: a batch of sends written by one INSERT adds its
-- outbox rows with one INSERT too.
CREATE FUNCTION push_outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO push_outbox (conv_id, seq)
    SELECT conv_id, seq FROM new_events WHERE kind = 'msg';
    RETURN NULL;
END
$$;
CREATE TRIGGER events_push_outbox AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION push_outbox_enqueue();

-- The notification each offline device is owed, at most one per device and conversation: a
-- burst coalesces into its latest seq, sent no earlier than due_ms. A gateway claims rows with a
-- lease; another takes them when the lease runs out.
CREATE TABLE push_pending (
    user_id        text NOT NULL,
    device_id      text NOT NULL,
    conv_id        text NOT NULL,
    seq            bigint NOT NULL,
    due_ms         bigint NOT NULL,
    attempts       bigint NOT NULL DEFAULT 0,
    lease_owner    text,
    lease_until_ms bigint,
    PRIMARY KEY (user_id, device_id, conv_id)
);
CREATE INDEX push_pending_due ON push_pending (due_ms);
CREATE INDEX push_pending_lease ON push_pending (lease_owner) WHERE lease_owner IS NOT NULL;

-- The last notification sent per device and conversation: nothing at or below its seq is sent
-- again (dedupe), and the next waits until sent_at_ms + the coalescing interval.
CREATE TABLE push_sent (
    user_id    text NOT NULL,
    device_id  text NOT NULL,
    conv_id    text NOT NULL,
    seq        bigint NOT NULL,
    sent_at_ms bigint NOT NULL,
    PRIMARY KEY (user_id, device_id, conv_id)
);
