//! When a schedule ticks: its cadence (a cron expression read in an IANA time zone, or a fixed
//! interval), its active window (`start_at` ..= `end_at`) and the ticks left out by `skip`.
//!
//! Every time here is an instant in milliseconds since the Unix epoch; a cron expression is
//! matched against the wall clock of its zone, so a New York `0 9 * * *` ticks at 13:00 UTC in
//! summer and 14:00 UTC in winter. Cron expressions have the five POSIX fields (minute, hour,
//! day of month, month, day of week; names like `MON` and `JAN`, ranges, steps, lists, `L`, `W`,
//! `#` and the `@hourly` … `@yearly` nicknames); a day of month and a day of week both restricted
//! match when either does, as in Vixie cron. Matching is croner's, which follows the Open Cron
//! Pattern Specification at daylight-saving changes:
//!
//! * a wall-clock time that does not exist (the hour skipped in spring): a job at a fixed time
//!   (one minute of one hour, `30 2 * * *`) runs at the first valid time after the gap, the same
//!   day; a job on a wildcard, range, list or step (`*/15 * * * *`) skips the times in the gap;
//! * a wall-clock time that happens twice (the hour repeated in autumn): a fixed-time job runs
//!   once, at the first of the two; a wildcard job runs at each matching time of both passes.
//!
//! The zone database is the one compiled into sessiond (jiff's bundled copy of the IANA
//! database), so tick times do not depend on the host's `/usr/share/zoneinfo`.

use std::collections::BTreeSet;
use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The zone of a schedule that names none (and of every interval schedule).
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// The longest cron expression accepted.
const MAX_CRON_LEN: usize = 200;

/// How a schedule repeats.
#[derive(Debug, Clone)]
pub enum Cadence {
    Cron {
        cron: Box<Cron>,
        zone: TimeZone,
    },
    /// Ticks at `anchor + k × every` for every whole `k`.
    Interval {
        every_ms: i64,
        anchor_ms: i64,
    },
}

/// Why a cadence or a time zone was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

/// Looks an IANA zone name up in the bundled database; returns the zone and its canonical name.
pub fn zone(name: &str) -> Result<(TimeZone, String), Invalid> {
    if name.is_empty() || name.len() > 64 {
        return Err(Invalid("timezone: must be an IANA time zone name".into()));
    }
    let tz = TimeZone::get(name).map_err(|_| {
        Invalid(format!(
            "timezone: {name} is not an IANA time zone name (such as America/New_York or UTC)"
        ))
    })?;
    let canonical = tz.iana_name().unwrap_or(name).to_owned();
    Ok((tz, canonical))
}

impl Cadence {
    /// A five-field cron expression evaluated in `zone`.
    pub fn cron(expression: &str, zone: TimeZone) -> Result<Cadence, Invalid> {
        if expression.trim().is_empty() || expression.len() > MAX_CRON_LEN {
            return Err(Invalid(format!(
                "cron_expression: must be a five-field cron expression of at most {MAX_CRON_LEN} characters"
            )));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|e| Invalid(format!("cron_expression: {e}")))?;
        Ok(Cadence::Cron {
            cron: Box::new(cron),
            zone,
        })
    }

    pub fn interval(every_seconds: i64, anchor_ms: i64) -> Cadence {
        Cadence::Interval {
            every_ms: every_seconds.saturating_mul(1000).max(1),
            anchor_ms,
        }
    }

    /// The first tick strictly after `after`.
    fn after(&self, after: i64) -> Option<i64> {
        match self {
            Cadence::Interval {
                every_ms,
                anchor_ms,
            } => {
                let k = (after - anchor_ms).div_euclid(*every_ms) + 1;
                anchor_ms.checked_add(k.checked_mul(*every_ms)?)
            }
            Cadence::Cron { cron, zone } => {
                // Cron has whole-second resolution: a tick at `s` seconds is after `after` when
                // `s * 1000 > after`, so search past the second `after` falls in.
                let start = Timestamp::from_second(after.div_euclid(1000))
                    .ok()?
                    .to_zoned(zone.clone());
                let next = cron.find_next_occurrence(&start, false).ok()?;
                Some(next.timestamp().as_millisecond())
            }
        }
    }

    /// The latest tick at or before `at`.
    fn at_or_before(&self, at: i64) -> Option<i64> {
        match self {
            Cadence::Interval {
                every_ms,
                anchor_ms,
            } => {
                let k = (at - anchor_ms).div_euclid(*every_ms);
                anchor_ms.checked_add(k.checked_mul(*every_ms)?)
            }
            Cadence::Cron { cron, zone } => {
                let start = Timestamp::from_second(at.div_euclid(1000))
                    .ok()?
                    .to_zoned(zone.clone());
                let prev = cron.find_previous_occurrence(&start, true).ok()?;
                Some(prev.timestamp().as_millisecond())
            }
        }
    }
}

/// Everything that decides a schedule's tick times.
#[derive(Debug, Clone)]
pub struct Timing {
    pub cadence: Cadence,
    pub start_at: Option<i64>,
    pub end_at: Option<i64>,
    pub skipped: BTreeSet<i64>,
}

impl Timing {
    /// The first tick strictly after `after` inside the window and not skipped; `None` once the
    /// schedule has no more ticks.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let mut after = match self.start_at {
            Some(start) if after < start => start - 1,
            _ => after,
        };
        // Each skipped tick is stepped over once, so this ends after at most |skipped| + 1 steps.
        loop {
            let t = self.cadence.after(after)?;
            if self.end_at.is_some_and(|end| t > end) {
                return None;
            }
            if !self.skipped.contains(&t) {
                return Some(t);
            }
            after = t;
        }
    }

    /// The next `n` ticks after `after`.
    pub fn upcoming(&self, after: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut cursor = after;
        while out.len() < n {
            match self.next_after(cursor) {
                Some(t) => {
                    out.push(t);
                    cursor = t;
                }
                None => break,
            }
        }
        out
    }

    /// The latest tick in `from ..= at` inside the window and not skipped: the one a catch-up run
    /// stands for.
    pub fn latest_between(&self, from: i64, at: i64) -> Option<i64> {
        let mut at = match self.end_at {
            Some(end) if at > end => end,
            _ => at,
        };
        loop {
            let t = self.cadence.at_or_before(at)?;
            if t < from || self.start_at.is_some_and(|s| t < s) {
                return None;
            }
            if !self.skipped.contains(&t) {
                return Some(t);
            }
            at = t - 1;
        }
    }

    /// Whether `t` is one of the cadence's ticks inside the window (skipped or not).
    pub fn is_tick(&self, t: i64) -> bool {
        if self.start_at.is_some_and(|s| t < s) || self.end_at.is_some_and(|e| t > e) {
            return false;
        }
        self.cadence.after(t - 1) == Some(t)
    }
}

/// Parses a date-time sent by a client: RFC 3339 / ISO 8601 with an offset, or without one
/// (then read as UTC, as the official client sends a naive `datetime`). Returns milliseconds.
pub fn parse_instant(field: &str, text: &str) -> Result<i64, Invalid> {
    let bad = || {
        Invalid(format!(
            "{field}: must be an ISO 8601 date-time such as 2030-03-09T13:00:00Z"
        ))
    };
    if text.len() > 64 {
        return Err(bad());
    }
    let ts = match Timestamp::from_str(text) {
        Ok(ts) => ts,
        Err(_) => jiff::civil::DateTime::from_str(text)
            .ok()
            .and_then(|dt| dt.to_zoned(TimeZone::UTC).ok())
            .map(|z| z.timestamp())
            .ok_or_else(bad)?,
    };
    Ok(ts.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        parse_instant("t", text).unwrap()
    }

    fn iso(ms: i64) -> String {
        crate::clock::rfc3339(ms)
    }

    fn ny(expr: &str) -> Timing {
        let (tz, _) = zone("America/New_York").unwrap();
        Timing {
            cadence: Cadence::cron(expr, tz).unwrap(),
            start_at: None,
            end_at: None,
            skipped: BTreeSet::new(),
        }
    }

    #[test]
    fn new_york_nine_am_follows_daylight_saving_time() {
        let t = ny("0 9 * * *");
        // US DST starts on 2030-03-10 and ends on 2030-11-03.
        let spring: Vec<String> = t
            .upcoming(ms("2030-03-08T00:00:00Z"), 3)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            spring,
            [
                "2030-03-08T14:00:00.000Z",
                "2030-03-09T14:00:00.000Z",
                "2030-03-10T13:00:00.000Z"
            ]
        );
        let autumn: Vec<String> = t
            .upcoming(ms("2030-11-01T00:00:00Z"), 3)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            autumn,
            [
                "2030-11-01T13:00:00.000Z",
                "2030-11-02T13:00:00.000Z",
                "2030-11-03T14:00:00.000Z"
            ]
        );
    }

    #[test]
    fn a_fixed_time_in_the_spring_gap_runs_after_the_gap_and_a_repeated_one_runs_once() {
        // 02:30 does not exist on 2030-03-10 in New York: the job runs at 03:00 EDT (07:00Z).
        let t = ny("30 2 * * *");
        let ticks: Vec<String> = t
            .upcoming(ms("2030-03-09T12:00:00Z"), 2)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            ticks,
            ["2030-03-10T07:00:00.000Z", "2030-03-11T06:30:00.000Z"]
        );
        // 01:30 happens twice on 2030-11-03: the job runs once, at the first (EDT, 05:30Z).
        let t = ny("30 1 * * *");
        let ticks: Vec<String> = t
            .upcoming(ms("2030-11-02T12:00:00Z"), 2)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            ticks,
            ["2030-11-03T05:30:00.000Z", "2030-11-04T06:30:00.000Z"]
        );
    }

    #[test]
    fn wildcard_jobs_skip_the_gap_and_repeat_in_the_overlap() {
        let t = ny("0,30 * * * *");
        // Spring: 01:30 EST (06:30Z), then 03:00 EDT (07:00Z); 02:00 and 02:30 do not exist.
        let spring: Vec<String> = t
            .upcoming(ms("2030-03-10T06:00:00Z"), 3)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            spring,
            [
                "2030-03-10T06:30:00.000Z",
                "2030-03-10T07:00:00.000Z",
                "2030-03-10T07:30:00.000Z"
            ]
        );
        // Autumn: 01:00 and 01:30 run in EDT and again in EST.
        let autumn: Vec<String> = t
            .upcoming(ms("2030-11-03T04:45:00Z"), 5)
            .into_iter()
            .map(iso)
            .collect();
        assert_eq!(
            autumn,
            [
                "2030-11-03T05:00:00.000Z",
                "2030-11-03T05:30:00.000Z",
                "2030-11-03T06:00:00.000Z",
                "2030-11-03T06:30:00.000Z",
                "2030-11-03T07:00:00.000Z"
            ]
        );
    }

    #[test]
    fn intervals_count_from_their_anchor() {
        let anchor = ms("2030-01-01T00:00:00Z");
        let t = Timing {
            cadence: Cadence::interval(90, anchor),
            start_at: None,
            end_at: Some(anchor + 270_000),
            skipped: [anchor + 180_000].into(),
        };
        assert_eq!(t.next_after(anchor), Some(anchor + 90_000));
        assert_eq!(t.next_after(anchor + 1), Some(anchor + 90_000));
        // The 180 s tick is skipped; 270 s is the last inside the window.
        assert_eq!(t.next_after(anchor + 90_000), Some(anchor + 270_000));
        assert_eq!(t.next_after(anchor + 270_000), None);
        assert_eq!(
            t.latest_between(anchor, anchor + 200_000),
            Some(anchor + 90_000)
        );
        assert_eq!(
            t.latest_between(anchor, anchor + 999_000),
            Some(anchor + 270_000)
        );
        assert!(t.is_tick(anchor + 180_000));
        assert!(!t.is_tick(anchor + 180_001));
    }

    #[test]
    fn start_at_is_the_first_possible_tick() {
        let start = ms("2030-06-01T13:00:00Z");
        let t = Timing {
            start_at: Some(start),
            ..ny("0 9 * * *")
        };
        assert_eq!(t.next_after(ms("2030-01-01T00:00:00Z")), Some(start));
        assert_eq!(t.latest_between(0, start - 1), None);
    }

    #[test]
    fn bad_cadences_and_zones_are_refused() {
        let (tz, name) = zone("america/new_york").unwrap();
        assert_eq!(name, "America/New_York");
        assert!(zone("Mars/Olympus_Mons").is_err());
        assert!(zone("").is_err());
        assert!(Cadence::cron("0 9 * *", tz.clone()).is_err());
        assert!(
            Cadence::cron("0 0 9 * * *", tz.clone()).is_err(),
            "no seconds field"
        );
        assert!(Cadence::cron("61 * * * *", tz.clone()).is_err());
        assert!(Cadence::cron("@daily", tz.clone()).is_ok());
        assert!(Cadence::cron("0 17 * * MON-FRI", tz).is_ok());
    }

    #[test]
    fn a_cron_that_never_matches_has_no_next_tick() {
        let t = ny("0 0 30 2 *");
        let started = std::time::Instant::now();
        assert_eq!(t.next_after(ms("2030-01-01T00:00:00Z")), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn instants_parse_with_or_without_an_offset() {
        assert_eq!(
            ms("2030-03-09T08:00:00-05:00"),
            ms("2030-03-09T13:00:00.000Z")
        );
        assert_eq!(ms("2030-03-09T13:00:00"), ms("2030-03-09T13:00:00Z"));
        assert_eq!(
            ms("2030-03-09T13:00:00.123456+00:00") % 1000,
            123,
            "sub-millisecond digits are dropped"
        );
        assert!(parse_instant("t", "tomorrow").is_err());
    }
}
