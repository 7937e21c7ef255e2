//! Failed-login rate limiting, per account and per client address.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct LoginLimiter {
    window: Duration,
    per_account: usize,
    per_address: usize,
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl LoginLimiter {
    pub fn new(window: Duration, per_account: usize, per_address: usize) -> LoginLimiter {
        LoginLimiter {
            window,
            per_account,
            per_address,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn recent(&self, map: &mut HashMap<String, VecDeque<Instant>>, key: &str) -> usize {
        let now = Instant::now();
        match map.get_mut(key) {
            Some(q) => {
                while q
                    .front()
                    .is_some_and(|t| now.duration_since(*t) > self.window)
                {
                    q.pop_front();
                }
                q.len()
            }
            None => 0,
        }
    }

    /// Checks both limits and, when neither is reached, counts this attempt as a failure at once,
    /// under the same lock: concurrent attempts cannot all pass the check before any of them is
    /// counted. Returns the attempt's mark (for [`LoginLimiter::succeeded`]) or the seconds to
    /// wait.
    pub fn attempt(&self, account: &str, address: &str) -> Result<Instant, u64> {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let acc = self.recent(&mut map, &format!("a:{account}"));
        let addr = self.recent(&mut map, &format!("i:{address}"));
        if acc >= self.per_account || addr >= self.per_address {
            return Err(self.window.as_secs().max(1));
        }
        if map.len() > 100_000 {
            map.clear();
        }
        let now = Instant::now();
        map.entry(format!("a:{account}"))
            .or_default()
            .push_back(now);
        map.entry(format!("i:{address}"))
            .or_default()
            .push_back(now);
        Ok(now)
    }

    /// Clears the account's failures and takes back the address's count of attempt `mark`.
    pub fn succeeded(&self, account: &str, address: &str, mark: Instant) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&format!("a:{account}"));
        if let Some(q) = map.get_mut(&format!("i:{address}"))
            && let Some(i) = q.iter().position(|t| *t == mark)
        {
            q.remove(i);
        }
    }
}
