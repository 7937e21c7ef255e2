//! Where a session's `bucket` is computed (R11, R12).
//!
//! With a machine the bucket follows `machine.activity` (running → running, waiting → asking,
//! sleeping → scheduled, idle → from the turn); without one it follows the turn (running or a queued
//! input → running, ask → asking, sleep → scheduled, complete or interrupted → done).

pub fn derive(turn_status: &str, machine_activity: Option<&str>) -> &'static str {
    match machine_activity {
        Some("running") => "running",
        Some("waiting") => "asking",
        Some("sleeping") => "scheduled",
        _ => from_turn(turn_status),
    }
}

fn from_turn(turn_status: &str) -> &'static str {
    match turn_status {
        "running" => "running",
        "ask" => "asking",
        "sleep" => "scheduled",
        _ => "done",
    }
}

#[cfg(test)]
mod tests {
    use super::derive;

    #[test]
    fn machine_wins_over_turn_r12() {
        assert_eq!(derive("complete", Some("running")), "running");
        assert_eq!(derive("complete", Some("waiting")), "asking");
        assert_eq!(derive("running", Some("sleeping")), "scheduled");
        assert_eq!(derive("ask", Some("idle")), "asking");
    }

    #[test]
    fn turn_mapping() {
        assert_eq!(derive("running", None), "running");
        assert_eq!(derive("ask", None), "asking");
        assert_eq!(derive("sleep", None), "scheduled");
        assert_eq!(derive("complete", None), "done");
        assert_eq!(derive("interrupted", None), "done");
    }
}
