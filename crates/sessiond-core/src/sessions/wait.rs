//! Observing an input until the terminal it caused is durable (R43–R51).
//!
//! An input's terminal is the first terminal (`complete`, `ask`, `interrupted`, `sleep`) after the
//! `turn_started` of the turn that took it — for a steer that joined a running turn, that turn's
//! terminal. Waiting subscribes to the bus first and then checks the store, so a terminal committed
//! in between is never missed; giving up at the deadline only ends the observation.

use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::Sessions;
use crate::error::{Error, Result};
use crate::store::{SessionKey, StoredEvent};
use crate::timeline::{TERMINAL_TYPES, is_terminal_type};

/// What a `/wait` route answers.
pub enum WaitOutcome {
    /// 200: the terminal and the session's cwd at that time.
    Terminal {
        event: StoredEvent,
        cwd: Option<String>,
    },
    /// 202: the deadline passed first.
    Pending,
}

impl Sessions {
    pub async fn wait_for_terminal(&self, key: &SessionKey, input_seq: u64) -> Result<WaitOutcome> {
        let deadline = Instant::now() + Duration::from_millis(self.cfg.runner.wait_deadline_ms);
        // A full subscriber table only degrades the observation to polling.
        let mut sub = self.store.bus().observe(&key.id).ok();
        loop {
            if let Some(found) = self.find_terminal(key, input_seq).await? {
                return Ok(found);
            }
            let woke = match sub.as_mut() {
                Some(sub) => loop {
                    match tokio::time::timeout_at(deadline, sub.rx.recv()).await {
                        Err(_) => break false,
                        Ok(Ok(frame)) if is_terminal_type(&frame.event_type) => break true,
                        Ok(Ok(_)) => continue,
                        Ok(Err(RecvError::Lagged(_))) => break true,
                        Ok(Err(RecvError::Closed)) => return Err(Error::NotFound),
                    }
                },
                None => {
                    let step = Instant::now() + Duration::from_millis(100);
                    tokio::time::sleep_until(step.min(deadline)).await;
                    Instant::now() < deadline
                }
            };
            if !woke {
                // One last look: the terminal may have landed just before the deadline.
                return Ok(self
                    .find_terminal(key, input_seq)
                    .await?
                    .unwrap_or(WaitOutcome::Pending));
            }
        }
    }

    async fn find_terminal(&self, key: &SessionKey, input_seq: u64) -> Result<Option<WaitOutcome>> {
        Ok(self
            .store
            .log()
            .terminal_of_input(key.pk, input_seq, &TERMINAL_TYPES)
            .await?
            .map(|(event, cwd)| WaitOutcome::Terminal { event, cwd }))
    }
}
