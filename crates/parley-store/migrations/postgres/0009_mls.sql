-- End-to-end encrypted conversations (docs/E2EE.md): the conversation's MLS epoch, the MLS
-- events with their opaque messages, and the key-package directory. The server stores and
-- orders MLS messages and never reads them.

-- NULL for a plain conversation; an encrypted one (kind 'group' underneath) starts at epoch 0
-- and each accepted Commit advances it by one, under the conversation's row lock.
ALTER TABLE conversations ADD COLUMN mls_epoch bigint CHECK (mls_epoch >= 0);

ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('msg', 'recall', 'join', 'leave', 'edit', 'react', 'unreact',
                    'mls_application', 'mls_proposal', 'mls_commit', 'mls_welcome'));
-- The epoch an MLS message was made in, its bytes as standard base64, and a Welcome's devices
-- as a JSON array of {user_id, device_id}.
ALTER TABLE events ADD COLUMN mls_epoch bigint;
ALTER TABLE events ADD COLUMN mls_message text;
ALTER TABLE events ADD COLUMN mls_devices text;
-- The Delivery Service rule's last guard: one Commit per epoch. The write path checks the
-- epoch under the conversation's lock first, and answers a conflict with this Commit's seq.
CREATE UNIQUE INDEX events_mls_commit_epoch ON events (conv_id, mls_epoch)
    WHERE kind = 'mls_commit';

-- KeyPackages a device published for others to add it by (RFC 9420 §10). An ordinary one is
-- deleted by the claim that hands it out; the last-resort one stays.
CREATE TABLE key_packages (
    package_id  bigserial PRIMARY KEY,
    user_id     text NOT NULL,
    device_id   text NOT NULL,
    key_package text NOT NULL,
    last_resort boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (user_id, device_id) REFERENCES devices ON DELETE CASCADE
);
-- A claim takes a device's oldest package; at most one last-resort package per device.
CREATE INDEX key_packages_by_device ON key_packages (user_id, device_id, last_resort, package_id);
CREATE UNIQUE INDEX key_packages_one_last_resort ON key_packages (user_id, device_id)
    WHERE last_resort;
