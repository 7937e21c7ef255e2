-- Retention, for PostgreSQL: the twin of migrations/0017_retention.sql.

-- 1: never removed by a retention sweep (`PUT …/agent/sessions/{id}/pin`).
ALTER TABLE sessions ADD COLUMN pinned BIGINT NOT NULL DEFAULT 0;

-- One policy per workspace: remove (or archive, then remove) sessions idle for more than
-- `idle_ms`, keeping the newest `keep_latest` of each agent. NULL: that rule is off.
CREATE TABLE retention_policies (
    workspace_id  TEXT PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
    idle_ms       BIGINT,
    keep_latest   BIGINT,
    action        TEXT NOT NULL,
    updated_at    BIGINT NOT NULL
);
