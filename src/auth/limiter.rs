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
//! turns out right), under one lock, so parallel guesses cannot all pass a check before any of
//! them counts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_secs(15 * 60);
const PAIR_FREE: u32 = 5;
const ACCOUNT_FREE: u32 = 10;
const ADDRESS_MAX: u32 = 100;
const MAX_DELAY: Duration = Duration::from_secs(15 * 60);
const TRUST_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Addresses remembered per account as ones it signed in from.
const TRUSTED_PER_ACCOUNT: usize = 16;
/// Entries kept in each map; past this the oldest state is dropped wholesale (a flood of distinct
/// names must not grow memory without bound).
const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

/// The base delay unless `limits.login_delay_ms` says otherwise.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_secs(1);

/// `base` after the first failure past the free ones, doubling, at most [`MAX_DELAY`].
fn delay(base: Duration, beyond_free: u32) -> Duration {
    base.saturating_mul(1u32 << beyond_free.min(20))
        .min(MAX_DELAY)
}

#[derive(Default)]
struct State {
    pairs: HashMap<(String, String), Failures>,
    accounts: HashMap<String, Failures>,
    addresses: HashMap<String, Failures>,
    /// Account → addresses it signed in from, with when.
    trusted: HashMap<String, Vec<(String, Instant)>>,
}

/// An attempt that was counted; hand it back with [`LoginLimiter::succeeded`].
#[derive(Debug)]
pub struct Attempt(());

pub struct LoginLimiter {
    state: Mutex<State>,
    /// The first delay past the free failures; each further one doubles it.
    base: Duration,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter::with_base_delay(DEFAULT_BASE_DELAY)
    }
}

/// Seconds to wait, rounded up, at least 1.
fn secs(d: Duration) -> u64 {
    d.as_millis().div_ceil(1000).max(1) as u64
}

fn live(f: Option<&Failures>, now: Instant) -> Option<Failures> {
    f.copied().filter(|f| now.duration_since(f.last) < WINDOW)
}

fn bump<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Failures>, key: K, now: Instant) {
    if map.len() >= MAX_ENTRIES {
        map.retain(|_, f| now.duration_since(f.last) < WINDOW);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
    }
    let f = map.entry(key).or_insert(Failures {
        count: 0,
        last: now,
    });
    if now.duration_since(f.last) >= WINDOW {
        f.count = 0;
    }
    f.count += 1;
    f.last = now;
}

fn take_back<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Failures>, key: &K) {
    if let Some(f) = map.get_mut(key) {
        f.count = f.count.saturating_sub(1);
        if f.count == 0 {
            map.remove(key);
        }
    }
}

impl LoginLimiter {
    pub fn new() -> LoginLimiter {
        LoginLimiter::default()
    }

    /// A limiter whose first delay is `base` (then 2 × `base`, 4 × `base`, …).
    pub fn with_base_delay(base: Duration) -> LoginLimiter {
        LoginLimiter {
            state: Mutex::default(),
            base: base.max(Duration::from_millis(1)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks the three counters and, when none holds the attempt back, counts it as a failure
    /// at once. Returns the seconds to wait otherwise.
    pub fn attempt(&self, account: &str, address: &str) -> Result<Attempt, u64> {
        let now = Instant::now();
        let mut s = self.lock();
        let pair_key = (account.to_owned(), address.to_owned());
        let wait_after = |f: Option<Failures>, free: u32| -> Option<Duration> {
            let f = f.filter(|f| f.count >= free)?;
            let until = f.last + delay(self.base, f.count - free);
            (now < until).then(|| until - now)
        };
        if let Some(wait) = wait_after(live(s.pairs.get(&pair_key), now), PAIR_FREE) {
            return Err(secs(wait));
        }
        if let Some(f) = live(s.addresses.get(address), now).filter(|f| f.count >= ADDRESS_MAX) {
            return Err(secs(WINDOW - now.duration_since(f.last)));
        }
        let trusted = s.trusted.get(account).is_some_and(|list| {
            list.iter()
                .any(|(a, at)| a == address && now.duration_since(*at) < TRUST_FOR)
        });
        if !trusted && let Some(wait) = wait_after(live(s.accounts.get(account), now), ACCOUNT_FREE)
        {
            return Err(secs(wait));
        }
        bump(&mut s.pairs, pair_key, now);
        bump(&mut s.addresses, address.to_owned(), now);
        bump(&mut s.accounts, account.to_owned(), now);
        Ok(Attempt(()))
    }

    /// The password was right: the attempt was no failure, the address's own record for this
    /// account is cleared, and the address is one this account signs in from. (The account's
    /// count of failures from elsewhere stays: the owner signing in does not reset an attacker's
    /// delay.)
    pub fn succeeded(&self, account: &str, address: &str, attempt: Attempt) {
        let _ = attempt;
        let now = Instant::now();
        let mut s = self.lock();
        s.pairs.remove(&(account.to_owned(), address.to_owned()));
        take_back(&mut s.addresses, &address.to_owned());
        take_back(&mut s.accounts, &account.to_owned());
        if s.trusted.len() >= MAX_ENTRIES && !s.trusted.contains_key(account) {
            s.trusted.clear();
        }
        let list = s.trusted.entry(account.to_owned()).or_default();
        list.retain(|(a, at)| a != address && now.duration_since(*at) < TRUST_FOR);
        list.push((address.to_owned(), now));
        if list.len() > TRUSTED_PER_ACCOUNT {
            list.remove(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_slowed_after_five_failures() {
        let l = LoginLimiter::new();
        for _ in 0..PAIR_FREE {
            assert!(l.attempt("a", "1").is_ok());
        }
        assert_eq!(l.attempt("a", "1").unwrap_err(), 1);
        // Another address may still try: the account has only 5 failures.
        assert!(l.attempt("a", "2").is_ok());
    }

    #[test]
    fn the_account_delay_spares_an_address_it_signed_in_from() {
        let l = LoginLimiter::new();
        let ok = l.attempt("a", "home").unwrap();
        l.succeeded("a", "home", ok);
        for i in 0..ACCOUNT_FREE {
            assert!(l.attempt("a", &format!("attacker{i}")).is_ok());
        }
        assert!(l.attempt("a", "elsewhere").is_err());
        assert!(l.attempt("a", "home").is_ok());
    }

    #[test]
    fn delays_double_and_are_capped() {
        let base = DEFAULT_BASE_DELAY;
        assert_eq!(delay(base, 0), Duration::from_secs(1));
        assert_eq!(delay(base, 3), Duration::from_secs(8));
        assert_eq!(delay(base, 40), MAX_DELAY);
        assert_eq!(delay(Duration::from_secs(60), 1), Duration::from_secs(120));
    }

    #[test]
    fn spraying_from_one_address_is_refused() {
        let l = LoginLimiter::new();
        for i in 0..ADDRESS_MAX {
            assert!(l.attempt(&format!("u{i}"), "x").is_ok());
        }
        assert!(l.attempt("fresh", "x").is_err());
        assert!(l.attempt("fresh", "y").is_ok());
    }
}
