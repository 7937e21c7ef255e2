-- PostgreSQL twin of migrations/0012_turn_leases.sql: the process that runs a session's turn
-- (its runner id) and the time (ms since the epoch) until which its lease holds.
ALTER TABLE sessions ADD COLUMN turn_owner TEXT;
ALTER TABLE sessions ADD COLUMN turn_lease_until BIGINT;
CREATE INDEX sessions_leases ON sessions (turn_lease_until) WHERE turn_active = 1;
