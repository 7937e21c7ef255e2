-- How sessiond's last calls to an agent's ACP server went (any agent whose engine is `acp`,
-- registered or configured by hand): when the server last answered a call, and the last call that
-- failed, with its error. Written by the `acp` engine's calls through the agent platform; goes
-- with its agent.
CREATE TABLE acp_contacts (
    agent_id         TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    last_contact_at  BIGINT,
    last_error       TEXT,
    last_error_at    BIGINT
);
