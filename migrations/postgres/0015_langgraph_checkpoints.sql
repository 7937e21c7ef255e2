-- PostgreSQL twin of migrations/0015_langgraph_checkpoints.sql (types as in 0001_init.sql).

-- LangGraph checkpoints that agents keep through /agentex/checkpoints (the AgentEx SDK's HTTP
-- checkpointer), laid out like LangGraph's own PostgreSQL checkpointer. A thread is a task: its
-- `thread_id` is the task's id, so every row hangs off the task's session and goes with it.
-- Blobs and writes are kept as the client sent them (base64 text); checkpoints and metadata as
-- JSON text. Names and ids compare byte by byte (`COLLATE "C"`, SQLite's rule), whatever the
-- database's locale: "newest" and "before" are comparisons of `checkpoint_id`s.

-- One checkpoint of a thread's namespace. `checkpoint_id`s order by time (LangGraph's ids are
-- UUIDv6), so the newest is the greatest.
CREATE TABLE agentex_checkpoints (
    session_pk            BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns         TEXT COLLATE "C" NOT NULL,
    checkpoint_id         TEXT COLLATE "C" NOT NULL,
    parent_checkpoint_id  TEXT,
    checkpoint            TEXT NOT NULL,
    metadata              TEXT NOT NULL,
    created_at            BIGINT NOT NULL,
    updated_at            BIGINT NOT NULL,
    PRIMARY KEY (session_pk, checkpoint_ns, checkpoint_id)
);

-- A channel's value at one version, shared by every checkpoint whose `channel_versions` name it.
CREATE TABLE agentex_checkpoint_blobs (
    session_pk     BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns  TEXT COLLATE "C" NOT NULL,
    channel        TEXT COLLATE "C" NOT NULL,
    version        TEXT COLLATE "C" NOT NULL,
    type           TEXT NOT NULL,
    blob           TEXT,
    PRIMARY KEY (session_pk, checkpoint_ns, channel, version)
);

-- The pending writes of a checkpoint's tasks, one per (task, idx).
CREATE TABLE agentex_checkpoint_writes (
    session_pk     BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    checkpoint_ns  TEXT COLLATE "C" NOT NULL,
    checkpoint_id  TEXT COLLATE "C" NOT NULL,
    task_id        TEXT COLLATE "C" NOT NULL,
    idx            BIGINT NOT NULL,
    channel        TEXT NOT NULL,
    type           TEXT,
    blob           TEXT NOT NULL,
    task_path      TEXT COLLATE "C" NOT NULL DEFAULT '',
    PRIMARY KEY (session_pk, checkpoint_ns, checkpoint_id, task_id, idx)
);
