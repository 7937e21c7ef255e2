-- Prompts are searched in rows of their own, a few consecutive prompts each. A session's prompts
-- used to be one growing document (`session_search.prompts`), so every new prompt re-tokenized all
-- the prompts before it; now a prompt joins the session's latest row while that stays small (about
-- 2 KiB, `writes::PROMPT_ROW_BYTES`) and starts a new row otherwise, so it costs the same at the
-- session's 100,000th prompt as at its first.
--
-- A row's key is its first prompt's place in the timeline: rowid = session_pk * 2^32 + seq of
-- that `prompt_submitted` event. A match names its session without a join (rowid >> 32), and a
-- session's rows are one rowid range, removed with the session. Search matches a session when its
-- title (`session_search`, rowid = sessions.pk) or one of its prompt rows holds every word.
CREATE VIRTUAL TABLE session_search_prompts USING fts5 (prompts, tokenize = 'unicode61 remove_diacritics 2');

-- Every prompt stored so far, from its event (exactly what was indexed when it was sent), in a
-- row of its own; prompts sent from now on join the latest row.
INSERT INTO session_search_prompts (rowid, prompts)
SELECT session_pk * 4294967296 + seq, json_extract(body, '$.prompt')
FROM events
WHERE type = 'prompt_submitted' AND json_extract(body, '$.prompt') IS NOT NULL;

-- The title index keeps its rowid (the session's pk) and loses the prompts document.
DROP TABLE session_search;
CREATE VIRTUAL TABLE session_search USING fts5 (title, tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO session_search (rowid, title) SELECT pk, title FROM sessions;
