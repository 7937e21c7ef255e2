//! Sign-in state that every process of one database sees alike (migration 0011): the failed
//! sign-in counters and the addresses each account signs in from (`auth::limiter` holds the rules
//! that judge them), the one-time setup tokens, and ending a person's browser sessions.
//!
//! **Why nothing here deadlocks or double-counts with concurrent writers.** An attempt holds its
//! three counters before it reads them, with an upsert (made at zero when missing) that a
//! backend with concurrent writers keeps locked until COMMIT; SQLite's one writer thread runs
//! each unit alone anyway. Every attempt holds them in the same order ([`Counter::ALL`]), one row
//! of each kind, so two attempts never wait for each other in a circle, and parallel guesses —
//! on one process or several — are judged one after another, each seeing the failures counted
//! before it. Expired counters are deleted by [`LoginStore::prune`], a unit of its own with one
//! statement per kind in the same order: whoever it waits for waits only for rows of that kind or
//! later ones, so no circle of waits can include an attempt (two prunes of two processes could
//! still wait for each other; PostgreSQL then fails one, and the next prune deletes what it
//! left). The setup token's unit removes every token before it creates the owner, so two
//! setups with different tokens (on two processes) queue on the same rows and exactly one
//! creates the owner.

use super::sql::{OptionalExtension, params};

use super::{Store, Tx};
use crate::error::{Error, Result};

/// One of the three failure counters an attempt is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counter {
    AccountAddress,
    Address,
    Account,
}

impl Counter {
    /// The order every unit holds counters in.
    const ALL: [Counter; 3] = [Counter::AccountAddress, Counter::Address, Counter::Account];

    fn kind(self) -> &'static str {
        match self {
            Counter::AccountAddress => "account_address",
            Counter::Address => "address",
            Counter::Account => "account",
        }
    }

    /// `(account, address)` as this counter's row names them ('' for the part it does not use).
    fn key(self, who: &SignIn) -> (&str, &str) {
        match self {
            Counter::AccountAddress => (&who.account, &who.address),
            Counter::Address => ("", &who.address),
            Counter::Account => (&who.account, ""),
        }
    }
}

/// A counter's failures within the window and when the last one was (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    pub count: u32,
    pub last_at: i64,
}

/// What an attempt is judged on: each counter's failures within the window (`None`: none), and
/// whether the address signed in to the account successfully within the trust period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoginCounts {
    pub account_address: Option<Failures>,
    pub address: Option<Failures>,
    pub account: Option<Failures>,
    pub trusted: bool,
}

/// A sign-in attempt: the account as typed (normalised), the client's address, and the time.
#[derive(Debug, Clone)]
pub struct SignIn {
    pub account: String,
    pub address: String,
    pub now: i64,
}

/// How long failures count and how long a successful sign-in trusts its address (ms).
#[derive(Debug, Clone, Copy)]
pub struct LoginWindows {
    pub failures_ms: i64,
    pub trust_ms: i64,
}

/// The limiter's verdict on an attempt's counts: `Some(seconds to wait)` holds it back and counts
/// nothing; `None` lets it through, counted as a failure in the same transaction.
/// Shared, so that a unit of work run again (PostgreSQL, after a lost lock race) judges again.
pub type LoginJudge = std::sync::Arc<dyn Fn(&LoginCounts) -> Option<u64> + Send + Sync>;

impl Tx<'_> {
    /// Holds a counter's row for the rest of the transaction (made at zero when missing) and
    /// reads it.
    fn hold_counter(&mut self, c: Counter, who: &SignIn) -> Result<Failures> {
        let (account, address) = c.key(who);
        let (count, last_at): (i64, i64) = self
            .conn
            .prepare_cached(
                "INSERT INTO login_failures (kind, account, address, failures, last_at)
                 VALUES (?1, ?2, ?3, 0, ?4)
                 ON CONFLICT (kind, account, address)
                 DO UPDATE SET failures = login_failures.failures
                 RETURNING failures, last_at",
            )?
            .query_row(params![c.kind(), account, address, who.now], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        Ok(Failures {
            count: u32::try_from(count).unwrap_or(u32::MAX),
            last_at,
        })
    }

    /// Counts one more failure on a held counter (starting again at one when its last failure is
    /// older than `cutoff`); its time never moves back, whichever process's clock wrote it.
    fn count_failure(&mut self, c: Counter, who: &SignIn, cutoff: i64) -> Result<()> {
        let (account, address) = c.key(who);
        self.conn
            .prepare_cached(
                "UPDATE login_failures
                 SET failures = CASE WHEN last_at <= ?4 THEN 1 ELSE failures + 1 END,
                     last_at = CASE WHEN last_at > ?5 THEN last_at ELSE ?5 END
                 WHERE kind = ?1 AND account = ?2 AND address = ?3",
            )?
            .execute(params![c.kind(), account, address, cutoff, who.now])?;
        Ok(())
    }

    /// Takes one failure back (the attempt turned out right); a counter at zero is deleted.
    fn take_back_failure(&mut self, c: Counter, who: &SignIn) -> Result<()> {
        let (account, address) = c.key(who);
        self.conn
            .prepare_cached(
                "UPDATE login_failures SET failures = failures - 1
                 WHERE kind = ?1 AND account = ?2 AND address = ?3 AND failures > 0",
            )?
            .execute(params![c.kind(), account, address])?;
        self.conn
            .prepare_cached(
                "DELETE FROM login_failures
                 WHERE kind = ?1 AND account = ?2 AND address = ?3 AND failures <= 0",
            )?
            .execute(params![c.kind(), account, address])?;
        Ok(())
    }

    fn trusted_since(&self, who: &SignIn, since: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM login_trust WHERE account = ?1 AND address = ?2 AND at > ?3",
            )?
            .query_row(params![who.account, who.address, since], |_| Ok(()))
            .optional()?
            .is_some())
    }
}

/// Failed sign-ins, trusted addresses, setup tokens and browser sign-out, shared by every process
/// of the database.
#[derive(Clone, Copy)]
pub struct LoginStore<'a> {
    store: &'a Store,
}

impl Store {
    /// Sign-in state every process shares: failure counters, trusted addresses, setup tokens.
    pub fn logins(&self) -> LoginStore<'_> {
        LoginStore { store: self }
    }
}

impl LoginStore<'_> {
    /// Judges an attempt on its counters and, when `judge` lets it through, counts it as a
    /// failure at once, in one transaction: `Some(seconds)` when it is held back.
    pub async fn attempt(
        &self,
        who: SignIn,
        windows: LoginWindows,
        judge: LoginJudge,
    ) -> Result<Option<u64>> {
        self.store
            .write(move |tx| {
                let cutoff = who.now - windows.failures_ms;
                let live = |f: Failures| (f.count > 0 && f.last_at > cutoff).then_some(f);
                let mut held = [None; 3];
                for (slot, c) in held.iter_mut().zip(Counter::ALL) {
                    *slot = live(tx.hold_counter(c, &who)?);
                }
                let counts = LoginCounts {
                    account_address: held[0],
                    address: held[1],
                    account: held[2],
                    trusted: tx.trusted_since(&who, who.now - windows.trust_ms)?,
                };
                if let Some(wait) = judge(&counts) {
                    return Ok(Some(wait));
                }
                for c in Counter::ALL {
                    tx.count_failure(c, &who, cutoff)?;
                }
                Ok(None)
            })
            .await
    }

    /// The attempt was right: it was no failure (the address's own counter for the account is
    /// cleared, one failure is taken back from the other two), and the address is one the account
    /// signs in from, among its `keep` most recent; the account's addresses older than the trust
    /// period go. (Only a sign-in touches an account's trusted addresses, after it holds the
    /// account's counter, so no two units ever wait for each other over them.)
    pub async fn succeeded(&self, who: SignIn, windows: LoginWindows, keep: usize) -> Result<()> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.store
            .write(move |tx| {
                let (account, address) = Counter::AccountAddress.key(&who);
                tx.conn
                    .prepare_cached(
                        "DELETE FROM login_failures WHERE kind = ?1 AND account = ?2 AND address = ?3",
                    )?
                    .execute(params![Counter::AccountAddress.kind(), account, address])?;
                tx.take_back_failure(Counter::Address, &who)?;
                tx.take_back_failure(Counter::Account, &who)?;
                tx.conn
                    .prepare_cached(
                        "INSERT INTO login_trust (account, address, at) VALUES (?1, ?2, ?3)
                         ON CONFLICT (account, address) DO UPDATE SET at = excluded.at",
                    )?
                    .execute(params![who.account, who.address, who.now])?;
                tx.conn
                    .prepare_cached(
                        "DELETE FROM login_trust WHERE account = ?1 AND (at <= ?3 OR address NOT IN (
                             SELECT address FROM login_trust WHERE account = ?1
                             ORDER BY at DESC, address LIMIT ?2))",
                    )?
                    .execute(params![who.account, keep, who.now - windows.trust_ms])?;
                Ok(())
            })
            .await
    }

    /// Deletes the failure counters whose last failure is `failures_ms` or more before `now`;
    /// returns how many went. One statement per kind, in the order attempts hold them.
    pub async fn prune(&self, now: i64, windows: LoginWindows) -> Result<usize> {
        self.store
            .write(move |tx| {
                let mut gone = 0;
                for c in Counter::ALL {
                    gone += tx
                        .conn
                        .prepare_cached(
                            "DELETE FROM login_failures WHERE kind = ?1 AND last_at <= ?2",
                        )?
                        .execute(params![c.kind(), now - windows.failures_ms])?;
                }
                Ok(gone)
            })
            .await
    }

    /// Records a new setup token while the database has no user, keeping the `keep` newest
    /// (`false`, and no token kept, once a user exists: setup is over).
    pub fn add_setup_token_blocking(&self, token_hash: &str, keep: usize) -> Result<bool> {
        let hash = token_hash.to_owned();
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.store.write_blocking(move |tx| {
            if super::identity::user_count(tx.conn)? > 0 {
                tx.conn.execute("DELETE FROM setup_tokens", [])?;
                return Ok(false);
            }
            // One row per statement: concurrent starts never hold rows in a circle.
            let kept: i64 =
                tx.conn
                    .query_row("SELECT count(*) FROM setup_tokens", [], |r| r.get(0))?;
            if kept >= keep {
                tx.conn.execute(
                    "DELETE FROM setup_tokens WHERE token_hash = (
                         SELECT token_hash FROM setup_tokens ORDER BY created_at, token_hash LIMIT 1)",
                    [],
                )?;
            }
            tx.conn.execute(
                "INSERT INTO setup_tokens (token_hash, created_at) VALUES (?1, ?2)",
                params![hash, tx.now],
            )?;
            Ok(true)
        })
    }

    /// Whether `token_hash` is a setup token that can still be used.
    pub async fn setup_token_known(&self, token_hash: &str) -> Result<bool> {
        let hash = token_hash.to_owned();
        self.store
            .read(move |c| {
                Ok(
                    c.prepare_cached("SELECT 1 FROM setup_tokens WHERE token_hash = ?1")?
                        .query_row([&hash], |_| Ok(()))
                        .optional()?
                        .is_some(),
                )
            })
            .await
    }

    /// Whether first-run setup is open: no user yet, and a setup token to create one with.
    pub async fn setup_open(&self) -> Result<bool> {
        self.store
            .read(|c| {
                let n: i64 = c.query_row(
                    "SELECT count(*) FROM setup_tokens WHERE NOT EXISTS (SELECT 1 FROM users)",
                    [],
                    |r| r.get(0),
                )?;
                Ok(n > 0)
            })
            .await
    }

    /// Creates the first owner of the default workspace with setup token `token_hash`, using up
    /// every setup token: `None` (nothing written) when the token is not one. 403 when a user
    /// exists already, or when another setup used the tokens meanwhile.
    pub async fn complete_setup(
        &self,
        token_hash: &str,
        email: &str,
        password_hash: &str,
    ) -> Result<Option<String>> {
        let (hash, email, phc) = (
            token_hash.to_owned(),
            email.to_owned(),
            password_hash.to_owned(),
        );
        self.store
            .write(move |tx| {
                let known = tx
                    .conn
                    .prepare_cached("SELECT 1 FROM setup_tokens WHERE token_hash = ?1")?
                    .query_row([&hash], |_| Ok(()))
                    .optional()?;
                if known.is_none() {
                    return Ok(None);
                }
                let taken: Vec<String> = {
                    let mut stmt = tx
                        .conn
                        .prepare_cached("DELETE FROM setup_tokens RETURNING token_hash")?;
                    stmt.query_map([], |r| r.get(0))?
                        .collect::<super::sql::Result<_>>()?
                };
                if !taken.contains(&hash) {
                    // Another setup took the tokens between the read and the delete: the unit
                    // fails, so that nothing it did stays.
                    return Err(Error::Forbidden(
                        "this setup link was used meanwhile".into(),
                    ));
                }
                if super::identity::user_count(tx.conn)? > 0 {
                    return Err(Error::Forbidden("an owner already exists".into()));
                }
                let ws = tx.ensure_workspace(super::DEFAULT_WORKSPACE, "Default")?;
                let id = tx.insert_user(&email, &phc)?;
                tx.add_membership(&id, &ws, super::identity::Role::Owner.name())?;
                Ok(Some(id))
            })
            .await
    }

    /// Ends every browser session of a user; returns how many there were.
    pub fn sign_out_user_blocking(&self, user_id: &str) -> Result<usize> {
        let user = user_id.to_owned();
        self.store.write_blocking(move |tx| {
            Ok(tx
                .conn
                .execute("DELETE FROM browser_sessions WHERE user_id = ?1", [&user])?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreConfig;
    use crate::sink::recorder::Recorder;

    const WINDOWS: LoginWindows = LoginWindows {
        failures_ms: 15 * 60_000,
        trust_ms: 30 * 86_400_000,
    };

    fn open(dir: &std::path::Path) -> Store {
        Store::open(
            &dir.join("store.db"),
            &StoreConfig::default(),
            Recorder::new(),
        )
        .expect("open store")
    }

    fn who(account: &str, address: &str, now: i64) -> SignIn {
        SignIn {
            account: account.into(),
            address: address.into(),
            now,
        }
    }

    /// Counts the attempt and returns what it was judged on.
    async fn seen(store: &Store, w: SignIn) -> LoginCounts {
        let (tx, rx) = std::sync::mpsc::channel();
        let judge: LoginJudge = std::sync::Arc::new(move |c| {
            let _ = tx.send(*c);
            None
        });
        assert_eq!(
            store.logins().attempt(w, WINDOWS, judge).await.unwrap(),
            None
        );
        rx.recv().unwrap()
    }

    fn rows(store: &Store, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        store
            .read_blocking(|c| Ok(c.query_row(&sql, [], |r| r.get(0))?))
            .unwrap()
    }

    #[tokio::test]
    async fn counters_count_expire_and_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let t0 = 1_000_000_000_000;
        assert_eq!(
            seen(&store, who("a", "1", t0)).await,
            LoginCounts::default()
        );
        let second = seen(&store, who("a", "2", t0 + 5)).await;
        assert_eq!(second.account_address, None);
        assert_eq!(second.address, None);
        assert_eq!(
            second.account,
            Some(Failures {
                count: 1,
                last_at: t0
            })
        );
        // A refused attempt counts nothing.
        let refused: LoginJudge = std::sync::Arc::new(|_| Some(7));
        let r = store
            .logins()
            .attempt(who("a", "1", t0 + 6), WINDOWS, refused)
            .await
            .unwrap();
        assert_eq!(r, Some(7));
        let third = seen(&store, who("a", "1", t0 + 7)).await;
        assert_eq!(third.account.map(|f| f.count), Some(2));
        assert_eq!(third.account_address.map(|f| f.count), Some(1));
        // Past the window the counters count as none and start again.
        let later = t0 + WINDOWS.failures_ms + 8;
        let fresh = seen(&store, who("a", "1", later)).await;
        assert_eq!(fresh.account, None);
        assert_eq!(fresh.account_address, None);
        // Distinct names leave one row each per kind, until the prune after their window.
        for i in 0..50 {
            seen(&store, who(&format!("n{i}"), &format!("x{i}"), later)).await;
        }
        // a/1, a/2, and 50 names with their addresses: 3 + 1 + 1 + 3 × 50 rows.
        assert_eq!(rows(&store, "login_failures"), 155);
        let gone = store
            .logins()
            .prune(later + WINDOWS.failures_ms, WINDOWS)
            .await
            .unwrap();
        assert_eq!(gone, 155);
        assert_eq!(rows(&store, "login_failures"), 0);
    }

    #[tokio::test]
    async fn success_takes_the_failure_back_and_trusts_the_address() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let t0 = 1_000_000_000_000;
        seen(&store, who("a", "elsewhere", t0)).await;
        seen(&store, who("a", "home", t0 + 1)).await;
        store
            .logins()
            .succeeded(who("a", "home", t0 + 2), WINDOWS, 2)
            .await
            .unwrap();
        let c = seen(&store, who("a", "home", t0 + 3)).await;
        assert!(c.trusted);
        assert_eq!(
            c.account_address, None,
            "the address's own record is cleared"
        );
        assert_eq!(
            c.account.map(|f| f.count),
            Some(1),
            "elsewhere's failure stays"
        );
        assert_eq!(c.address, None);
        // At most `keep` addresses per account: the oldest goes.
        for (i, addr) in ["b", "c"].into_iter().enumerate() {
            store
                .logins()
                .succeeded(who("a", addr, t0 + 10 + i as i64), WINDOWS, 2)
                .await
                .unwrap();
        }
        assert!(!seen(&store, who("a", "home", t0 + 20)).await.trusted);
        assert!(seen(&store, who("a", "c", t0 + 21)).await.trusted);
        // Trust lapses after its period, and the account's next sign-in drops what lapsed.
        let late = t0 + 12 + WINDOWS.trust_ms;
        assert!(!seen(&store, who("a", "c", late)).await.trusted);
        assert_eq!(rows(&store, "login_trust"), 2);
        store
            .logins()
            .succeeded(who("a", "z", late), WINDOWS, 2)
            .await
            .unwrap();
        assert_eq!(rows(&store, "login_trust"), 1);
    }

    #[test]
    fn a_setup_token_makes_one_owner_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store
            .directory()
            .ensure_workspace_blocking(super::super::DEFAULT_WORKSPACE, "Default")
            .unwrap();
        let logins = store.logins();
        for t in ["t1", "t2", "t3"] {
            assert!(logins.add_setup_token_blocking(t, 2).unwrap());
        }
        assert_eq!(rows(&store, "setup_tokens"), 2, "only the newest are kept");
        rt.block_on(async {
            assert!(!logins.setup_token_known("t1").await.unwrap());
            assert!(logins.setup_token_known("t2").await.unwrap());
            assert!(logins.setup_open().await.unwrap());
            assert_eq!(
                logins
                    .complete_setup("nope", "a@x.test", "phc")
                    .await
                    .unwrap(),
                None
            );
            assert!(
                logins.setup_open().await.unwrap(),
                "a wrong token uses up nothing"
            );
            let id = logins
                .complete_setup("t2", "a@x.test", "phc")
                .await
                .unwrap();
            assert!(id.is_some());
            assert!(!logins.setup_open().await.unwrap());
            assert_eq!(
                logins
                    .complete_setup("t3", "b@x.test", "phc")
                    .await
                    .unwrap(),
                None,
                "every token is used up"
            );
        });
        assert_eq!(rows(&store, "setup_tokens"), 0);
        assert!(!logins.add_setup_token_blocking("t4", 2).unwrap());
        assert_eq!(
            rows(&store, "setup_tokens"),
            0,
            "no token once a user exists"
        );
    }
}
