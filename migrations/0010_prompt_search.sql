-- Prompts are searched one row per prompt. A session's prompts used to be one growing document
-- (`session_search.prompts`), so every new prompt re-tokenized all the prompts before it; now a
-- prompt is indexed once, when it is sent, and costs the same as the session's first.
--
-- The row's key is the prompt's place in the timeline: rowid = session_pk * 2^32 + seq of its
-- `prompt_submitted` event. A match names its session without a join (rowid >> 32), and a
-- session's rows are one rowid range, removed with the session. Search matches a session when
-- its title (`session_search`, rowid = sessions.pk) or any one of its prompts holds the words.
CREATE VIRTUAL TABLE session_search_prompts USING fts5 (prompt, tokenize = 'unicode61 remove_diacritics 2');

-- Every prompt stored so far, from its event: exactly what was indexed when it was sent.
INSERT INTO session_search_prompts (rowid, prompt)
SELECT session_pk * 4294967296 + seq, json_extract(body, '$.prompt')
FROM events
WHERE type = 'prompt_submitted' AND json_extract(body, '$.prompt') IS NOT NULL;

-- The title index keeps its rowid (the session's pk) and loses the prompts document.
DROP TABLE session_search;
CREATE VIRTUAL TABLE session_search USING fts5 (title, tokenize = 'unicode61 remove_diacritics 2');
INSERT INTO session_search (rowid, title) SELECT pk, title FROM sessions;
