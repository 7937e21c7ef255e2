-- SQLite's twin of this version gives its full-text indexes a prefix index (0013 in
-- `migrations/`). A `tsvector` GIN index already answers a prefix `tsquery` (`'w':*`) by
-- scanning the posting lists of the words with that prefix, and the PostgreSQL arm keeps its
-- search plans, so its schema only records the decision.
COMMENT ON TABLE session_search IS
    'Titles by session_pk for search; prefix tsqueries use the GIN index on document.';
