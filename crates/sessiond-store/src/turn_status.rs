//! A session's turn status as its row stores it (`sessions.turn_status`), and the bucket the
//! list shows it in (`sessions.bucket`, derived from the turn and the machine): the one typed name
//! for the strings the row holds, shared by the units that write them and the reads that show
//! them.

/// A session's turn as its row shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Running,
    Ask,
    Sleep,
    Complete,
    Interrupted,
}

impl TurnStatus {
    pub fn name(self) -> &'static str {
        match self {
            TurnStatus::Running => "running",
            TurnStatus::Ask => "ask",
            TurnStatus::Sleep => "sleep",
            TurnStatus::Complete => "complete",
            TurnStatus::Interrupted => "interrupted",
        }
    }

    pub fn parse(name: &str) -> Option<TurnStatus> {
        match name {
            "running" => Some(TurnStatus::Running),
            "ask" => Some(TurnStatus::Ask),
            "sleep" => Some(TurnStatus::Sleep),
            "complete" => Some(TurnStatus::Complete),
            "interrupted" => Some(TurnStatus::Interrupted),
            _ => None,
        }
    }
}

// A row's `turn_status` column: a name this enum does not know is a fault of the database, not
// a status to guess at.
super::sql::from_sql_by_name!(TurnStatus: "turn status");

/// Where a session stands in the list (R11, R12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Running,
    Asking,
    Scheduled,
    Done,
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Running => "running",
            Bucket::Asking => "asking",
            Bucket::Scheduled => "scheduled",
            Bucket::Done => "done",
        }
    }

    pub fn parse(name: &str) -> Option<Bucket> {
        match name {
            "running" => Some(Bucket::Running),
            "asking" => Some(Bucket::Asking),
            "scheduled" => Some(Bucket::Scheduled),
            "done" => Some(Bucket::Done),
            _ => None,
        }
    }
}

impl Bucket {
    /// Where a session stands (R11, R12). With a machine the bucket follows
    /// `machine.activity` (running → running, waiting → asking, sleeping → scheduled, idle →
    /// from the turn); without one it follows the turn (running or a queued input → running,
    /// ask → asking, sleep → scheduled, complete or interrupted → done).
    pub fn derive(turn: TurnStatus, machine_activity: Option<&str>) -> Bucket {
        match machine_activity {
            Some("running") => Bucket::Running,
            Some("waiting") => Bucket::Asking,
            Some("sleeping") => Bucket::Scheduled,
            _ => match turn {
                TurnStatus::Running => Bucket::Running,
                TurnStatus::Ask => Bucket::Asking,
                TurnStatus::Sleep => Bucket::Scheduled,
                TurnStatus::Complete | TurnStatus::Interrupted => Bucket::Done,
            },
        }
    }
}

/// The bucket a session shows for `turn`, given its machine's projection (JSON), if it has one.
pub(crate) fn bucket_of(turn: TurnStatus, machine: Option<&str>) -> Bucket {
    let activity = machine
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| {
            m.get("activity")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        });
    Bucket::derive(turn, activity.as_deref())
}
