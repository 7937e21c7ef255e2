-- The id of the HTTP request that stored an input (`X-Request-Id`), so the turn that runs it, its
-- logs and its engine calls carry the same id. Empty for the runner's own inputs.
ALTER TABLE pending_inputs ADD COLUMN request_id TEXT;
