-- Notifications for devices that are offline (docs/PUSH.md); the same tables as PostgreSQL's
-- 0007_push.sql, which explains them. Times are milliseconds since the epoch.
CREATE TABLE push_targets (
    user_id       TEXT NOT NULL,
    device_id     TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('webpush', 'gateway')),
    endpoint      TEXT NOT NULL,
    p256dh        TEXT,
    auth          TEXT,
    pushkey       TEXT,
    app_id        TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (user_id, device_id)
) STRICT;

CREATE TABLE notify_levels (
    conv_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    level   TEXT NOT NULL CHECK (level IN ('all', 'mentions', 'none')),
    PRIMARY KEY (conv_id, user_id)
) STRICT;

CREATE TABLE push_prefs (
    user_id TEXT PRIMARY KEY,
    privacy INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE push_outbox (
    conv_id TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (conv_id, seq)
) STRICT;

-- The outbox row is written in the message's own transaction.
CREATE TRIGGER events_push_outbox AFTER INSERT ON events WHEN NEW.kind = 'msg'
BEGIN
    INSERT INTO push_outbox (conv_id, seq) VALUES (NEW.conv_id, NEW.seq);
END;

CREATE TABLE push_pending (
    user_id        TEXT NOT NULL,
    device_id      TEXT NOT NULL,
    conv_id        TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    due_ms         INTEGER NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    lease_owner    TEXT,
    lease_until_ms INTEGER,
    PRIMARY KEY (user_id, device_id, conv_id)
) STRICT;
CREATE INDEX push_pending_due ON push_pending (due_ms);
CREATE INDEX push_pending_lease ON push_pending (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE push_sent (
    user_id    TEXT NOT NULL,
    device_id  TEXT NOT NULL,
    conv_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    sent_at_ms INTEGER NOT NULL,
    PRIMARY KEY (user_id, device_id, conv_id)
) STRICT;
