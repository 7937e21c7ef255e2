-- PostgreSQL twin of migrations/0008_message_revisions.sql (types as in 0001_init.sql).

-- Task messages revised through the agent platform API. A message is the event its id names;
-- every revision is a later event of the same session (the timeline stays append-only), and
-- this row says which message it revises and the message's streaming status from then on. A
-- message opened as IN_PROGRESS has a row naming itself. Reads show each message with the
-- content of its latest revision; revision events are not messages of their own.
CREATE TABLE agentex_message_revisions (
    session_pk    BIGINT NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    revision_seq  BIGINT NOT NULL,
    message_seq   BIGINT NOT NULL,
    in_progress   BIGINT NOT NULL,
    PRIMARY KEY (session_pk, revision_seq)
);

CREATE INDEX agentex_message_revisions_message
    ON agentex_message_revisions (session_pk, message_seq, revision_seq);
