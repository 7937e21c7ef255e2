//! Failed-login throttling that slows guessing down without letting anyone lock an owner out.
//!
//! It follows OWASP's Authentication Cheat Sheet ("Protect against automated attacks"): rather
//! than a lockout that anyone who knows an account's email can trigger, failures add an
//! exponentially growing delay, and a client the account has signed in from before is not held
//! back by failures that came from elsewhere (the cheat sheet's "device cookies" idea, keyed here
//! by address). Three counters, each over a window of 15 minutes after the last failure:
//!
//! * **account and address**: 5 failures are free, then each further attempt from that address
//!   for that account must wait 1 s, 2 s, 4 s, … (at most 15 min) after the last failure. One
//!   client guessing one account is slowed down at once. (1 s is the base delay,
//!   `limits.login_delay_ms`.)
//! * **address**: 100 failures across any accounts refuse that address for the window (password
//!   spraying). It concerns that address only.
//! * **account**: 10 failures from anywhere, then attempts must wait 1 s, 2 s, 4 s, … after the
//!   last failure — except from an address that signed in to this account successfully in the
//!   last 30 days, which keeps only its own account-and-address counter. A distributed attacker
//!   is slowed down; the owner, from where they usually sign in, is not.
//!
//! Each attempt is counted as a failure before its password is checked (and taken back when it
//! turns out right), in the same transaction that judges it, so parallel guesses cannot all pass
//! a check before any of them counts.
//!
//! The counters live in the database (`store.logins()`, migration 0011), not in this process:
//! every process of one database counts the same failures, so N processes behind a load balancer
//! give a guesser no more attempts than one, and a restart forgets nothing. The store holds each
//! attempt's counters until its transaction ends (on one process or several, parallel attempts
//! are judged one after another); this module holds the rules. Counters whose window has passed
//! are deleted at most once a minute by each process ([`PRUNE_EVERY`]), so a flood of distinct
//! names leaves at most about one window and a minute of rows; trusted addresses come only from
//! successful sign-ins, at most 16 per account, and a sign-in drops its account's expired ones. Times are wall-clock milliseconds (the processes' clocks
//! are assumed to agree, as NTP keeps them; a counter's time never moves back).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::clock;
use crate::error::Result;
use crate::secret;
use crate::store::Store;
use crate::store::logins::{Failures, LoginCounts, LoginJudge, LoginWindows, SignIn};

const WINDOW: Duration = Duration::from_secs(15 * 60);
const PAIR_FREE: u32 = 5;
const ACCOUNT_FREE: u32 = 10;
const ADDRESS_MAX: u32 = 100;
const MAX_DELAY: Duration = Duration::from_secs(15 * 60);
const TRUST_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Addresses remembered per account as ones it signed in from.
const TRUSTED_PER_ACCOUNT: usize = 16;
/// How often a process deletes the counters whose window has passed.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Accounts longer than any email address are counted under their hash (a bounded key).
const ACCOUNT_KEY_MAX: usize = 254;

/// The base delay unless `limits.login_delay_ms` says otherwise.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);

/// `base` after the first failure past the free ones, doubling, at most [`MAX_DELAY`].
fn delay(base: Duration, beyond_free: u32) -> Duration {
    base.saturating_mul(1u32 << beyond_free.min(20))
        .min(MAX_DELAY)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

const WINDOWS: LoginWindows = LoginWindows {
    failures_ms: WINDOW.as_millis() as i64,
    trust_ms: TRUST_FOR.as_millis() as i64,
};

/// Seconds to wait, rounded up, at least 1.
fn secs(wait_ms: i64) -> u64 {
    (wait_ms.max(0) as u64).div_ceil(1000).max(1)
}

/// The rules above, applied to an attempt's counters at `now`: `Some(seconds to wait)` when one
/// of them holds it back.
fn judge(base: Duration, c: &LoginCounts, now: i64) -> Option<u64> {
    let wait_after = |f: Option<Failures>, free: u32| -> Option<i64> {
        let f = f.filter(|f| f.count >= free)?;
        let until = f.last_at.saturating_add(ms(delay(base, f.count - free)));
        (now < until).then(|| until - now)
    };
    if let Some(wait) = wait_after(c.account_address, PAIR_FREE) {
        return Some(secs(wait));
    }
    if let Some(f) = c.address.filter(|f| f.count >= ADDRESS_MAX) {
        return Some(secs(WINDOWS.failures_ms - (now - f.last_at)));
    }
    if !c.trusted
        && let Some(wait) = wait_after(c.account, ACCOUNT_FREE)
    {
        return Some(secs(wait));
    }
    None
}

/// An attempt that was counted; hand it back with [`LoginLimiter::succeeded`].
#[derive(Debug)]
pub struct Attempt(());

pub struct LoginLimiter {
    store: Store,
    /// The first delay past the free failures; each further one doubles it.
    base: Duration,
    /// When this process last deleted expired counters (ms).
    pruned_at: AtomicI64,
}

impl LoginLimiter {
    pub fn new(store: Store) -> LoginLimiter {
        LoginLimiter::with_base_delay(store, DEFAULT_BASE_DELAY)
    }

    /// A limiter whose first delay is `base` (then 2 × `base`, 4 × `base`, …).
    pub fn with_base_delay(store: Store, base: Duration) -> LoginLimiter {
        LoginLimiter {
            store,
            base: base.max(Duration::from_millis(1)),
            pruned_at: AtomicI64::new(0),
        }
    }

    fn sign_in(account: &str, address: &str, now: i64) -> SignIn {
        let account = if account.len() > ACCOUNT_KEY_MAX {
            format!("sha256:{}", secret::token_hash(account))
        } else {
            account.to_owned()
        };
        SignIn {
            account,
            address: address.to_owned(),
            now,
        }
    }

    /// Checks the three counters and, when none holds the attempt back, counts it as a failure
    /// at once. `Err(seconds to wait)` otherwise.
    pub async fn attempt(&self, account: &str, address: &str) -> Result<Result<Attempt, u64>> {
        self.attempt_at(account, address, clock::now_ms()).await
    }

    async fn attempt_at(
        &self,
        account: &str,
        address: &str,
        now: i64,
    ) -> Result<Result<Attempt, u64>> {
        let base = self.base;
        let rules: LoginJudge = std::sync::Arc::new(move |c| judge(base, c, now));
        let verdict = self
            .store
            .logins()
            .attempt(Self::sign_in(account, address, now), WINDOWS, rules)
            .await?;
        self.prune_if_due(now).await;
        Ok(match verdict {
            Some(wait) => Err(wait),
            None => Ok(Attempt(())),
        })
    }

    /// Deletes expired counters when this process has not for [`PRUNE_EVERY`].
    async fn prune_if_due(&self, now: i64) {
        let last = self.pruned_at.load(Ordering::Relaxed);
        if now - last < ms(PRUNE_EVERY)
            || self
                .pruned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Err(e) = self.store.logins().prune(now, WINDOWS).await {
            tracing::warn!("cannot delete expired sign-in counters: {e}");
        }
    }

    /// The password was right: the attempt was no failure, the address's own record for this
    /// account is cleared, and the address is one this account signs in from. (The account's
    /// count of failures from elsewhere stays: the owner signing in does not reset an attacker's
    /// delay.)
    pub async fn succeeded(&self, account: &str, address: &str, attempt: Attempt) -> Result<()> {
        self.succeeded_at(account, address, attempt, clock::now_ms())
            .await
    }

    async fn succeeded_at(
        &self,
        account: &str,
        address: &str,
        attempt: Attempt,
        now: i64,
    ) -> Result<()> {
        let _ = attempt;
        Ok(self
            .store
            .logins()
            .succeeded(
                Self::sign_in(account, address, now),
                WINDOWS,
                TRUSTED_PER_ACCOUNT,
            )
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::Bus;
    use crate::config::StoreConfig;

    const T0: i64 = 1_700_000_000_000;

    fn store(dir: &std::path::Path) -> Store {
        Store::open(
            &dir.join("store.db"),
            &StoreConfig::default(),
            Bus::new(16, 16),
        )
        .expect("open store")
    }

    async fn ok(l: &LoginLimiter, account: &str, address: &str, now: i64) -> bool {
        l.attempt_at(account, address, now).await.unwrap().is_ok()
    }

    #[tokio::test]
    async fn one_address_is_slowed_after_five_failures() {
        let dir = tempfile::tempdir().unwrap();
        let l = LoginLimiter::new(store(dir.path()));
        for _ in 0..PAIR_FREE {
            assert!(ok(&l, "a", "1", T0).await);
        }
        assert_eq!(l.attempt_at("a", "1", T0).await.unwrap().unwrap_err(), 1);
        // Another address may still try: the account has only 5 failures.
        assert!(ok(&l, "a", "2", T0).await);
        // The delay runs from the last failure and doubles with each further one.
        assert!(ok(&l, "a", "1", T0 + 1_000).await);
        assert_eq!(
            l.attempt_at("a", "1", T0 + 1_000)
                .await
                .unwrap()
                .unwrap_err(),
            2
        );
    }

    #[tokio::test]
    async fn the_account_delay_spares_an_address_it_signed_in_from() {
        let dir = tempfile::tempdir().unwrap();
        let l = LoginLimiter::new(store(dir.path()));
        let ok_home = l.attempt_at("a", "home", T0).await.unwrap().unwrap();
        l.succeeded_at("a", "home", ok_home, T0).await.unwrap();
        for i in 0..ACCOUNT_FREE {
            assert!(ok(&l, "a", &format!("attacker{i}"), T0).await);
        }
        assert!(!ok(&l, "a", "elsewhere", T0).await);
        assert!(ok(&l, "a", "home", T0).await);
    }

    #[test]
    fn delays_double_and_are_capped() {
        let base = DEFAULT_BASE_DELAY;
        assert_eq!(delay(base, 0), Duration::from_secs(1));
        assert_eq!(delay(base, 3), Duration::from_secs(8));
        assert_eq!(delay(base, 40), MAX_DELAY);
        assert_eq!(delay(Duration::from_secs(60), 1), Duration::from_secs(120));
    }

    #[tokio::test]
    async fn spraying_from_one_address_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let l = LoginLimiter::new(store(dir.path()));
        for i in 0..ADDRESS_MAX {
            assert!(ok(&l, &format!("u{i}"), "x", T0).await);
        }
        assert!(!ok(&l, "fresh", "x", T0).await);
        assert!(ok(&l, "fresh", "y", T0).await);
        // For the window after the last failure, then it is forgotten.
        assert!(!ok(&l, "fresh", "x", T0 + ms(WINDOW) - 1).await);
        assert!(ok(&l, "fresh", "x", T0 + ms(WINDOW)).await);
    }

    /// Two limiters over one database (two processes, or one before and after a restart) count
    /// the same failures, and parallel attempts through both stay within the free ones.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn limiters_of_one_database_share_their_counts() {
        let dir = tempfile::tempdir().unwrap();
        let db = store(dir.path());
        let (a, b) = (
            std::sync::Arc::new(LoginLimiter::new(db.clone())),
            std::sync::Arc::new(LoginLimiter::new(db)),
        );
        let mut set = tokio::task::JoinSet::new();
        for i in 0..30 {
            let l = if i % 2 == 0 { a.clone() } else { b.clone() };
            set.spawn(async move { l.attempt_at("a", "1", T0).await.unwrap().is_ok() });
        }
        let mut passed = 0;
        while let Some(r) = set.join_next().await {
            passed += usize::from(r.unwrap());
        }
        assert_eq!(passed, PAIR_FREE as usize);
        assert!(!ok(&a, "a", "1", T0).await);
        assert!(!ok(&b, "a", "1", T0).await);
    }

    #[tokio::test]
    async fn an_overlong_account_is_counted_under_a_bounded_key() {
        let dir = tempfile::tempdir().unwrap();
        let l = LoginLimiter::new(store(dir.path()));
        let long = "x".repeat(10_000);
        for _ in 0..PAIR_FREE {
            assert!(ok(&l, &long, "1", T0).await);
        }
        assert!(!ok(&l, &long, "1", T0).await);
        assert!(LoginLimiter::sign_in(&long, "1", T0).account.len() < 100);
    }
}
