-- PostgreSQL twin of migrations/0010_prompt_search.sql (types as in 0001_init.sql).

-- Prompts are searched in rows of their own, a few consecutive prompts each. A session's prompts
-- used to be one growing document (`session_search.prompts`), whose tsvector was recomputed over
-- all of them on every new prompt; now a prompt joins the session's latest row while that stays
-- small and starts a new row otherwise. A row is keyed by its first prompt's place in the timeline
-- (the session and the seq of that `prompt_submitted` event) and leaves with its session. Search
-- matches a session when its title (`session_search`) or one of its prompt rows holds every word.
CREATE TABLE session_search_prompts (
    session_pk  BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    prompts     TEXT NOT NULL,
    document    tsvector NOT NULL GENERATED ALWAYS AS (
        to_tsvector('session_search'::regconfig, prompts)
    ) STORED,
    PRIMARY KEY (session_pk, seq)
);
CREATE INDEX session_search_prompts_document ON session_search_prompts USING gin (document);

-- Every prompt stored so far, from its event (exactly what was indexed when it was sent), in a
-- row of its own; prompts sent from now on join the latest row.
INSERT INTO session_search_prompts (session_pk, seq, prompts)
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
