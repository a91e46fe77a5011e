-- Accounts with passwords (issue 13): the argon2id hash of a user's password as a PHC string.
-- NULL means the user has no password and can only be given device tokens by the operator.
ALTER TABLE users ADD COLUMN password_hash TEXT;
