-- Sign-in state that every sessiond process of one database must see alike, kept here rather than
-- in one process's memory: the failed sign-in counters and the addresses each account signs in
-- from (the rules are `auth::limiter`'s), and the one-time setup tokens.

-- Failed sign-ins, one counter per account and address ('account_address'), per address
-- ('address') and per account ('account'); the part a kind does not use is ''. `last_at` is the
-- time of the last failure (ms). A counter whose last failure is older than the limiter's window
-- counts as none, and is deleted by the prune that follows sign-in attempts, so the table holds
-- about one window of failures.
CREATE TABLE login_failures (
    kind      TEXT NOT NULL,
    account   TEXT NOT NULL,
    address   TEXT NOT NULL,
    failures  INTEGER NOT NULL,
    last_at   INTEGER NOT NULL,
    PRIMARY KEY (kind, account, address)
) WITHOUT ROWID;

CREATE INDEX login_failures_by_last ON login_failures (last_at);

-- Addresses an account signed in from successfully, with when (at most 16 per account, each for
-- 30 days): failures from elsewhere do not slow the owner down from these.
CREATE TABLE login_trust (
    account  TEXT NOT NULL,
    address  TEXT NOT NULL,
    at       INTEGER NOT NULL,
    PRIMARY KEY (account, address)
) WITHOUT ROWID;

-- One-time setup tokens, by their SHA-256 only, while the database has no user. Every start adds
-- one (and prints it), so a link printed before a restart, or by another process, stays valid;
-- the first owner is created with any of them exactly once, which removes them all.
CREATE TABLE setup_tokens (
    token_hash  TEXT PRIMARY KEY,
    created_at  INTEGER NOT NULL
);
