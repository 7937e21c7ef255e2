//! What a message does when it reaches a session whose turn is running: the store applies the
//! caller's [`WhenBusy`] inside the message's own unit of work, against the session row it holds,
//! so that the turn cannot start or end between the check and the write.

use super::{SessionKey, SessionRow, Tx};
use crate::clock;
use crate::error::{Error, Result};
use crate::timeline::{Behavior, Event};

/// A message's busy policy (the sessions core's `BusyPolicy`, which documents each one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WhenBusy {
    /// Delivered as today: a steer reaches the running turn, a follow-up waits for its end.
    #[default]
    Enqueue,
    /// The running turn is asked to stop, and the message runs as the next turn.
    Interrupt,
    /// Refused (409 `session_busy`), with nothing written.
    Reject,
}

impl WhenBusy {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenBusy::Enqueue => "enqueue",
            WhenBusy::Interrupt => "interrupt",
            WhenBusy::Reject => "reject",
        }
    }
}

impl Tx<'_> {
    /// Applies a message's busy policy `when` to the session of `row` (held by the caller): an
    /// error refuses it; otherwise the behavior the message is to be stored with instead, if it
    /// changes (an interrupting message waits behind the turn it stops, as a follow-up), and the generation
    /// of the running turn it asks to stop (so that the runner stops that turn and never the
    /// message's own, should the old one end first).
    ///
    /// Busy means a turn is running, or an input is waiting for the runner to start one
    /// (`turnStatus` `running`): a `reject` refuses both. Only a turn that is running can be
    /// interrupted; behind a turn still to start, an interrupting message simply queues.
    pub(super) fn when_busy(
        &mut self,
        key: &SessionKey,
        row: &SessionRow,
        when: WhenBusy,
    ) -> Result<(Option<Behavior>, Option<u64>)> {
        let busy = row.turn_active || row.turn_status == super::TurnStatus::Running;
        if !busy {
            return Ok((None, None));
        }
        match when {
            WhenBusy::Enqueue => Ok((None, None)),
            WhenBusy::Reject => Err(Error::Conflict(
                "session_busy",
                "the session's turn is running; send the message again once it has ended, or \
                 with the busy policy enqueue or interrupt"
                    .into(),
            )),
            WhenBusy::Interrupt => {
                let stops = if row.turn_active {
                    self.append(
                        key,
                        &Event::InterruptRequested {
                            requested_at: clock::rfc3339(self.now),
                        },
                    )?;
                    Some(self.turn_generation(key)?)
                } else {
                    None
                };
                Ok((Some(Behavior::FollowUp), stops))
            }
        }
    }
}

impl Tx<'_> {
    /// The generation of the session's newest claimed turn.
    fn turn_generation(&self, key: &SessionKey) -> Result<u64> {
        let g: i64 = self
            .conn
            .prepare_cached("SELECT turn_generation FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| r.get(0))?;
        Ok(g.max(0) as u64)
    }
}
