-- Task messages revised through the agent platform API. A message is the event its id names;
-- every revision is a later event of the same session (the timeline stays append-only), and
-- this row says which message it revises and the message's streaming status from then on. A
-- message opened as IN_PROGRESS has a row naming itself. Reads show each message with the
-- content of its latest revision; revision events are not messages of their own.
CREATE TABLE agentex_message_revisions (
    session_pk    INTEGER NOT NULL REFERENCES sessions(pk) ON DELETE CASCADE,
    revision_seq  INTEGER NOT NULL,
    message_seq   INTEGER NOT NULL,
    in_progress   INTEGER NOT NULL,
    PRIMARY KEY (session_pk, revision_seq)
) WITHOUT ROWID;

CREATE INDEX agentex_message_revisions_message
    ON agentex_message_revisions (session_pk, message_seq, revision_seq);
