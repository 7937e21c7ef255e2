-- Counters a workspace can see count only that workspace's work (SQLite's 0014 says why). The
-- event's old identity key stays as its private `pk`; `sequence_id` comes from the workspace's
-- own counter, whose row the recording transaction locks, so two processes never draw the same
-- value and a workspace's counter never waits on another's.
CREATE TABLE workspace_counters (
    workspace_id  TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    value         BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, name)
);

ALTER TABLE agentex_events RENAME COLUMN sequence_id TO pk;
ALTER TABLE agentex_events ADD COLUMN sequence_id BIGINT;

UPDATE agentex_events v
   SET sequence_id = numbered.n
  FROM (
       SELECT e.pk, ROW_NUMBER() OVER (PARTITION BY s.workspace_id ORDER BY e.pk) AS n
         FROM agentex_events e JOIN sessions s ON s.pk = e.session_pk
  ) numbered
 WHERE numbered.pk = v.pk;
INSERT INTO workspace_counters (workspace_id, name, value)
SELECT s.workspace_id, 'agentex_event', MAX(v.sequence_id)
  FROM agentex_events v JOIN sessions s ON s.pk = v.session_pk
 GROUP BY s.workspace_id;

ALTER TABLE agentex_events ALTER COLUMN sequence_id SET NOT NULL;
DROP INDEX agentex_events_by_session;
CREATE INDEX agentex_events_by_session ON agentex_events (session_pk, sequence_id);
