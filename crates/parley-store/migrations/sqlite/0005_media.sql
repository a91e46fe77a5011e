-- Attachments (docs/MEDIA.md); the same tables as PostgreSQL's 0006_media.sql, which explains
-- them. Times are milliseconds since the epoch.
ALTER TABLE events ADD COLUMN attachments TEXT;

CREATE TABLE media_blobs (
    sha256 TEXT PRIMARY KEY,
    size   INTEGER NOT NULL
) STRICT;

CREATE TABLE media (
    media_id           TEXT PRIMARY KEY,
    uploader           TEXT NOT NULL,
    sha256             TEXT NOT NULL REFERENCES media_blobs,
    size               INTEGER NOT NULL,
    content_type       TEXT NOT NULL,
    inline_safe        INTEGER NOT NULL,
    filename           TEXT,
    width              INTEGER,
    height             INTEGER,
    thumb_sha256       TEXT REFERENCES media_blobs,
    thumb_size         INTEGER,
    thumb_content_type TEXT,
    uploaded_at_ms     INTEGER NOT NULL,
    sent_at_ms         INTEGER,
    UNIQUE (uploader, sha256)
) STRICT;
CREATE INDEX media_sha256 ON media (sha256);
CREATE INDEX media_thumb_sha256 ON media (thumb_sha256) WHERE thumb_sha256 IS NOT NULL;
CREATE INDEX media_unsent ON media (uploaded_at_ms);

CREATE TABLE attachments (
    media_id TEXT NOT NULL REFERENCES media,
    conv_id  TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    PRIMARY KEY (media_id, conv_id, seq)
) STRICT;
CREATE INDEX attachments_message ON attachments (conv_id, seq);

CREATE TABLE server_keys (
    name TEXT PRIMARY KEY,
    key  TEXT NOT NULL
) STRICT;
