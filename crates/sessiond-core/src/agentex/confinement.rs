//! Which agent an actor is confined to. A registered ACP agent calling back with its own key
//! (`x-agent-api-key`) is an actor of the `Agent` channel: every part of the agent platform asks
//! this one question before it shows or changes anything, so the rule lives in a module that
//! depends on nothing else of the platform.

use crate::sessions::Actor;

/// The agent an actor is confined to: a registered agent calling back sees only its own tasks.
pub fn confined_to(actor: &Actor) -> Option<&str> {
    match &actor.channel {
        crate::sessions::Channel::Agent { agent_id } => Some(agent_id),
        _ => None,
    }
}
