-- Access managed from the web console: an API key may expire, and an owner may hand a person a
-- one-time link to choose a new password.

-- When a key stops working by itself (ms since the epoch); NULL for a key that never expires.
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;

-- One-time password-reset links. Only the token's hash is kept; a row is used up (deleted) when
-- its password is set, and every link of a person goes when one of them is used.
CREATE TABLE password_resets (
    token_hash  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_by  TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX password_resets_by_user ON password_resets (user_id);
