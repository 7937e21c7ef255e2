//! The credential of a registered ACP agent calling back: the key sessiond issued it
//! (`x-agent-api-key`), turned into an actor confined to that agent. What that key may call is
//! `agentex::agent_keys`' table; the request's credential checks (`context`, `auth`) ask here
//! first, so this module depends on the core and that table only.

use actix_web::HttpRequest;
use actix_web::http::header;

use super::agentex::agent_keys::{self, Reach};
use sessiond_core::agentex::acp;
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::{Actor, Sessions};

/// The header an agent sends its issued key in (calls both ways).
pub const AGENT_KEY_HEADER: &str = "x-agent-api-key";

/// The actor of a callback carrying an issued key, if the request has one and no other
/// credential (`Authorization` wins when both are sent).
pub async fn callback_actor(sessions: &Sessions, req: &HttpRequest) -> Option<Result<Actor>> {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return None;
    }
    let key = req.headers().get(AGENT_KEY_HEADER)?;
    Some(
        async {
            let key = key.to_str().map_err(|_| Error::Unauthorized)?;
            let actor = acp::callback_actor(sessions, key).await?;
            if agent_keys::reach(req.method(), req.path()) == Reach::Forbidden {
                return Err(Error::Forbidden(
                    "an agent key reaches only its own agent's tasks and records \
                     (see the README's table of what an agent key may call)"
                        .into(),
                ));
            }
            Ok(actor)
        }
        .await,
    )
}
