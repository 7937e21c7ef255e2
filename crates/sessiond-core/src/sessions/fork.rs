//! Forking a session: a new session whose conversation is another's up to one of its events.
//!
//! The store copies the parent's timeline up to `atSeq` into the fork in one transaction
//! (`store::fork`), so the fork's history shows that conversation and a model engine's next turn
//! rebuilds exactly it from the fork's own timeline, with nothing of the parent after the fork
//! point. The parent is only read. The fork stays with the parent's agent, working directory,
//! tier and title, and records its lineage (a Session record's `parent`, kind `fork`, with the
//! fork point as `at_seq`).

use super::{Actor, MessageIn, Plan, Sessions, Submitted, images, new_prompt, session_plan};
use crate::error::{Error, Result};
use crate::store::fork::ForkPlan;
use crate::store::submit::ParentKind;

/// A fork request: the parent's event to fork at, and optionally a message for the fork to run.
#[derive(Debug, Clone)]
pub struct ForkIn {
    pub at_seq: u64,
    pub message: Option<MessageIn>,
}

/// A fork made: the new session's id and, when it was given a message, that input.
#[derive(Debug, Clone)]
pub struct ForkOut {
    pub session_id: String,
    pub submitted: Option<Submitted>,
}

impl Sessions {
    /// Forks `session_id` at event `at_seq` (see the module's doc). Another workspace's session
    /// is not found; a session run by a state machine cannot be forked (its machine state is not
    /// part of the conversation the copy carries).
    pub async fn fork(&self, actor: &Actor, session_id: &str, input: ForkIn) -> Result<ForkOut> {
        let parent = self.detail_row(actor, session_id).await?;
        if parent.requested_machine.is_some() {
            return Err(Error::invalid(
                "a session run by a state machine cannot be forked",
            ));
        }
        let plan = Plan {
            agent_id: parent.agent_id.clone(),
            cwd: parent.cwd.clone(),
            tier: parent.tier,
            created_by: None,
            mode: None,
            bind_default: false,
        };
        let mut plan = session_plan(actor, plan, parent.title.clone(), None);
        plan.parent = Some((ParentKind::Fork, parent.id.clone()));
        let first = match input.message {
            Some(mut m) => {
                let images = images::decode_all(&m.common.images)?;
                self.check_attachments(actor, &mut m.common)?;
                Some(new_prompt(
                    actor, m.prompt, m.behavior, m.tier, m.common, images,
                ))
            }
            None => None,
        };
        let forked = self
            .store
            .submit()
            .fork(ForkPlan {
                plan,
                parent_id: parent.id,
                at_seq: input.at_seq,
                first,
            })
            .await?;
        let submitted = match forked.first_seq {
            Some(seq) => Some(
                // The fork has no turn yet: its message starts one.
                self.delivered(forked.key.clone(), seq).await,
            ),
            None => None,
        };
        Ok(ForkOut {
            session_id: forked.key.id,
            submitted,
        })
    }
}
