//! Operational metrics in the Prometheus text format (version 0.0.4), served by `/metrics` on the
//! metrics listener (`[metrics] bind`).
//!
//! The format is simple and the set is fixed, so the counters, gauges and histograms are our own
//! atomics rather than a metrics framework: recording is one relaxed atomic add (a label lookup
//! takes a read lock on a small map), and nothing grows with traffic beyond the label sets, which
//! are bounded (route patterns, status codes, engine names, outcomes).
//!
//! Values that are cheaper to read than to track (the writer's queue depth, inputs waiting in the
//! store) are sampled when `/metrics` is scraped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

/// Seconds: from 1 ms to 30 s (HTTP latency).
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Jobs per committed batch (the writer takes up to `store.max_batch`).
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Cumulative buckets as Prometheus wants them; the sum is kept in microunits so it stays an
/// atomic integer.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    sum_micro: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micro: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micro
            .fetch_add((v.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (bound, n) in self.bounds.iter().zip(&self.counts) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_micro.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// A metric per label set. Label values are rendered escaped; the sets are bounded by the caller
/// (route patterns, not paths).
pub struct Family<M> {
    labels: &'static [&'static str],
    make: fn() -> M,
    members: RwLock<BTreeMap<Vec<String>, Arc<M>>>,
}

impl<M> Family<M> {
    fn new(labels: &'static [&'static str], make: fn() -> M) -> Family<M> {
        Family {
            labels,
            make,
            members: RwLock::new(BTreeMap::new()),
        }
    }

    /// The member for `values` (one per label, in order).
    pub fn with(&self, values: &[&str]) -> Arc<M> {
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        if let Some(m) = self
            .members
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Arc::clone(m);
        }
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            members
                .entry(key)
                .or_insert_with(|| Arc::new((self.make)())),
        )
    }

    fn each(&self, mut f: impl FnMut(&str, &M)) {
        let members = self.members.read().unwrap_or_else(|p| p.into_inner());
        for (values, m) in members.iter() {
            let labels = self
                .labels
                .iter()
                .zip(values)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect::<Vec<_>>()
                .join(",");
            f(&labels, m);
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Every metric sessiond keeps.
pub struct Metrics {
    pub http_requests: Family<Counter>,
    pub http_duration: Family<Histogram>,
    /// Requests the HTTP layer refused before routing (malformed, too large, too slow).
    pub http_rejected: Family<Counter>,
    pub events_appended: Counter,
    pub commits: Counter,
    /// Write transactions run again after losing a lock race (PostgreSQL).
    pub write_retries: Counter,
    /// Batches whose jobs ran again one by one after one of them failed (PostgreSQL).
    pub batch_reruns: Counter,
    pub commit_batch_jobs: Histogram,
    pub commit_failures: Family<Counter>,
    /// WAL checkpoints, by who ran them (`background`, `writer`).
    pub checkpoints: Family<Counter>,
    pub checkpoint_failures: Counter,
    pub turns_active: Gauge,
    pub sessions_waiting_for_slot: Gauge,
    /// Turns whose terminal waits for the storage to take writes again.
    pub turns_awaiting_storage: Gauge,
    pub turns_ended: Family<Counter>,
    pub engine_calls: Family<Counter>,
    pub engine_errors: Family<Counter>,
    pub sse_subscribers: Gauge,
    /// 1 while no other process shares the PostgreSQL database (commits send no notices).
    pub fanout_alone: Gauge,
    /// Delta notices sent to other processes that stream the session (PostgreSQL).
    pub fanout_deltas_relayed: Counter,
    /// Sessions whose deltas other processes asked this one for (PostgreSQL).
    pub fanout_sessions_asked: Gauge,
    /// Streams ended because their client fell behind (it resumes by seq).
    pub sse_lagged: Counter,
    /// Live frames that skipped a seq and sent their stream back to the store's backlog.
    pub sse_backlog_rereads: Counter,
    pub logins_throttled: Counter,
    /// Connections refused because the process is near its open-files limit.
    pub connections_refused: Counter,
    /// Outbound webhook attempts, by outcome (`delivered`, `retrying`, `failed`).
    pub webhook_attempts: Family<Counter>,
    /// Retention sweeps finished.
    pub retention_sweeps: Counter,
    /// Sessions a retention policy removed, by action (`delete`, `archive`).
    pub retention_removed: Family<Counter>,
    /// Retention sweeps that failed (the next one tries again).
    pub retention_failures: Counter,
}

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    http_requests: Family::new(&["route", "method", "status"], Counter::default),
    http_duration: Family::new(&["route", "method"], || Histogram::new(LATENCY_BUCKETS)),
    http_rejected: Family::new(&["status"], Counter::default),
    events_appended: Counter::default(),
    commits: Counter::default(),
    write_retries: Counter::default(),
    batch_reruns: Counter::default(),
    commit_batch_jobs: Histogram::new(BATCH_BUCKETS),
    commit_failures: Family::new(&["reason"], Counter::default),
    checkpoints: Family::new(&["by"], Counter::default),
    checkpoint_failures: Counter::default(),
    turns_active: Gauge::default(),
    sessions_waiting_for_slot: Gauge::default(),
    turns_awaiting_storage: Gauge::default(),
    turns_ended: Family::new(&["engine", "outcome"], Counter::default),
    engine_calls: Family::new(&["engine"], Counter::default),
    engine_errors: Family::new(&["engine"], Counter::default),
    sse_subscribers: Gauge::default(),
    fanout_alone: Gauge::default(),
    fanout_deltas_relayed: Counter::default(),
    fanout_sessions_asked: Gauge::default(),
    sse_lagged: Counter::default(),
    sse_backlog_rereads: Counter::default(),
    logins_throttled: Counter::default(),
    connections_refused: Counter::default(),
    webhook_attempts: Family::new(&["outcome"], Counter::default),
    retention_sweeps: Counter::default(),
    retention_removed: Family::new(&["action"], Counter::default),
    retention_failures: Counter::default(),
});

/// Values sampled at scrape time.
pub struct Sampled {
    pub writer_queue_depth: i64,
    pub inputs_pending: Option<i64>,
    pub storage_ok: bool,
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: impl std::fmt::Display) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
}

fn counters(out: &mut String, name: &str, help: &str, family: &Family<Counter>) {
    header(out, name, "counter", help);
    family.each(|labels, c| {
        let _ = writeln!(out, "{name}{{{labels}}} {}", c.get());
    });
}

impl Metrics {
    /// The whole exposition, in the text format.
    pub fn render(&self, sampled: &Sampled) -> String {
        let mut out = String::with_capacity(8 * 1024);
        counters(
            &mut out,
            "sessiond_http_requests_total",
            "HTTP requests answered, by route pattern, method and status.",
            &self.http_requests,
        );
        header(
            &mut out,
            "sessiond_http_request_duration_seconds",
            "histogram",
            "Time to the response head, by route pattern and method.",
        );
        self.http_duration
            .each(|labels, h| h.render(&mut out, "sessiond_http_request_duration_seconds", labels));
        counters(
            &mut out,
            "sessiond_http_rejected_total",
            "Requests refused by the HTTP layer before routing (malformed, too large, too slow), by status.",
            &self.http_rejected,
        );
        scalar(
            &mut out,
            "sessiond_events_appended_total",
            "counter",
            "Durable timeline events committed.",
            self.events_appended.get(),
        );
        scalar(
            &mut out,
            "sessiond_store_commits_total",
            "counter",
            "Write transactions committed by the writer.",
            self.commits.get(),
        );
        scalar(
            &mut out,
            "sessiond_store_write_retries_total",
            "counter",
            "Write transactions run again after losing a lock race with another transaction (PostgreSQL: a deadlock or a serialization failure).",
            self.write_retries.get(),
        );
        scalar(
            &mut out,
            "sessiond_store_batch_reruns_total",
            "counter",
            "Batches of writes rolled back because one of their jobs failed, whose jobs then ran again one by one (PostgreSQL).",
            self.batch_reruns.get(),
        );
        header(
            &mut out,
            "sessiond_store_commit_batch_jobs",
            "histogram",
            "Write requests folded into one committed transaction (group commit).",
        );
        self.commit_batch_jobs
            .render(&mut out, "sessiond_store_commit_batch_jobs", "");
        counters(
            &mut out,
            "sessiond_store_commit_failures_total",
            "Write batches that failed, by reason (full, unavailable, other).",
            &self.commit_failures,
        );
        counters(
            &mut out,
            "sessiond_store_checkpoints_total",
            "Checkpoints of the SQLite write-ahead log, by who ran them: background (the checkpointer thread) or writer (the log had grown long beside a busy writer).",
            &self.checkpoints,
        );
        scalar(
            &mut out,
            "sessiond_store_checkpoint_failures_total",
            "counter",
            "Checkpoints that failed (the log keeps every write; the next checkpoint copies it).",
            self.checkpoint_failures.get(),
        );
        scalar(
            &mut out,
            "sessiond_retention_sweeps_total",
            "counter",
            "Retention sweeps finished (each applies every workspace's retention policy).",
            self.retention_sweeps.get(),
        );
        counters(
            &mut out,
            "sessiond_retention_sessions_removed_total",
            "Sessions a retention policy removed, by action: delete, or archive (written to an archive file, then deleted).",
            &self.retention_removed,
        );
        scalar(
            &mut out,
            "sessiond_retention_failures_total",
            "counter",
            "Retention sweeps that failed part-way (the next one tries again).",
            self.retention_failures.get(),
        );
        scalar(
            &mut out,
            "sessiond_store_writer_queue_depth",
            "gauge",
            "Write requests queued for the writer thread.",
            sampled.writer_queue_depth,
        );
        scalar(
            &mut out,
            "sessiond_store_writable",
            "gauge",
            "1 while the store takes writes, 0 while it is full or unavailable.",
            u8::from(sampled.storage_ok),
        );
        if let Some(pending) = sampled.inputs_pending {
            scalar(
                &mut out,
                "sessiond_inputs_queued",
                "gauge",
                "Inputs stored and not yet taken by a turn (follow-ups, wakes, inputs waiting for a slot).",
                pending,
            );
        }
        scalar(
            &mut out,
            "sessiond_turns_active",
            "gauge",
            "Turns running now.",
            self.turns_active.get(),
        );
        scalar(
            &mut out,
            "sessiond_sessions_waiting_for_slot",
            "gauge",
            "Sessions with work waiting for a free runner slot.",
            self.sessions_waiting_for_slot.get(),
        );
        scalar(
            &mut out,
            "sessiond_turns_awaiting_storage",
            "gauge",
            "Turns whose terminal waits for the storage to take writes again.",
            self.turns_awaiting_storage.get(),
        );
        counters(
            &mut out,
            "sessiond_turns_total",
            "Turns ended, by engine and outcome.",
            &self.turns_ended,
        );
        counters(
            &mut out,
            "sessiond_engine_calls_total",
            "Engine runs (one per turn step the engine is asked to run), by engine.",
            &self.engine_calls,
        );
        counters(
            &mut out,
            "sessiond_engine_errors_total",
            "Engine runs that failed, by engine.",
            &self.engine_errors,
        );
        scalar(
            &mut out,
            "sessiond_sse_subscribers",
            "gauge",
            "Open event streams.",
            self.sse_subscribers.get(),
        );
        scalar(
            &mut out,
            "sessiond_fanout_alone",
            "gauge",
            "1 while no other sessiond process shares the PostgreSQL database, so commits send no notices; 0 otherwise, and on SQLite.",
            self.fanout_alone.get(),
        );
        scalar(
            &mut out,
            "sessiond_fanout_deltas_relayed_total",
            "counter",
            "Delta notices this process sent to other sessiond processes that stream the session (PostgreSQL); none while no other process streams it.",
            self.fanout_deltas_relayed.get(),
        );
        scalar(
            &mut out,
            "sessiond_fanout_sessions_asked",
            "gauge",
            "Sessions whose deltas other sessiond processes asked this one for, because they stream them (PostgreSQL).",
            self.fanout_sessions_asked.get(),
        );
        scalar(
            &mut out,
            "sessiond_sse_lagged_total",
            "counter",
            "Event streams ended because their client fell behind (it resumes by seq).",
            self.sse_lagged.get(),
        );
        scalar(
            &mut out,
            "sessiond_sse_backlog_rereads_total",
            "counter",
            "Live frames that skipped a seq, so that their stream read the skipped events from the store.",
            self.sse_backlog_rereads.get(),
        );
        scalar(
            &mut out,
            "sessiond_logins_throttled_total",
            "counter",
            "Sign-in attempts answered 429.",
            self.logins_throttled.get(),
        );
        scalar(
            &mut out,
            "sessiond_connections_refused_total",
            "counter",
            "Connections answered 503 because the process is near its open-files limit.",
            self.connections_refused.get(),
        );
        counters(
            &mut out,
            "sessiond_webhook_attempts_total",
            "Outbound webhook attempts made by this process, by outcome: delivered (a 2xx answer), retrying (failed, tried again later), failed (failed, retries run out).",
            &self.webhook_attempts,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let h = Histogram::new(&[1.0, 2.0]);
        h.observe(0.5);
        h.observe(1.5);
        h.observe(9.0);
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"1\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"2\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 11\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
