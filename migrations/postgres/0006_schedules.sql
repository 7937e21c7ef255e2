-- PostgreSQL twin of migrations/0006_schedules.sql (types as in 0001_init.sql).

-- Agent run schedules: each tick creates a session of the schedule's agent with its initial input.
-- Times are milliseconds since the Unix epoch; JSON columns hold the API's JSON.

CREATE TABLE schedules (
    id               TEXT PRIMARY KEY,
    workspace_id     TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    agent_id         TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    name             TEXT NOT NULL,
    description      TEXT,
    -- Exactly one cadence: a 5-field cron expression evaluated in `timezone`, or an interval.
    cron_expression  TEXT,
    interval_seconds BIGINT,
    timezone         TEXT NOT NULL DEFAULT 'UTC',
    -- Interval ticks fall on anchor_at + k * interval (start_at, else when the interval was set).
    anchor_at        BIGINT NOT NULL,
    start_at         BIGINT,
    end_at           BIGINT,
    paused           BIGINT NOT NULL DEFAULT 0,
    -- {"content", "author", "type"}
    initial_input    TEXT NOT NULL,
    task_params      TEXT,
    task_metadata    TEXT,
    -- Who created it (credential-free): {"principal_type", "user_id" | "service_account_id"}.
    creator          TEXT NOT NULL,
    -- Future fire times to leave out (a JSON array of ms), pruned as they pass.
    skipped          TEXT NOT NULL DEFAULT '[]',
    -- The tick the scheduler fires next; NULL while paused or after the last one. A tick's session
    -- is created in the same transaction that moves this on, so a tick fires exactly once.
    next_due_at      BIGINT,
    num_actions      BIGINT NOT NULL DEFAULT 0,
    last_action_at   BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    UNIQUE (agent_id, name)
);
CREATE INDEX schedules_due ON schedules (next_due_at, id) WHERE next_due_at IS NOT NULL;
CREATE INDEX schedules_by_agent ON schedules (agent_id, created_at, id);

-- Which tick made which session: one row per session a schedule created, removed with the session.
-- The task's name, params and metadata are its agentex_tasks row.
CREATE TABLE schedule_runs (
    session_pk     BIGINT PRIMARY KEY REFERENCES sessions(pk) ON DELETE CASCADE,
    schedule_id    TEXT NOT NULL,
    -- The tick's nominal time (for a manual trigger, when it was triggered).
    fire_time      BIGINT NOT NULL,
    -- 'scheduled', 'catch_up' (ticks missed while sessiond was down, folded into one run) or
    -- 'manual' (trigger).
    trigger_type   TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
-- A tick of the cadence makes at most one session, whatever happens.
CREATE UNIQUE INDEX schedule_runs_one_per_tick ON schedule_runs (schedule_id, fire_time)
    WHERE trigger_type <> 'manual';
