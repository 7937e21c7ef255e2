-- PostgreSQL twin of migrations/0003_root_agent_name.sql (types as in 0001_init.sql).

-- The root agent's name says what it is: the agent of the whole workspace drive (it was "Drive",
-- which read like a place rather than an agent). Names an operator chose are kept.
UPDATE agents SET name = 'Workspace agent' WHERE slug = 'root' AND name = 'Drive';
