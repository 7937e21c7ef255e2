-- A2A push-notification configs: where sessiond posts a task's updates. A task is a session, so
-- a config belongs to its session row and goes with it. The token and the credentials are
-- secrets sessiond must send again whole: sealed (`secret::Sealer`, the row's key as context).
CREATE TABLE a2a_push_configs (
    session_pk          INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    id                  TEXT NOT NULL,
    url                 TEXT NOT NULL,
    token_sealed        TEXT,
    auth_scheme         TEXT,
    credentials_sealed  TEXT,
    created_at          INTEGER NOT NULL,
    PRIMARY KEY (session_pk, id)
);
