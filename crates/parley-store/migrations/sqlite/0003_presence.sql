-- Presence (SPEC §7): when a user's last device disconnected, RFC 3339 UTC with six
-- fractional digits like every stored time. A user is online while any of their devices has a
-- route; `last_seen_at` is what others see once none has. NULL: never seen disconnecting since
-- this column exists.
ALTER TABLE users ADD COLUMN last_seen_at TEXT;
