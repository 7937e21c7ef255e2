-- sessiond schema, version 1.
-- Timestamps are milliseconds since the Unix epoch. JSON columns hold seed-shaped JSON text.

CREATE TABLE workspaces (
    id          TEXT PRIMARY KEY,
    slug        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

-- An owner of default sessions and of a drive anchor. The reserved slug `root` owns the whole drive.
CREATE TABLE agents (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    slug          TEXT NOT NULL,
    name          TEXT NOT NULL,
    anchor        TEXT NOT NULL DEFAULT '',
    engine        TEXT NOT NULL DEFAULT '{}',
    created_at    INTEGER NOT NULL,
    UNIQUE (workspace_id, slug)
);

-- The projection row of a session. Every change to it is made in the same transaction as the
-- timeline event that causes it.
CREATE TABLE sessions (
    pk                        INTEGER PRIMARY KEY AUTOINCREMENT,
    id                        TEXT NOT NULL UNIQUE,
    workspace_id              TEXT NOT NULL REFERENCES workspaces(id),
    agent_id                  TEXT NOT NULL REFERENCES agents(id),
    user_id                   TEXT NOT NULL,
    title                     TEXT NOT NULL,
    title_origin              TEXT NOT NULL,
    title_status              TEXT NOT NULL,
    turn_status               TEXT NOT NULL,
    bucket                    TEXT NOT NULL,
    archived_at               INTEGER,
    cwd                       TEXT,
    created_by_session_id     TEXT,
    tier                      TEXT,
    mode                      TEXT NOT NULL DEFAULT '"agent"',
    created_at                INTEGER NOT NULL,
    updated_at                INTEGER NOT NULL,
    last_event_seq            INTEGER NOT NULL DEFAULT 0,
    -- Seq of the newest event the agent (not an input) produced; drives `unread`.
    last_output_seq           INTEGER NOT NULL DEFAULT 0,
    last_delivered_input_seq  INTEGER NOT NULL DEFAULT 0,
    delivery_attempt          TEXT,
    todos                     TEXT,
    follow_up_queue           TEXT,
    requested_machine         TEXT,
    machine_state             TEXT,
    machine                   TEXT,
    -- Fencing: bumped whenever a turn is claimed or cut off; writes carry the generation they hold.
    turn_generation           INTEGER NOT NULL DEFAULT 0,
    turn_active               INTEGER NOT NULL DEFAULT 0,
    -- Engine continuation kept across an ask or a sleep (opaque JSON owned by the engine).
    engine_state              TEXT,
    wake_at                   INTEGER,
    next_task_id              INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX sessions_by_created ON sessions (workspace_id, created_at DESC, id DESC);
CREATE INDEX sessions_by_bucket ON sessions (workspace_id, bucket, created_at DESC, id DESC);
CREATE INDEX sessions_by_agent ON sessions (agent_id, created_at DESC, id DESC);
CREATE INDEX sessions_active ON sessions (turn_active) WHERE turn_active = 1;

-- Full-text search over titles and prompts; rowid = sessions.pk.
CREATE VIRTUAL TABLE session_search USING fts5 (title, prompts, tokenize = 'unicode61 remove_diacritics 2');

-- The append-only timeline. seq is 1, 2, 3, ... per session with no gaps.
CREATE TABLE events (
    session_pk  INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (session_pk, seq)
) WITHOUT ROWID;

-- Inputs the runner has not taken yet (prompts, answers, wakes), in seq order per session.
CREATE TABLE pending_inputs (
    session_pk   INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    behavior     TEXT NOT NULL,
    tier         TEXT,
    text         TEXT NOT NULL,
    images       TEXT,
    not_before   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_pk, seq)
) WITHOUT ROWID;

-- clientRequestId registry: one id per workspace, bound to the request it first came with.
CREATE TABLE client_requests (
    workspace_id       TEXT NOT NULL,
    client_request_id  TEXT NOT NULL,
    fingerprint        TEXT NOT NULL,
    session_id         TEXT NOT NULL,
    input_seq          INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, client_request_id)
) WITHOUT ROWID;

CREATE TABLE read_markers (
    session_pk     INTEGER NOT NULL,
    user_id        TEXT NOT NULL,
    last_read_seq  INTEGER NOT NULL,
    PRIMARY KEY (session_pk, user_id)
) WITHOUT ROWID;

-- The default-session pointer lives on the owner, not on the session.
CREATE TABLE default_sessions (
    agent_id    TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    session_id  TEXT NOT NULL
);
CREATE INDEX default_sessions_by_session ON default_sessions (session_id);

-- Inline images, stored once per session and addressed by content.
CREATE TABLE images (
    session_pk  INTEGER NOT NULL,
    storage_id  TEXT NOT NULL,
    mime_type   TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (session_pk, storage_id)
) WITHOUT ROWID;

-- Which turn took each input: its terminal is the first terminal after that turn started.
CREATE TABLE input_turns (
    session_pk        INTEGER NOT NULL,
    input_seq         INTEGER NOT NULL,
    turn_started_seq  INTEGER NOT NULL,
    PRIMARY KEY (session_pk, input_seq)
) WITHOUT ROWID;

-- Background work of a turn (task_started ... task_settled); running rows left by a crash settle
-- as `lost` on the next start.
CREATE TABLE tasks (
    session_pk  INTEGER NOT NULL,
    id          TEXT NOT NULL,
    body        TEXT NOT NULL,
    status      TEXT NOT NULL,
    PRIMARY KEY (session_pk, id)
) WITHOUT ROWID;

-- Short-lived, write-only upload grants for one drive folder; only the token's hash is kept.
CREATE TABLE upload_grants (
    id              TEXT PRIMARY KEY,
    token_hash      TEXT NOT NULL,
    workspace_id    TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    prefix          TEXT NOT NULL,
    expires_at      INTEGER NOT NULL,
    created_at      INTEGER NOT NULL
);

-- People. Passwords are argon2id PHC strings; nothing else about a password is kept.
CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash  TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);

CREATE TABLE memberships (
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    role          TEXT NOT NULL CHECK (role IN ('owner', 'member')),
    PRIMARY KEY (user_id, workspace_id)
);

-- Registered apps; their keys author as {kind:"app"}.
CREATE TABLE apps (
    id            TEXT PRIMARY KEY,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    api_scopes    TEXT NOT NULL,
    created_at    INTEGER NOT NULL
);

-- API keys (personal and app). The key is `sk_<id>_<secret>`; only the secret's hash is kept.
CREATE TABLE api_keys (
    id            TEXT PRIMARY KEY,
    secret_hash   TEXT NOT NULL,
    name          TEXT NOT NULL,
    user_id       TEXT REFERENCES users(id) ON DELETE CASCADE,
    app_id        TEXT REFERENCES apps(id) ON DELETE CASCADE,
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    scopes        TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_used_at  INTEGER,
    revoked_at    INTEGER
);

-- Browser sessions (cookie). Only the cookie value's hash is kept.
CREATE TABLE browser_sessions (
    token_hash  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
