-- PostgreSQL twin of migrations/0016_history_and_webhooks.sql (types as in 0001_init.sql).

-- Deployment history and webhook triggers of the agent platform API (/agentex), and the webhook
-- provenance of a session's record.

-- Every change to an agent's deployments (created, promoted, deleted), written in the transaction
-- of the change itself: who made it (the user or app of the credential, with the key it used) and
-- when. A row outlives its deployment (a deletion is a row about a deployment that is gone), so
-- `deployment_id` refers to nothing; the rows go with their agent.
CREATE TABLE agentex_deployment_history (
    id                     TEXT PRIMARY KEY,
    agent_id               TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    deployment_id          TEXT NOT NULL,
    change                 TEXT NOT NULL CHECK (change IN ('created', 'promoted', 'deleted')),
    docker_image           TEXT NOT NULL,
    -- When the deployment was created (the record's build time).
    deployment_created_at  BIGINT NOT NULL,
    -- The user or app of the credential (NULL for the rows this migration writes), its name as
    -- shown (a user's e-mail address, an app's name) and a user's e-mail address.
    author_id              TEXT,
    author_name            TEXT,
    author_email           TEXT,
    -- The API key the change was made with, when it was one.
    key_id                 TEXT,
    created_at             BIGINT NOT NULL
);
CREATE INDEX agentex_deployment_history_by_agent
    ON agentex_deployment_history (agent_id, created_at, id);

-- Deployments made before sessiond kept their history: a `created` row at their creation and a
-- `promoted` row at their last promotion, by an author nobody recorded.
INSERT INTO agentex_deployment_history
    (id, agent_id, deployment_id, change, docker_image, deployment_created_at, created_at)
SELECT md5(d.id || ':created'), d.agent_id, d.id, 'created', d.docker_image, d.created_at,
       d.created_at
FROM agentex_deployments d;
INSERT INTO agentex_deployment_history
    (id, agent_id, deployment_id, change, docker_image, deployment_created_at, created_at)
SELECT md5(d.id || ':promoted'), d.agent_id, d.id, 'promoted', d.docker_image, d.created_at,
       d.promoted_at
FROM agentex_deployments d WHERE d.promoted_at IS NOT NULL;

-- A webhook trigger: a GitHub or Slack signing secret registered for an agent, which the forward
-- ingress (`/agentex/agents/forward/name/{agent}/{forward_path}`) verifies deliveries with. The
-- secret is kept sealed (ChaCha20-Poly1305 under a key derived from the data dir's secret, the
-- row's id as associated data), since HMAC verification needs it whole; it is shown once, when
-- the trigger is created. `name` is what a delivery is matched on (a GitHub repository's
-- full_name, a Slack app's api_app_id). Deliveries start sessions as `created_by` (a user, or an
-- app: `creator_kind`), and only while that creator still belongs to the workspace.
CREATE TABLE agentex_webhook_triggers (
    id             TEXT PRIMARY KEY,
    workspace_id   TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    agent_id       TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    source         TEXT NOT NULL CHECK (source IN ('github', 'slack')),
    name           TEXT NOT NULL,
    forward_path   TEXT NOT NULL,
    secret_sealed  TEXT NOT NULL,
    created_by     TEXT NOT NULL,
    creator_kind   TEXT NOT NULL CHECK (creator_kind IN ('user', 'app')),
    created_at     BIGINT NOT NULL,
    UNIQUE (agent_id, source, name)
);
-- The ingress finds a delivery's triggers by its URL, whatever the workspace.
CREATE INDEX agentex_webhook_triggers_by_path
    ON agentex_webhook_triggers (forward_path, source);

-- A session started by a webhook delivery: the Session record's `webhook_type` (`github.issues`,
-- `slack.app_mention`, ...), `webhook_id` (the delivery's id) and `attribution.user` (the GitHub
-- account that caused it, JSON). NULL for every other session.
ALTER TABLE sessions ADD COLUMN webhook_type TEXT;
ALTER TABLE sessions ADD COLUMN webhook_id TEXT;
ALTER TABLE sessions ADD COLUMN attribution_user TEXT;
