-- A search's last word is a prefix (`"deplo"*`). Without a prefix index FTS5 answers a prefix
-- term by merging, in full, the doclists of every term that starts with it, whatever rows the
-- query asks for; so a page of a common word's matches cost all of its matches. With an index of
-- the prefixes of 1 to 12 characters, such a term is one doclist that FTS5 seeks by rowid like a
-- plain word, and a search can ask for the matches within a range of sessions only
-- (`reads::list_sessions`). Longer prefixes are still merged.
--
-- FTS5 options cannot be altered: both indexes are built anew from their own stored text, with
-- the same rowids, and take the old names.
CREATE VIRTUAL TABLE session_search_new USING fts5 (
    title, tokenize = 'unicode61 remove_diacritics 2', prefix = '1 2 3 4 5 6 7 8 9 10 11 12'
);
INSERT INTO session_search_new (rowid, title) SELECT rowid, title FROM session_search;
DROP TABLE session_search;
ALTER TABLE session_search_new RENAME TO session_search;

CREATE VIRTUAL TABLE session_search_prompts_new USING fts5 (
    prompts, tokenize = 'unicode61 remove_diacritics 2', prefix = '1 2 3 4 5 6 7 8 9 10 11 12'
);
INSERT INTO session_search_prompts_new (rowid, prompts)
SELECT rowid, prompts FROM session_search_prompts;
DROP TABLE session_search_prompts;
ALTER TABLE session_search_prompts_new RENAME TO session_search_prompts;
