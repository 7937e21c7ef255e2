//! A session's turn status as its row stores it (`sessions.turn_status`): the one typed name for
//! the strings the row holds, shared by the units that write it and the reads that show it.

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
