-- Prompts recorded but not yet in the search index (`session_search_prompts`): the writer moves
-- them into the index many turns at a time, and before any search (`prompt_backlog.rs`). Rows are
-- written in the transaction that records the prompt's event, so a crash loses none; a session's
-- rows go with the session.
CREATE TABLE prompt_backlog (
    session_pk  INTEGER NOT NULL,
    seq         INTEGER NOT NULL,
    prompt      TEXT NOT NULL,
    PRIMARY KEY (session_pk, seq)
) WITHOUT ROWID;
