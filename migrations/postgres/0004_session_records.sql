-- PostgreSQL twin of migrations/0004_session_records.sql (types as in 0001_init.sql).

-- What a session's record (the `/v2` family's Session) needs beyond its timeline: where the session
-- came from, the caller's metadata, its budget, its lineage and when it was closed or stopped.
-- Every column is written in the transaction of the change it records.

-- Provenance, recorded at creation from the credential: `api` (API key), `react` (browser), `cli`,
-- `cron` (a schedule). NULL for sessions created before sessiond recorded it.
ALTER TABLE sessions ADD COLUMN source TEXT;
-- `api_key` for API keys, else NULL; the id is the key's public id or the acting user's id.
ALTER TABLE sessions ADD COLUMN attribution_type TEXT;
ALTER TABLE sessions ADD COLUMN attribution_id TEXT;
-- The caller's string → string map (a JSON object).
ALTER TABLE sessions ADD COLUMN metadata TEXT;
-- The cap on the session's cost, in cents; 0 = no cap.
ALTER TABLE sessions ADD COLUMN budget_cents BIGINT NOT NULL DEFAULT 0;
-- Lineage: `continuation`, `handoff` or `resume`, and the session it came from.
ALTER TABLE sessions ADD COLUMN parent_kind TEXT;
ALTER TABLE sessions ADD COLUMN parent_session_id TEXT;
-- A closed session takes no more prompts (a handoff closes its parent).
ALTER TABLE sessions ADD COLUMN closed_at BIGINT;
ALTER TABLE sessions ADD COLUMN handed_off_to TEXT;
-- The latest interrupt request: when, and by whom (a user, app or session id).
ALTER TABLE sessions ADD COLUMN stopped_at BIGINT;
ALTER TABLE sessions ADD COLUMN stopped_by TEXT;
-- Seq of the newest terminal event (0 = none yet), and when the last prompt or answer came in.
ALTER TABLE sessions ADD COLUMN last_terminal_seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN last_message_at BIGINT;

UPDATE sessions SET last_terminal_seq = COALESCE((
    SELECT max(e.seq) FROM events e
    WHERE e.session_pk = sessions.pk AND e.type IN ('complete', 'ask', 'interrupted', 'sleep')
), 0);

-- The input that started a turn (the run it is, on `/v2`), found from the turn; and the turn
-- open at any position, found without scanning the timeline.
CREATE INDEX input_turns_by_turn ON input_turns (session_pk, turn_started_seq, input_seq);

-- Turns recorded before every claim named its input (the runner's own wakes and machine steps)
-- name themselves.
INSERT INTO input_turns (session_pk, input_seq, turn_started_seq)
SELECT e.session_pk, e.seq, e.seq FROM events e
WHERE e.type = 'turn_started'
  AND NOT EXISTS (
    SELECT 1 FROM input_turns it
    WHERE it.session_pk = e.session_pk AND it.turn_started_seq = e.seq
  )
ON CONFLICT DO NOTHING;
