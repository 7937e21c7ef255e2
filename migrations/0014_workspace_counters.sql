-- Counters a workspace can see count only that workspace's work. `sequence_id` of an AgentEx
-- event was the table's own AUTOINCREMENT key, shared by every workspace: the gap between two of
-- a workspace's events told how many events all the others had sent meanwhile. It is now drawn
-- from the workspace's own counter, in the transaction that records the event; the old key stays
-- as the row's private `pk`.
--
-- A counter only grows (it is never lowered when events go with their tasks), so a sequence id is
-- never reused within its workspace, and a task's events still ascend with it.
CREATE TABLE workspace_counters (
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    value         INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, name)
);

-- The table is built anew (SQLite adds no NOT NULL column without a default), its columns in the
-- order PostgreSQL's twin has them. Existing events are numbered again, 1, 2, … per workspace in
-- the order they were recorded.
CREATE TABLE agentex_events_new (
    pk           INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT NOT NULL UNIQUE,
    session_pk   INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    agent_id     TEXT NOT NULL,
    seq          INTEGER,
    content      TEXT,
    created_at   INTEGER NOT NULL,
    sequence_id  INTEGER NOT NULL
);
INSERT INTO agentex_events_new (pk, id, session_pk, agent_id, seq, content, created_at, sequence_id)
SELECT v.sequence_id, v.id, v.session_pk, v.agent_id, v.seq, v.content, v.created_at,
       ROW_NUMBER() OVER (PARTITION BY s.workspace_id ORDER BY v.sequence_id)
  FROM agentex_events v JOIN sessions s ON s.pk = v.session_pk;
DROP TABLE agentex_events;
ALTER TABLE agentex_events_new RENAME TO agentex_events;
CREATE INDEX agentex_events_by_session ON agentex_events (session_pk, sequence_id);

INSERT INTO workspace_counters (workspace_id, name, value)
SELECT s.workspace_id, 'agentex_event', MAX(v.sequence_id)
  FROM agentex_events v JOIN sessions s ON s.pk = v.session_pk
 GROUP BY s.workspace_id;
