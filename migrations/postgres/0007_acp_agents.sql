-- PostgreSQL twin of migrations/0007_acp_agents.sql (types as in 0001_init.sql).

-- ACP servers (agents built with the AgentEx SDK) that registered themselves. The agent is an
-- ordinary agent whose engine is `{"kind": "acp", ...}`; this row holds what registration adds:
-- the key the agent was issued (only its SHA-256: sessiond derives the key again from
-- `key_salt` and its own secret to send it to the agent), the principal context the SDK sent,
-- and the user on whose credential it registered (its callbacks act as that user).
CREATE TABLE acp_registrations (
    agent_id           TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    key_salt           TEXT NOT NULL,
    key_hash           TEXT NOT NULL UNIQUE,
    principal_context  TEXT,
    registered_by      TEXT NOT NULL,
    updated_at         BIGINT NOT NULL
);
