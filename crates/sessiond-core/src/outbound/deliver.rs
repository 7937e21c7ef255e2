//! The deliverer: a task on the runner's runtime that takes due messages from the outbox
//! (leased, so that several processes on one database never attempt one message at once),
//! signs and sends each, and records what came of it. A message is delivered at least once:
//! it stays `pending` until a receiver answers 2xx, and its `webhook-id` never changes, so a
//! receiver that saw it before a crash or a lost answer recognises it.
//!
//! Retries back off exponentially with jitter (`webhooks.backoff_initial_ms`, doubling up to
//! `backoff_max_ms`, each delay drawn from its upper half so that gaps grow), never sooner than
//! a receiver's `Retry-After`, for `webhooks.retry_for_ms`. Every call is bounded: the
//! destination checked against `[policy]` at each attempt on the addresses the client is
//! pinned to, no redirects followed, no proxy, a whole-call timeout and a cap on the answer
//! read. Turns never wait for any of it: the outbox is written with their events, and this
//! task runs apart from them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use super::{destination, signature};
use crate::config::{Config, WebhooksConfig};
use crate::secret::Sealer;
use crate::store::Store;
use crate::store::outbound::{AttemptOutcome, DueDelivery};

/// Characters of a receiver's answer kept in a failed attempt's error.
const ANSWER_EXCERPT_CHARS: usize = 200;
/// Shortest pause between two looks at the outbox.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// The running deliverer; [`DelivererHandle::stop`] ends it.
pub struct DelivererHandle {
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl DelivererHandle {
    /// Stops taking messages. Attempts in flight are dropped; their leases expire and the
    /// messages are attempted again (with the same `webhook-id`) by whichever process is next.
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

#[derive(Clone)]
struct Deliverer {
    store: Store,
    cfg: Arc<Config>,
    sealer: Arc<Sealer>,
    slots: Arc<Semaphore>,
    freed: Arc<Notify>,
}

/// Starts the deliverer on `rt`.
pub fn start(
    store: Store,
    cfg: Arc<Config>,
    sealer: Sealer,
    rt: &tokio::runtime::Handle,
) -> DelivererHandle {
    let d = Deliverer {
        slots: Arc::new(Semaphore::new(cfg.webhooks.concurrency)),
        store,
        cfg,
        sealer: Arc::new(sealer),
        freed: Arc::new(Notify::new()),
    };
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let task = rt.spawn(async move {
        tokio::select! {
            _ = stopped.notified() => {}
            _ = d.run() => {}
        }
    });
    DelivererHandle { stop, task }
}

impl Deliverer {
    async fn run(self) {
        // Alone on a SQLite database, leases left behind are a previous process's.
        if !self.store.shared_by_processes()
            && let Err(e) = self.store.outbound().release_leases().await
        {
            tracing::warn!(error = %e, "webhooks: cannot release the outbox's leases");
        }
        let poll = Duration::from_millis(self.cfg.webhooks.poll_ms);
        loop {
            let pause = match self.round().await {
                Ok(pause) => pause,
                Err(e) => {
                    tracing::warn!(error = %e, "webhooks: cannot read the outbox");
                    poll
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause.clamp(MIN_PAUSE, poll)) => {}
                _ = self.freed.notified() => {}
            }
        }
    }

    /// Starts the attempts that are due and have a free slot; answers how long to wait.
    async fn round(&self) -> crate::error::Result<Duration> {
        let poll = Duration::from_millis(self.cfg.webhooks.poll_ms);
        let now = crate::clock::now_ms();
        let Some(due) = self.store.outbound().next_due().await? else {
            return Ok(poll);
        };
        if due > now {
            return Ok(Duration::from_millis((due - now) as u64));
        }
        let free = self.slots.available_permits();
        if free == 0 {
            return Ok(poll);
        }
        let lease_ms = self.cfg.webhooks.timeout_ms as i64 + 5_000;
        let claimed = self
            .store
            .outbound()
            .claim_due(free.min(256) as u32, lease_ms)
            .await?;
        for d in claimed {
            let Ok(permit) = Arc::clone(&self.slots).acquire_owned().await else {
                break;
            };
            let this = self.clone();
            tokio::spawn(async move {
                this.attempt(d).await;
                drop(permit);
                this.freed.notify_one();
            });
        }
        Ok(MIN_PAUSE)
    }

    async fn attempt(&self, d: DueDelivery) {
        let started_at = crate::clock::now_ms();
        let clock = Instant::now();
        let sent = send(&self.cfg, &self.sealer, &d).await;
        let latency_ms = clock.elapsed().as_millis() as i64;
        let attempt = d.attempts + 1;
        let w = &self.cfg.webhooks;
        let (status, error, retry_after) = match sent {
            Ok(a) if (200..300).contains(&a.status) => (Some(a.status), None, None),
            Ok(a) => (
                Some(a.status),
                Some(format!("HTTP {}: {}", a.status, a.excerpt)),
                a.retry_after_ms,
            ),
            Err(why) => (None, Some(why), None),
        };
        let next_attempt_at = error.as_ref().and_then(|_| {
            let delay = backoff(w, attempt).max(retry_after.unwrap_or(0));
            let next = crate::clock::now_ms() + delay as i64;
            (next <= d.retry_from + w.retry_for_ms as i64).then_some(next)
        });
        let outcome = match (&error, next_attempt_at) {
            (None, _) => "delivered",
            (Some(_), Some(_)) => "retrying",
            (Some(_), None) => "failed",
        };
        crate::metrics::METRICS
            .webhook_attempts
            .with(&[outcome])
            .inc();
        if let Some(e) = &error {
            tracing::info!(
                webhook_id = %d.id, subscription = %d.subscription_id, attempt, error = %e,
                retry = next_attempt_at.is_some(), "webhook delivery failed"
            );
        }
        let outcome = AttemptOutcome {
            delivery_id: d.id.clone(),
            subscription_id: d.subscription_id.clone(),
            attempt,
            started_at,
            status,
            latency_ms,
            error,
            next_attempt_at,
            disable_after_ms: w.disable_after_ms as i64,
        };
        if let Err(e) = self.store.outbound().record_attempt(outcome).await {
            // The lease runs out and the message is attempted again, with the same id.
            tracing::warn!(webhook_id = %d.id, error = %e, "webhooks: cannot record an attempt");
        }
    }
}

/// The pause before attempt `attempt + 1`: `initial × 2^(attempt−1)` up to the maximum, drawn
/// from the upper half of that (so each gap is at least the previous one's largest).
fn backoff(w: &WebhooksConfig, attempt: i64) -> u64 {
    let doublings = (attempt.max(1) - 1).min(40) as u32;
    let full = w
        .backoff_initial_ms
        .saturating_mul(1u64 << doublings)
        .min(w.backoff_max_ms);
    let half = full / 2;
    let jitter = getrandom::u64().unwrap_or(0) % (full - half + 1);
    half + jitter
}

/// What a receiver answered.
struct Answer {
    status: u16,
    retry_after_ms: Option<u64>,
    excerpt: String,
}

/// `Retry-After` as seconds or an HTTP date, in ms from now.
fn retry_after(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(std::time::SystemTime::now()).ok()?;
    Some(wait.as_millis() as u64)
}

/// Signs and sends one message; an error says why no answer came (or why it was not sent).
async fn send(cfg: &Config, sealer: &Sealer, d: &DueDelivery) -> Result<Answer, String> {
    let w = &cfg.webhooks;
    // The policy of this start decides, not the one the subscription was made under.
    let dest = destination::check(&d.url, &cfg.policy, destination::Purpose::Webhook)
        .map_err(|e| e.to_string())?;
    let addrs = destination::resolve(&dest)
        .await
        .map_err(|e| e.to_string())?;
    let mut keys = Vec::with_capacity(2);
    let current = sealer
        .open(&d.secret_sealed, &d.subscription_id)
        .ok_or("the subscription's secret does not open with this server's key")?;
    keys.push(current);
    if let (Some(prev), Some(until)) = (&d.previous_secret_sealed, d.previous_secret_until)
        && until > crate::clock::now_ms()
        && let Some(prev) = sealer.open(prev, &d.subscription_id)
    {
        keys.push(prev);
    }
    let keys: Vec<Vec<u8>> = keys
        .iter()
        .filter_map(|k| std::str::from_utf8(k).ok().and_then(signature::secret_key))
        .collect();
    if keys.is_empty() {
        return Err("the subscription's secret is damaged".into());
    }
    let timeout = Duration::from_millis(w.timeout_ms);
    let client = crate::tls::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .resolve_to_addrs(&dest.host, &addrs)
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let timestamp = crate::clock::now_ms() / 1000;
    let body = d.payload.as_bytes().to_vec();
    let signed = signature::signature_header(&keys, &d.id, timestamp, &body);
    let mut resp = client
        .post(dest.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(
            reqwest::header::USER_AGENT,
            concat!("sessiond/", env!("CARGO_PKG_VERSION")),
        )
        .header("webhook-id", &d.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signed)
        .body(body)
        .send()
        .await
        .map_err(|e| describe(&e))?;
    let status = resp.status().as_u16();
    let retry_after_ms = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(retry_after);
    // At most `max_response_bytes` of the answer are read; the rest is dropped with the
    // connection.
    let mut answer = Vec::new();
    while answer.len() < w.max_response_bytes {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                let room = w.max_response_bytes - answer.len();
                answer.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let excerpt: String = String::from_utf8_lossy(&answer)
        .chars()
        .take(ANSWER_EXCERPT_CHARS)
        .collect();
    Ok(Answer {
        status,
        retry_after_ms,
        excerpt,
    })
}

fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "cannot connect".into()
    } else {
        format!("cannot send: {e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_bounds() {
        let w = WebhooksConfig {
            backoff_initial_ms: 100,
            backoff_max_ms: 1_000,
            ..WebhooksConfig::default()
        };
        for attempt in 1..=8 {
            let full = (100u64 << (attempt - 1)).min(1_000);
            let d = backoff(&w, attempt);
            assert!((full / 2..=full).contains(&d), "{attempt}: {d}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after("3"), Some(3_000));
        let later = std::time::SystemTime::now() + Duration::from_secs(60);
        let ms = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!((55_000..=60_000).contains(&ms));
        assert_eq!(retry_after("soon"), None);
    }
}
