-- PostgreSQL twin of migrations/0009_scale_reads.sql (types as in 0001_init.sql).

-- An agent's activity view reads its unarchived sessions by bucket priority (asking, running,
-- scheduled, then the rest), newest first. The index holds exactly that order (the expression is
-- the one in the query's ORDER BY), so a page reads its own rows and no others however many
-- sessions the agent has. The database keeps it in the same transaction as every write to the row; the
-- CREATE builds it from the sessions already stored.
CREATE INDEX sessions_activity ON sessions (
    agent_id,
    (CASE bucket WHEN 'asking' THEN 0 WHEN 'running' THEN 1 WHEN 'scheduled' THEN 2 ELSE 3 END),
    created_at DESC,
    id DESC
) WHERE archived_at IS NULL;
