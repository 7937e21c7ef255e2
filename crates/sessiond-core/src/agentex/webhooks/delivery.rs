//! A delivery to the forward ingress: its triggers found by URL and the name its payload gives,
//! its signature checked against each, and, once one verifies, the task it starts.
//!
//! What a verified delivery becomes:
//!
//! | delivery | answer |
//! |---|---|
//! | Slack `url_verification` | its `challenge` (Slack checks the URL with it) |
//! | GitHub `ping` | nothing started (GitHub sends it when the webhook is made) |
//! | anything else | a task of the trigger's agent, the payload (JSON text) its first message |
//!
//! The task is named `webhook:{source}:{delivery id}` (GitHub's `X-GitHub-Delivery`, Slack's
//! `event_id`, else its `trigger_id`), so a redelivery finds it rather than starting another;
//! its params hold `webhook` (source, trigger, event, delivery). Its session's record has `source`
//! `mention`, `webhook_type` (the seed's name for the event, when it has one), `webhook_id` (the
//! delivery's id) and `attribution` (`github_user` with the sender's account, `slack_user` with
//! the user's id).

use serde_json::{Map, Value, json};

use super::signature::{self, SignatureHeaders, Signed};
use super::{SEALING_PURPOSE, webhook_path};
use crate::agentex::acp::Platform;
use crate::agentex::agents as agent_view;
use crate::agentex::tasks::{self, Destination, NewTask, Prompt, Target};
use crate::error::{Error, Result};
use crate::sessions::{Actor, Channel, Sessions, WebhookOrigin};
use crate::store::agentex::{AgentKey, FinalStatus, TaskKey, TaskRow};
use crate::store::webhooks::{WebhookSource, WebhookTriggerRow};
use crate::timeline::Sender;

/// What every delivery that verifies against no trigger is told: an unknown agent, a URL or
/// name without a trigger and a wrong signature alike.
const UNVERIFIED: &str = "the delivery's signature does not verify against a webhook trigger of \
    this URL (check the secret, the URL and, for GitHub, the repository the trigger names)";

/// A request to the forward ingress.
pub struct Incoming<'a> {
    pub agent_name: &'a str,
    pub path: &'a str,
    pub signature: SignatureHeaders<'a>,
    /// GitHub's `X-GitHub-Event` and `X-GitHub-Delivery`.
    pub github_event: Option<&'a str>,
    pub github_delivery: Option<&'a str>,
    /// The body is `application/x-www-form-urlencoded` (GitHub's form deliveries, Slack's
    /// commands and interactions), else JSON.
    pub form: bool,
    pub body: &'a [u8],
}

/// What a verified delivery did.
pub enum Outcome {
    /// Slack's `url_verification`: its challenge, to answer.
    Challenge(String),
    /// GitHub's `ping`: nothing to start.
    Ping,
    /// The delivery's task, and whether this delivery created it (a redelivery finds it).
    Task { task: Box<TaskRow>, created: bool },
}

/// The payload as a JSON object: the body, or a form's `payload` field, or the form itself.
fn payload(body: &[u8], form: bool) -> Result<Map<String, Value>> {
    let parsed = if form {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|_| Error::invalid("body: a malformed form"))?;
        match pairs.iter().find(|(k, _)| k == "payload") {
            Some((_, p)) => serde_json::from_str::<Value>(p)
                .map_err(|e| Error::invalid(format!("body: payload: malformed JSON ({e})")))?,
            None => Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect(),
            ),
        }
    } else {
        serde_json::from_slice::<Value>(body)
            .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))?
    };
    match parsed {
        Value::Object(map) => Ok(map),
        _ => Err(Error::invalid("body: a webhook payload is a JSON object")),
    }
}

fn text_at<'v>(v: &'v Map<String, Value>, path: &[&str]) -> Option<&'v str> {
    let (last, parents) = path.split_last()?;
    let mut at = v;
    for key in parents {
        at = at.get(*key)?.as_object()?;
    }
    at.get(*last)?.as_str()
}

/// The name a payload is matched on: a GitHub repository's `full_name`, a Slack app's
/// `api_app_id` (`None`: the payload names none, and every trigger of the URL is tried).
fn lookup_name(source: WebhookSource, p: &Map<String, Value>) -> Option<&str> {
    match source {
        WebhookSource::Github => text_at(p, &["repository", "full_name"]),
        WebhookSource::Slack => text_at(p, &["api_app_id"]),
    }
    .filter(|n| !n.is_empty())
}

/// A token from outside kept only when it is short and plain (ids, event names).
fn token(v: Option<&str>) -> Option<String> {
    v.filter(|t| {
        (1..=128).contains(&t.len())
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    })
    .map(str::to_owned)
}

/// The trigger whose secret signed the delivery, if one of `candidates` did.
fn verified<'t>(
    signed: &Signed,
    body: &[u8],
    candidates: &'t [WebhookTriggerRow],
    platform: &Platform,
) -> Option<&'t WebhookTriggerRow> {
    let sealer = platform.keys().sealer(SEALING_PURPOSE);
    if candidates.is_empty() {
        // The same work as for a trigger, so that timing says nothing of which URLs have one.
        let _ = signed.verifies(b"no trigger has this URL", body);
        return None;
    }
    candidates
        .iter()
        .find(|t| match sealer.open(&t.secret_sealed, &t.id) {
            Some(secret) => signed.verifies(&secret, body),
            None => {
                tracing::warn!(
                    trigger = %t.id,
                    "a webhook trigger's secret does not open with this data dir's secret"
                );
                false
            }
        })
}

/// The seed's `webhook_type` of a delivery, the event it names, and its id.
struct Event {
    name: String,
    webhook_type: Option<&'static str>,
    delivery_id: Option<String>,
}

fn github_event(header: Option<&str>, delivery: Option<&str>, p: &Map<String, Value>) -> Event {
    let name = token(header).unwrap_or_else(|| "unknown".into());
    let on_pull_request = p
        .get("issue")
        .and_then(|i| i.get("pull_request"))
        .is_some_and(|pr| !pr.is_null());
    let webhook_type = match name.as_str() {
        "issues" => Some("github.issue"),
        "issue_comment" if on_pull_request => Some("github.pull_request_comment"),
        "issue_comment" => Some("github.issue_comment"),
        "push" => Some("github.push"),
        "pull_request" => Some("github.pull_request"),
        "pull_request_review" => Some("github.pull_request_review"),
        "pull_request_review_comment" => Some("github.pull_request_review_comment"),
        _ => None,
    };
    Event {
        name,
        webhook_type,
        delivery_id: token(delivery),
    }
}

fn slack_event(p: &Map<String, Value>) -> Event {
    let inner = text_at(p, &["event", "type"]);
    let name = token(inner.or_else(|| text_at(p, &["type"])))
        .or_else(|| p.get("command").map(|_| "command".to_owned()))
        .unwrap_or_else(|| "unknown".into());
    let webhook_type = match inner {
        Some("app_mention") => Some("slack.app_mention"),
        Some("message") => Some("slack.message"),
        Some("channel_created") => Some("slack.channel_created"),
        _ => None,
    };
    Event {
        name,
        webhook_type,
        delivery_id: token(text_at(p, &["event_id"]).or_else(|| text_at(p, &["trigger_id"]))),
    }
}

/// Who caused the delivery: `(type, id)` and, for GitHub, the account as the record shows it.
fn attribution(
    source: WebhookSource,
    p: &Map<String, Value>,
) -> (Option<(&'static str, String)>, Option<String>) {
    match source {
        WebhookSource::Github => {
            let Some(sender) = p.get("sender").and_then(Value::as_object) else {
                return (None, None);
            };
            let Some(login) = sender.get("login").and_then(Value::as_str) else {
                return (None, None);
            };
            let user = match (
                sender.get("id").and_then(Value::as_i64),
                sender.get("type").and_then(Value::as_str),
                sender.get("avatar_url").and_then(Value::as_str),
            ) {
                (
                    Some(id),
                    Some(kind @ ("User" | "Organization" | "Bot" | "Mannequin")),
                    Some(a),
                ) => Some(
                    json!({"id": id, "login": login, "type": kind, "avatar_url": a}).to_string(),
                ),
                _ => None,
            };
            (Some(("github_user", login.to_owned())), user)
        }
        WebhookSource::Slack => {
            let id = text_at(p, &["event", "user"])
                .or_else(|| text_at(p, &["user_id"]))
                .or_else(|| text_at(p, &["user", "id"]));
            (id.map(|id| ("slack_user", id.to_owned())), None)
        }
    }
}

/// Checks a delivery and does what it asks (see the module table). 401 `invalid_signature` for
/// an unsigned or stale one and for one that verifies against no trigger; nothing is written
/// before a signature verifies.
pub async fn receive(
    sessions: &Sessions,
    platform: &Platform,
    d: Incoming<'_>,
    now_secs: i64,
) -> Result<Outcome> {
    let signed = signature::signed(&d.signature, now_secs)?;
    let source = signed.source;
    let p = payload(d.body, d.form)?;
    let candidates = sessions
        .store()
        .webhooks()
        .candidates(d.agent_name, source, d.path, lookup_name(source, &p))
        .await?;
    let trigger = verified(&signed, d.body, &candidates, platform)
        .ok_or_else(|| Error::SignatureRefused(UNVERIFIED.into()))?;
    let event = match source {
        WebhookSource::Github => github_event(d.github_event, d.github_delivery, &p),
        WebhookSource::Slack => slack_event(&p),
    };
    if source == WebhookSource::Slack && text_at(&p, &["type"]) == Some("url_verification") {
        let challenge = text_at(&p, &["challenge"])
            .ok_or_else(|| Error::invalid("body: url_verification without its challenge"))?;
        return Ok(Outcome::Challenge(challenge.to_owned()));
    }
    if source == WebhookSource::Github && event.name == "ping" {
        return Ok(Outcome::Ping);
    }
    let (attribution, attribution_user) = attribution(source, &p);
    let origin = WebhookOrigin {
        webhook_type: event.webhook_type,
        webhook_id: event.delivery_id.clone(),
        attribution,
        attribution_user,
    };
    let actor = Actor {
        workspace_id: trigger.workspace_id.clone(),
        workspace_slug: trigger.workspace_slug.clone(),
        user_id: trigger.created_by.clone(),
        sender: if trigger.creator_app {
            Sender::App {
                app_id: trigger.created_by.clone(),
            }
        } else {
            Sender::User {
                user_id: trigger.created_by.clone(),
            }
        },
        channel: Channel::Webhook(Box::new(origin)),
    };
    let text = if d.form {
        Value::Object(p.clone()).to_string()
    } else {
        String::from_utf8_lossy(d.body).into_owned()
    };
    let mut params = Map::new();
    params.insert(
        "webhook".into(),
        json!({
            "source": source.name(),
            "trigger_id": trigger.id,
            "name": trigger.name,
            "webhook_path": webhook_path(d.agent_name, &trigger.forward_path),
            "event": event.name,
            "delivery_id": event.delivery_id,
            "webhook_type": event.webhook_type,
        }),
    );
    let task = NewTask {
        name: event
            .delivery_id
            .as_ref()
            .map(|id| format!("webhook:{}:{id}", source.name())),
        params: Some(params),
        task_metadata: None,
    };
    tracing::info!(
        trigger = %trigger.id,
        source = source.name(),
        event = %event.name,
        "a webhook delivery verified"
    );
    start(sessions, platform, &actor, &trigger.agent_id, task, text).await
}

/// Opens the delivery's task with the payload as its first message. An async ACP agent is told
/// of its new task first (as for `message/send`); a task the agent refuses fails.
async fn start(
    sessions: &Sessions,
    platform: &Platform,
    actor: &Actor,
    agent_id: &str,
    task: NewTask,
    text: String,
) -> Result<Outcome> {
    let agent = agent_view::find(sessions, actor, AgentKey::Id(agent_id)).await?;
    let target = Target {
        agent: &agent,
        deployment: None,
    };
    let prompt = Prompt {
        text,
        attachments: Vec::new(),
        busy: crate::sessions::busy::BusyPolicy::Enqueue,
    };
    let name = task.name.clone();
    if crate::agentex::agents::is_async(&agent) {
        let id = crate::ids::new_id();
        let (row, created, _) =
            tasks::get_or_create(sessions, actor, target, task, None, id).await?;
        if !created {
            return Ok(Outcome::Task {
                task: Box::new(row),
                created: false,
            });
        }
        if let Err(e) = platform.task_created(&agent, &row).await {
            let reason = format!("the agent did not accept the task: {e}");
            tasks::finish(
                sessions,
                actor,
                &row,
                FinalStatus::Failed,
                Some(reason),
                false,
            )
            .await?;
            return Err(e);
        }
        let to = Destination::Existing(Box::new(row.clone()));
        tasks::send(sessions, actor, target, to, None, None, prompt).await?;
        return Ok(Outcome::Task {
            task: Box::new(row),
            created: true,
        });
    }
    let to = Destination::New(crate::ids::new_id());
    match tasks::send(
        sessions,
        actor,
        target,
        to,
        name.clone(),
        task.params,
        prompt,
    )
    .await?
    {
        Some((row, _)) => Ok(Outcome::Task {
            task: Box::new(row),
            created: true,
        }),
        // A task of that name exists: the delivery came before.
        None => {
            let name = name.ok_or_else(|| Error::Internal("an unnamed task was found".into()))?;
            let task = tasks::find(sessions, actor, TaskKey::Name(&name)).await?;
            Ok(Outcome::Task {
                task: Box::new(task),
                created: false,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_json_or_forms() {
        let p = payload(br#"{"repository": {"full_name": "acme/widgets"}}"#, false).unwrap();
        assert_eq!(lookup_name(WebhookSource::Github, &p), Some("acme/widgets"));
        let p = payload(b"payload=%7B%22api_app_id%22%3A%22A1%22%7D", true).unwrap();
        assert_eq!(lookup_name(WebhookSource::Slack, &p), Some("A1"));
        let p = payload(b"command=%2Fask&api_app_id=A2&user_id=U9", true).unwrap();
        assert_eq!(lookup_name(WebhookSource::Slack, &p), Some("A2"));
        assert_eq!(slack_event(&p).name, "command");
        assert_eq!(
            attribution(WebhookSource::Slack, &p).0,
            Some(("slack_user", "U9".into()))
        );
        for bad in [&b"[1]"[..], b"not json", b""] {
            assert!(payload(bad, false).is_err());
        }
        assert_eq!(lookup_name(WebhookSource::Github, &Map::new()), None);
    }

    #[test]
    fn events_get_the_seeds_webhook_types() {
        let comment_on_pr =
            payload(br#"{"issue": {"pull_request": {"url": "u"}}}"#, false).unwrap();
        let e = github_event(Some("issue_comment"), Some("d-1"), &comment_on_pr);
        assert_eq!(e.webhook_type, Some("github.pull_request_comment"));
        assert_eq!(e.delivery_id.as_deref(), Some("d-1"));
        let e = github_event(Some("issue_comment"), None, &Map::new());
        assert_eq!(e.webhook_type, Some("github.issue_comment"));
        let e = github_event(Some("release"), Some("bad id!"), &Map::new());
        assert_eq!((e.webhook_type, e.delivery_id), (None, None));
        let p = payload(
            br#"{"type": "event_callback", "event_id": "Ev1", "event": {"type": "app_mention", "user": "U1"}}"#,
            false,
        )
        .unwrap();
        let e = slack_event(&p);
        assert_eq!(
            (e.name.as_str(), e.webhook_type),
            ("app_mention", Some("slack.app_mention"))
        );
        assert_eq!(e.delivery_id.as_deref(), Some("Ev1"));
    }

    #[test]
    fn github_senders_become_the_records_account() {
        let p = payload(
            br#"{"sender": {"login": "octocat", "id": 1, "type": "User", "avatar_url": "https://a/1"}}"#,
            false,
        )
        .unwrap();
        let (who, user) = attribution(WebhookSource::Github, &p);
        assert_eq!(who, Some(("github_user", "octocat".into())));
        let user: Value = serde_json::from_str(&user.unwrap()).unwrap();
        assert_eq!(
            user,
            json!({"id": 1, "login": "octocat", "type": "User", "avatar_url": "https://a/1"})
        );
        let p = payload(
            br#"{"sender": {"login": "x", "id": 1, "type": "Robot"}}"#,
            false,
        )
        .unwrap();
        let (who, user) = attribution(WebhookSource::Github, &p);
        assert_eq!((who.map(|w| w.1), user), (Some("x".into()), None));
    }
}
