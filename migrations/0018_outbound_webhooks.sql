-- Outbound webhooks: a workspace's subscriptions, the outbox of messages to deliver to them
-- (written in the transaction of the event that causes each), and the log of every attempt.

-- A subscription: an endpoint of the workspace's and what it wants to hear about (`event_kinds`,
-- a JSON array of event types, empty for all; optionally one agent or one session). Its signing
-- secret is sealed (ChaCha20-Poly1305, the row's id as associated data), since signing needs it
-- whole; during a rotation's overlap the previous one is kept sealed too, until
-- `previous_secret_until`. `failing_since` is the first failed attempt since the last success;
-- a subscription failing for too long is disabled (`disabled_at`, `disabled_reason`).
CREATE TABLE webhook_subscriptions (
    id                      TEXT PRIMARY KEY,
    workspace_id            TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
    url                     TEXT NOT NULL,
    description             TEXT NOT NULL,
    event_kinds             TEXT NOT NULL,
    agent_id                TEXT,
    session_id              TEXT,
    secret_sealed           TEXT NOT NULL,
    previous_secret_sealed  TEXT,
    previous_secret_until   INTEGER,
    failing_since           INTEGER,
    disabled_at             INTEGER,
    disabled_reason         TEXT,
    created_by              TEXT NOT NULL,
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL
);
CREATE INDEX webhook_subscriptions_by_workspace
    ON webhook_subscriptions (workspace_id, created_at, id);

-- The outbox: one message for one subscription. `id` is the message's `webhook-id`, the same on
-- every attempt and redelivery. `state` is `pending` until an attempt succeeds (`delivered`) or
-- the retries run out (`failed`), retried from `retry_from` (its creation, or its last
-- redelivery) for `webhooks.retry_for_ms`; `lease_until` is held while a process attempts it.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,
    subscription_id  TEXT NOT NULL REFERENCES webhook_subscriptions(id) ON DELETE CASCADE,
    event_type       TEXT NOT NULL,
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL,
    next_attempt_at  INTEGER NOT NULL,
    retry_from       INTEGER NOT NULL,
    lease_until      INTEGER,
    last_status      INTEGER,
    last_error       TEXT,
    last_latency_ms  INTEGER,
    last_attempt_at  INTEGER,
    delivered_at     INTEGER,
    created_at       INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_by_subscription
    ON webhook_deliveries (subscription_id, created_at, id);

-- Every attempt of a delivery: when, the HTTP status (NULL when none came back), how long it
-- took and why it failed.
CREATE TABLE webhook_attempts (
    delivery_id  TEXT NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    status       INTEGER,
    latency_ms   INTEGER NOT NULL,
    error        TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
