//! What the benchmark commands share: their `--quick` flag, latency figures and formatting
//! (included with `#[path]`; not a target itself, and not every command uses every piece).
#![allow(dead_code)]

use std::time::Duration;

/// Reads the command line of benchmark `name`: `--quick` (described by `quick`), `--help`, or
/// an error for anything else.
pub fn quick_flag(name: &str, quick: &str) -> bool {
    flags(name, &[("--quick", quick)])[0]
}

/// Reads the command line of benchmark `name`: each of `known` is a `(flag, description)`;
/// answers, in the same order, which were given (`--help` prints them, anything else is an error).
pub fn flags(name: &str, known: &[(&str, &str)]) -> Vec<bool> {
    let mut on = vec![false; known.len()];
    for arg in std::env::args().skip(1) {
        if let Some(i) = known.iter().position(|(f, _)| *f == arg) {
            on[i] = true;
            continue;
        }
        match arg.as_str() {
            "-h" | "--help" => {
                let usage: Vec<String> = known.iter().map(|(f, _)| format!("[{f}]")).collect();
                println!(
                    "usage: cargo run --release --example {name} [-- {}]\n",
                    usage.join(" ")
                );
                for (f, what) in known {
                    println!("{f:<10} {what}");
                }
                std::process::exit(0);
            }
            other => {
                eprintln!("unknown argument {other:?} (try --help)");
                std::process::exit(2);
            }
        }
    }
    on
}

/// Latencies in milliseconds (signed where a measurement can come out negative), sorted by
/// [`Lat::of`] or [`Lat::sort`] before percentiles are read.
#[derive(Default)]
pub struct Lat {
    v: Vec<f64>,
}

impl Lat {
    pub fn of(mut v: Vec<f64>) -> Lat {
        v.sort_by(f64::total_cmp);
        Lat { v }
    }

    pub fn push(&mut self, d: Duration) {
        self.v.push(d.as_secs_f64() * 1000.0);
    }

    pub fn sort(&mut self) {
        self.v.sort_by(f64::total_cmp);
    }

    pub fn n(&self) -> usize {
        self.v.len()
    }

    /// Nearest-rank percentile, `q` in 0..=100.
    pub fn p(&self, q: f64) -> f64 {
        let n = self.v.len();
        if n == 0 {
            return f64::NAN;
        }
        let rank = ((q / 100.0) * n as f64).ceil() as usize;
        self.v[rank.clamp(1, n) - 1]
    }

    pub fn max(&self) -> f64 {
        self.v.last().copied().unwrap_or(f64::NAN)
    }

    pub fn mean(&self) -> f64 {
        if self.v.is_empty() {
            f64::NAN
        } else {
            self.v.iter().sum::<f64>() / self.v.len() as f64
        }
    }

    pub fn line(&self) -> String {
        format!(
            "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, mean {:.2} ms (n = {})",
            self.p(50.0),
            self.p(90.0),
            self.p(99.0),
            self.max(),
            self.mean(),
            thousands(self.n() as u64)
        )
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The 1/5/15-minute load averages (Linux), to judge how noisy the machine was.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
