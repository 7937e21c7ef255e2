-- PostgreSQL twin of migrations/0010_prompt_search.sql (types as in 0001_init.sql).

-- Prompts are searched one row per prompt. A session's prompts used to be one growing document
-- (`session_search.prompts`), whose tsvector was recomputed over all of them on every new prompt;
-- now a prompt is indexed once, when it is sent. The row is keyed by the prompt's place in the
-- timeline (the session and the seq of its `prompt_submitted` event) and leaves with its session.
-- Search matches a session when its title (`session_search`) or any one of its prompts holds the
-- words.
CREATE TABLE session_search_prompts (
    session_pk  BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    prompt      TEXT NOT NULL,
    document    tsvector NOT NULL GENERATED ALWAYS AS (
        to_tsvector('session_search'::regconfig, prompt)
    ) STORED,
    PRIMARY KEY (session_pk, seq)
);
CREATE INDEX session_search_prompts_document ON session_search_prompts USING gin (document);

-- Every prompt stored so far, from its event: exactly what was indexed when it was sent.
INSERT INTO session_search_prompts (session_pk, seq, prompt)
SELECT session_pk, seq, body::jsonb ->> 'prompt'
FROM events
WHERE type = 'prompt_submitted' AND body::jsonb ->> 'prompt' IS NOT NULL;

-- The title document loses the prompts (its tsvector is recomputed from the title alone).
ALTER TABLE session_search DROP COLUMN document;
ALTER TABLE session_search DROP COLUMN prompts;
ALTER TABLE session_search ADD COLUMN document tsvector NOT NULL GENERATED ALWAYS AS (
    to_tsvector('session_search'::regconfig, title)
) STORED;
CREATE INDEX session_search_document ON session_search USING gin (document);
