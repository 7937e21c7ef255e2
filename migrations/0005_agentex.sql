-- The agent platform API (/agentex). Its agents are sessiond's agents, its tasks are sessions and
-- its task messages are the timeline's own events; these tables hold what those objects carry
-- beyond them, each written in the same transaction as the events it belongs with.

-- An agent's registration (register-build) and which of its deployments is in production.
CREATE TABLE agentex_agents (
    agent_id                  TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    description               TEXT NOT NULL DEFAULT '',
    agent_input_type          TEXT,
    registration_metadata     TEXT,
    registered_at             INTEGER,
    production_deployment_id  TEXT,
    updated_at                INTEGER NOT NULL
);

-- Versions of an agent's engine configuration. `engine` is the canonical engine JSON the
-- deployment carries (also shown as `registration_metadata.engine`); promoting a deployment makes
-- it the agent's engine. At most one deployment of an agent is in production.
CREATE TABLE agentex_deployments (
    id                     TEXT PRIMARY KEY,
    agent_id               TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    docker_image           TEXT NOT NULL,
    helm_release_name      TEXT,
    sgp_deploy_id          TEXT,
    registration_metadata  TEXT NOT NULL,
    engine                 TEXT NOT NULL,
    is_production          INTEGER NOT NULL DEFAULT 0,
    promoted_at            INTEGER,
    created_at             INTEGER NOT NULL
);
CREATE INDEX agentex_deployments_by_agent ON agentex_deployments (agent_id, created_at, id);
CREATE UNIQUE INDEX agentex_deployments_production ON agentex_deployments (agent_id)
    WHERE is_production = 1;

-- A task's own fields. Every session is a task; sessions opened through /agentex (or changed
-- through it) have a row. `status` holds a final status set by cancel, complete, fail, terminate
-- or timeout; without one the status follows the session's turn. Names are unique per workspace.
CREATE TABLE agentex_tasks (
    session_pk     INTEGER PRIMARY KEY REFERENCES sessions(pk) ON DELETE CASCADE,
    workspace_id   TEXT NOT NULL,
    name           TEXT,
    params         TEXT,
    task_metadata  TEXT,
    status         TEXT,
    status_reason  TEXT,
    -- The deployment whose engine the task runs with (a preview); NULL: the agent's own engine.
    deployment_id  TEXT,
    updated_at     INTEGER NOT NULL
);
CREATE UNIQUE INDEX agentex_tasks_by_name ON agentex_tasks (workspace_id, name)
    WHERE name IS NOT NULL;

-- Events sent to a task (`event/send`), beside the timeline input each one delivered (`seq`).
-- `sequence_id` only grows and is never reused.
CREATE TABLE agentex_events (
    sequence_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    session_pk   INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    agent_id     TEXT NOT NULL,
    seq          INTEGER,
    content      TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX agentex_events_by_session ON agentex_events (session_pk, sequence_id);

-- One JSON state per task and agent.
CREATE TABLE agentex_states (
    id          TEXT PRIMARY KEY,
    session_pk  INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    agent_id    TEXT NOT NULL,
    state       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER,
    UNIQUE (session_pk, agent_id)
);

-- Trace spans. Times are microseconds since the Unix epoch (clients send microsecond precision).
CREATE TABLE agentex_spans (
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    id            TEXT NOT NULL,
    trace_id      TEXT NOT NULL,
    name          TEXT NOT NULL,
    start_time    INTEGER NOT NULL,
    end_time      INTEGER,
    parent_id     TEXT,
    task_id       TEXT,
    data          TEXT,
    input         TEXT,
    output        TEXT,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, id)
) WITHOUT ROWID;
CREATE INDEX agentex_spans_by_trace ON agentex_spans (workspace_id, trace_id, start_time);
CREATE INDEX agentex_spans_by_task ON agentex_spans (workspace_id, task_id, start_time);

-- The processing cursor of a task's agent over its events (one tracker per task).
CREATE TABLE agentex_trackers (
    session_pk               INTEGER PRIMARY KEY REFERENCES sessions(pk) ON DELETE CASCADE,
    last_processed_event_id  TEXT,
    status                   TEXT,
    status_reason            TEXT,
    updated_at               INTEGER NOT NULL
);

-- An engine configuration a session runs with instead of its agent's (a task opened through a
-- deployment preview runs with that deployment's engine).
ALTER TABLE sessions ADD COLUMN engine TEXT;
