-- Which process runs a session's turn and until when its lease holds. With several processes on
-- one database (PostgreSQL) a process renews the leases of its turns while they run; a turn whose
-- lease expired belongs to a process that died, and another process ends it. SQLite has one
-- process: the columns are written (the owner is shown in the Session record) and never expire
-- anything.
ALTER TABLE sessions ADD COLUMN turn_owner TEXT;
ALTER TABLE sessions ADD COLUMN turn_lease_until INTEGER;
CREATE INDEX sessions_leases ON sessions (turn_lease_until) WHERE turn_active = 1;
