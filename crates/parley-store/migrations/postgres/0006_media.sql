-- Attachments (docs/MEDIA.md). The bytes live in the media backend, named by their SHA-256; the
-- store keeps which blobs exist, which uploads name them, and which messages name an upload.
-- Times are milliseconds since the epoch, the same integer in both stores.

-- A message's attachments as it was sent: a JSON array of attachment objects.
ALTER TABLE events ADD COLUMN attachments text;

-- One row per stored blob (an upload's bytes or a thumbnail). An upload registers its blob
-- here, taking the row's lock, before it makes the bytes visible; the sweep deletes a blob's
-- bytes only while it holds that lock, so an upload of the same bytes can never lose them.
CREATE TABLE media_blobs (
    sha256 text PRIMARY KEY,
    size   bigint NOT NULL
);

-- One row per uploader and bytes: the uploader's handle (media_id) on a blob.
CREATE TABLE media (
    media_id           text PRIMARY KEY,
    uploader           text NOT NULL,
    sha256             text NOT NULL REFERENCES media_blobs,
    size               bigint NOT NULL,
    content_type       text NOT NULL,
    inline_safe        boolean NOT NULL,
    filename           text,
    width              bigint,
    height             bigint,
    thumb_sha256       text REFERENCES media_blobs,
    thumb_size         bigint,
    thumb_content_type text,
    -- The last upload of these bytes by this uploader; the grace period counts from it.
    uploaded_at_ms     bigint NOT NULL,
    -- Set when a message first names the media: from then on only messages grant access.
    sent_at_ms         bigint,
    UNIQUE (uploader, sha256)
);
CREATE INDEX media_sha256 ON media (sha256);
CREATE INDEX media_thumb_sha256 ON media (thumb_sha256) WHERE thumb_sha256 IS NOT NULL;
CREATE INDEX media_unsent ON media (uploaded_at_ms);

-- Which messages name which media; a recall or a purge deletes the rows of its messages.
CREATE TABLE attachments (
    media_id text NOT NULL REFERENCES media,
    conv_id  text NOT NULL,
    seq      bigint NOT NULL,
    PRIMARY KEY (media_id, conv_id, seq)
);
CREATE INDEX attachments_message ON attachments (conv_id, seq);

-- Keys every gateway shares (the HMAC key of signed media URLs), made once by whichever
-- gateway asks first.
CREATE TABLE server_keys (
    name text PRIMARY KEY,
    key  text NOT NULL
);
