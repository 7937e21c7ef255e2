//! The sessions core as the engines' session tools (`start_session`, `message_session`) use it:
//! the turn's session acts on its own behalf, so what it sends is attributed to it (R7) and
//! whatever it starts is its child.

use async_trait::async_trait;

use super::{Actor, Channel, CreateIn, InputCommon, MessageIn, Sessions};
use crate::engine::{ChildSession, Delivered, Origin, SessionMessage, SessionOps};
use crate::error::Result;
use crate::timeline::{Behavior, Sender};

fn actor(origin: &Origin) -> Actor {
    Actor {
        workspace_id: origin.workspace_id.clone(),
        workspace_slug: origin.workspace_slug.clone(),
        user_id: origin.user_id.clone(),
        sender: Sender::Session {
            session_id: origin.session_id.clone(),
        },
        channel: Channel::Runner,
    }
}

#[async_trait]
impl SessionOps for Sessions {
    fn max_prompt_chars(&self) -> usize {
        self.config().limits.max_prompt_chars
    }

    async fn start_session(&self, origin: &Origin, child: ChildSession) -> Result<Delivered> {
        let created = self
            .create(
                &actor(origin),
                CreateIn {
                    prompt: child.prompt,
                    agent_id: None,
                    cwd: child.cwd,
                    tier: child.tier,
                    behavior: Behavior::Steer,
                    mode: None,
                    common: InputCommon::default(),
                },
                Some(origin.session_id.clone()),
            )
            .await?;
        Ok(Delivered {
            session_id: created.key.id,
            delivery: created.delivery.as_str(),
        })
    }

    async fn message_session(&self, origin: &Origin, message: SessionMessage) -> Result<Delivered> {
        let sent = self
            .message(
                &actor(origin),
                &message.session_id,
                MessageIn {
                    prompt: message.prompt,
                    tier: None,
                    behavior: message.behavior,
                    common: InputCommon {
                        source_session_id: Some(origin.session_id.clone()),
                        ..InputCommon::default()
                    },
                    busy: super::busy::BusyPolicy::Enqueue,
                },
            )
            .await?;
        Ok(Delivered {
            session_id: sent.key.id,
            delivery: sent.delivery.as_str(),
        })
    }
}
