-- PostgreSQL twin of migrations/0002_engines.sql (types as in 0001_init.sql).

-- What an engine keeps about a session from one turn to the next (an agent CLI's own session id,
-- the model the last turn ran on). Unlike engine_state it survives every kind of terminal.
ALTER TABLE sessions ADD COLUMN engine_memo TEXT;

-- The sum of every usage event of the session (a JSON `Usage`), for totals without a history scan.
ALTER TABLE sessions ADD COLUMN usage_totals TEXT;
