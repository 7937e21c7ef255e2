-- Retention: a workspace's policy for removing old sessions, and the pin that keeps a session
-- from every policy.

-- 1: never removed by a retention sweep (`PUT …/agent/sessions/{id}/pin`).
ALTER TABLE sessions ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0;

-- One policy per workspace: remove (or archive, then remove) sessions idle for more than
-- `idle_ms`, keeping the newest `keep_latest` of each agent. NULL: that rule is off.
CREATE TABLE retention_policies (
    workspace_id  TEXT PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
    idle_ms       INTEGER,
    keep_latest   INTEGER,
    action        TEXT NOT NULL,
    updated_at    INTEGER NOT NULL
);
