-- LangGraph checkpoints that agents keep through /agentex/checkpoints (the AgentEx SDK's HTTP
-- checkpointer), laid out like LangGraph's own PostgreSQL checkpointer. A thread is a task: its
-- `thread_id` is the task's id, so every row hangs off the task's session and goes with it.
-- Blobs and writes are kept as the client sent them (base64 text); checkpoints and metadata as
-- JSON text.

-- One checkpoint of a thread's namespace. `checkpoint_id`s order by time (LangGraph's ids are
-- UUIDv6), so the newest is the greatest.
CREATE TABLE agentex_checkpoints (
    session_pk            INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns         TEXT NOT NULL,
    checkpoint_id         TEXT NOT NULL,
    parent_checkpoint_id  TEXT,
    checkpoint            TEXT NOT NULL,
    metadata              TEXT NOT NULL,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (session_pk, checkpoint_ns, checkpoint_id)
) WITHOUT ROWID;

-- A channel's value at one version, shared by every checkpoint whose `channel_versions` name it.
CREATE TABLE agentex_checkpoint_blobs (
    session_pk     INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns  TEXT NOT NULL,
    channel        TEXT NOT NULL,
    version        TEXT NOT NULL,
    type           TEXT NOT NULL,
    blob           TEXT,
    PRIMARY KEY (session_pk, checkpoint_ns, channel, version)
) WITHOUT ROWID;

-- The pending writes of a checkpoint's tasks, one per (task, idx).
CREATE TABLE agentex_checkpoint_writes (
    session_pk     INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns  TEXT NOT NULL,
    checkpoint_id  TEXT NOT NULL,
    task_id        TEXT NOT NULL,
    idx            INTEGER NOT NULL,
    channel        TEXT NOT NULL,
    type           TEXT,
    blob           TEXT NOT NULL,
    task_path      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_pk, checkpoint_ns, checkpoint_id, task_id, idx)
) WITHOUT ROWID;
