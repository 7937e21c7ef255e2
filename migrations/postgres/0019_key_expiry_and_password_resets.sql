-- Access managed from the web console (SQLite's 0022 says why): key expiry and one-time
-- password-reset links, their tokens kept as hashes only.

ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;

CREATE TABLE password_resets (
    token_hash  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_by  TEXT,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX password_resets_by_user ON password_resets (user_id);
