//! The one path every input a session takes goes through — a first prompt, a message, a message
//! to an agent's default session, an answer — whichever family sent it.
//!
//! 1. A `clientRequestId` the workspace already recorded is answered from what the first request
//!    recorded, on a read connection, before anything else about the request is resolved
//!    ([`Sessions::replayed`]).
//! 2. The store's unit records the input (and whatever the family links to it) in one
//!    transaction.
//! 3. A unit that lost the race for its `clientRequestId` to another writer is the retry it then
//!    is: the first request's result ([`Sessions::after_race`]).
//! 4. A fresh input is delivered to the runner, which answers whether a turn took it; a retried
//!    one reports where its input stands now. A message whose busy policy stops the running turn
//!    stops it only while it is still that turn.

use super::{Sessions, Submitted};
use crate::error::{Error, Result};
use crate::runner::Delivery;
use crate::store::inputs::Retry;
use crate::store::submit::{Submission, Submissions};
use crate::store::{self, SessionKey};

/// How a submission ended.
pub(super) enum Outcome<T> {
    /// The store's unit ran: the input is recorded (or the unit itself found the retry).
    Written {
        submitted: Submitted,
        /// The input made its session (a first message to an agent's default alias).
        created: bool,
        /// What the family linked to the input in its transaction.
        linked: T,
    },
    /// Another request with the same `clientRequestId` recorded the input first.
    Replayed(Submitted),
}

impl<T: Default> Outcome<T> {
    /// The submission and what was linked to it (nothing for a replay, which writes nothing).
    pub(super) fn into_linked(self) -> (Submitted, T) {
        match self {
            Outcome::Written {
                submitted, linked, ..
            } => (submitted, linked),
            Outcome::Replayed(submitted) => (submitted, T::default()),
        }
    }
}

impl Sessions {
    /// Step 1: the submission this request's `clientRequestId` already made, if any.
    pub(super) async fn replayed(&self, retry: Option<&Retry>) -> Result<Option<Submitted>> {
        match self.recorded(retry).await? {
            Some((key, seq)) => Ok(Some(self.replayed_submission(key, seq).await?)),
            None => Ok(None),
        }
    }

    /// The session and seq of the input this request's `clientRequestId` already recorded.
    pub(super) async fn recorded(
        &self,
        retry: Option<&Retry>,
    ) -> Result<Option<(SessionKey, u64)>> {
        match retry {
            Some(r) => Ok(self.store.inputs().replayed(r.clone()).await?),
            None => Ok(None),
        }
    }

    /// A fresh input that a unit of another operation wrote (a fork's prompt, the first prompt
    /// of a session opened for another family), delivered to the runner.
    pub(super) async fn delivered(&self, key: SessionKey, input_seq: u64) -> Submitted {
        let delivery = self.runner.deliver(key.clone(), false).await;
        Submitted {
            key,
            input_seq,
            fresh: true,
            delivery,
        }
    }

    /// Steps 2 to 4: runs `write`, the store's unit for the input, and delivers what it wrote.
    /// `follow_up` says whether the input waits for a running turn's end rather than steering it.
    ///
    /// When the runner has a slot free, it is held for the unit, which then claims the
    /// session's turn itself if none is active (the turn takes the input in the transaction that
    /// records it; see `store::claims::StartNow`); otherwise the runner is told afterwards.
    pub(super) async fn submit_input<T>(
        &self,
        retry: Option<Retry>,
        follow_up: bool,
        write: impl AsyncFnOnce(Submissions<'_>) -> store::Result<(Submission, T)>,
    ) -> Result<Outcome<T>> {
        let slot = self.runner.hold_slot().await;
        let submit = self
            .store
            .submit()
            .starting(slot.as_ref().map(|s| s.start_now()));
        let written = write(submit).await;
        // A turn claimed with the slot has taken it already; otherwise it is free again before
        // the runner is told of the input.
        drop(slot);
        let (sub, linked) = match written {
            Ok(done) => done,
            Err(e) => {
                let (key, seq) = self.after_race(retry, e.into()).await?;
                return Ok(Outcome::Replayed(self.replayed_submission(key, seq).await?));
            }
        };
        let delivery = if sub.started {
            Delivery::Accepted
        } else if sub.fresh {
            self.runner
                .deliver(sub.key.clone(), follow_up && sub.active)
                .await
        } else {
            self.replay_delivery(&sub.key, sub.seq).await?
        };
        let submitted = Submitted {
            key: sub.key,
            input_seq: sub.seq,
            fresh: sub.fresh,
            delivery,
        };
        if let Some(generation) = sub.stops {
            self.runner
                .interrupt_turn(submitted.key.clone(), generation);
        }
        Ok(Outcome::Written {
            submitted,
            created: sub.created,
            linked,
        })
    }

    /// A submission that lost the race for its `clientRequestId` to another writer (a uniqueness
    /// rule of the store, possible once writers do not take turns) is the retry it then is: the
    /// original's result. Any other error stands.
    async fn after_race(&self, retry: Option<Retry>, e: Error) -> Result<(SessionKey, u64)> {
        if let (Error::ConstraintRace(_), Some(r)) = (&e, retry)
            && let Some(found) = self.store.inputs().replayed(r).await?
        {
            return Ok(found);
        }
        Err(e)
    }

    /// A retried submission: nothing new was written, and it reports where its input stands.
    async fn replayed_submission(&self, key: SessionKey, input_seq: u64) -> Result<Submitted> {
        let delivery = self.replay_delivery(&key, input_seq).await?;
        Ok(Submitted {
            key,
            input_seq,
            fresh: false,
            delivery,
        })
    }

    /// The delivery a retried submission reports: the truth about its input now.
    async fn replay_delivery(&self, key: &SessionKey, input_seq: u64) -> Result<Delivery> {
        let delivered = self
            .store
            .log()
            .input_turn(key.pk, input_seq)
            .await?
            .is_some();
        Ok(if delivered {
            Delivery::Accepted
        } else {
            Delivery::Queued
        })
    }
}
