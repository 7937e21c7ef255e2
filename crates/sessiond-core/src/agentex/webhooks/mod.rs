//! Webhook triggers: GitHub and Slack deliveries that start tasks of an agent.
//!
//! - **A trigger** (`triggers.rs`, `POST /agent_api_keys/webhook-trigger`) registers a signing
//!   secret for an agent: GitHub's webhook secret (generated when none is given) or a Slack app's
//!   Signing Secret, `name` (what a delivery is matched on: a repository's `full_name`, a Slack
//!   app's `api_app_id`) and `forward_path`, the tail of its URL,
//!   `/agentex/agents/forward/name/{agent}/{forward_path}`. HMAC verification needs the secret
//!   whole, so it is stored sealed ([`crate::secret::Sealer`], keyed from the data dir's secret
//!   like the ACP agents' keys, bound to the trigger's id) and shown once, in the answer.
//! - **A delivery** (`delivery.rs`, the forward ingress) carries no credential: its signature is
//!   its credential (`signature.rs`: GitHub's `X-Hub-Signature-256`, Slack's `X-Slack-Signature`
//!   v0 within five minutes of `X-Slack-Request-Timestamp`). Its triggers are found by the URL
//!   (agent name and forward path, in any workspace) and the name the payload gives, and the
//!   signature is checked against each (constant-time); an unknown agent, a path or name without
//!   a trigger and a wrong signature are one answer, so the ingress says nothing of which agents
//!   exist. A verified delivery starts a task of the trigger's agent, acting as the trigger's
//!   creator on the webhook channel, with the payload as its first message; a registered ACP
//!   agent gets the turn like any other task's. A delivery's id names its task, so a redelivery
//!   finds the task it started instead of starting another.

pub mod delivery;
pub mod signature;
pub mod triggers;

use crate::store::webhooks::WebhookSource;

/// What the data dir's secret is derived into for sealing the triggers' secrets.
pub const SEALING_PURPOSE: &str = "webhook trigger secrets";

/// The forward ingress's path of a trigger, relative to `/agentex` (the contract's
/// `webhook_path`).
pub fn webhook_path(agent_name: &str, forward_path: &str) -> String {
    format!("/agents/forward/name/{agent_name}/{forward_path}")
}

/// A source by the name the contract gives it (`internal` and `external` are API keys of the
/// contract's own, not webhook sources).
pub fn source(name: &str) -> Option<WebhookSource> {
    match name {
        "github" => Some(WebhookSource::Github),
        "slack" => Some(WebhookSource::Slack),
        _ => None,
    }
}
