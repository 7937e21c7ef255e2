//! Registering a webhook trigger: the checks of what a client sends, the secret (given or
//! generated), sealed before it is stored, and the URL to paste into GitHub or Slack.

use serde_json::{Value, json};

use super::{source, webhook_path};
use crate::agentex::agents as agent_view;
use crate::error::{Error, Result};
use crate::secret::{self, Sealer};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::AgentKey;
use crate::store::webhooks::{NewWebhookTrigger, WebhookSource};
use crate::timeline::Sender;

/// Shortest signing secret taken: a secret an attacker could guess signs any delivery.
pub const SECRET_MIN_CHARS: usize = 16;
const SECRET_MAX_CHARS: usize = 1024;
const NAME_MAX_CHARS: usize = 256;
const FORWARD_PATH_MAX_CHARS: usize = 256;
const BASE_URL_MAX_CHARS: usize = 2048;

/// What a client sends (`CreateWebhookTriggerRequest`).
pub struct NewTriggerIn {
    pub agent_name: String,
    pub forward_path: String,
    pub name: String,
    pub base_url: Option<String>,
    pub secret: Option<String>,
    pub source: Option<String>,
}

/// A forward path: URL path segments of unreserved characters, without `.`/`..` segments
/// (a leading `/` is dropped), as the ingress will compare it.
fn forward_path(raw: &str) -> Result<String> {
    let path = raw.strip_prefix('/').unwrap_or(raw);
    let segment_ok = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
    };
    if path.is_empty() || path.len() > FORWARD_PATH_MAX_CHARS || !path.split('/').all(segment_ok) {
        return Err(Error::invalid(format!(
            "forward_path: 1 to {FORWARD_PATH_MAX_CHARS} characters of path segments \
             (a-z, A-Z, 0-9, '-', '_', '.', '~') joined by '/', e.g. github-pr/config-1"
        )));
    }
    Ok(path.to_owned())
}

fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty()
        || name.chars().count() > NAME_MAX_CHARS
        || name.chars().any(char::is_control)
    {
        return Err(Error::invalid(format!(
            "name: 1 to {NAME_MAX_CHARS} characters, no control characters (a repository's \
             full_name for github, the app's api_app_id for slack)"
        )));
    }
    Ok(())
}

/// The secret deliveries are signed with: the one given, or (GitHub only) a new one.
fn signing_secret(source: WebhookSource, given: Option<String>) -> Result<String> {
    let Some(given) = given else {
        return match source {
            WebhookSource::Github => {
                let mut bytes = [0u8; 32];
                getrandom::fill(&mut bytes)
                    .map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
                Ok(secret::hex(&bytes))
            }
            WebhookSource::Slack => Err(Error::invalid(
                "secret: required for slack: the Slack app's Signing Secret (sessiond cannot make \
                 one Slack signs with)",
            )),
        };
    };
    let n = given.chars().count();
    if !(SECRET_MIN_CHARS..=SECRET_MAX_CHARS).contains(&n) || given.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "secret: {SECRET_MIN_CHARS} to {SECRET_MAX_CHARS} characters, no control characters \
             (omit it for github to have one made)"
        )));
    }
    Ok(given)
}

/// The public base URL of the agent platform API a trigger's URL is shown under: the one given
/// (`http(s)://…`, no query or fragment), else `default` (the server's `public_url` or bound
/// address, with `/agentex`).
fn base_url(given: Option<String>, default: String) -> Result<String> {
    let Some(url) = given.filter(|u| !u.is_empty()) else {
        return Ok(default);
    };
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= BASE_URL_MAX_CHARS
        && !url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#');
    if !ok {
        return Err(Error::invalid(format!(
            "base_url: an http(s) URL of at most {BASE_URL_MAX_CHARS} characters without query \
             or fragment (the agent platform API's public base, e.g. https://host/agentex)"
        )));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Registers a trigger for an agent of the actor's workspace and answers the contract's
/// `CreateWebhookTriggerResponse`, with the secret (the only time it is shown).
/// `default_base` is the agent platform API's own URL.
pub async fn create(
    sessions: &Sessions,
    sealer: &Sealer,
    actor: &Actor,
    t: NewTriggerIn,
    default_base: String,
) -> Result<Value> {
    if crate::agentex::confinement::confined_to(actor).is_some() {
        return Err(Error::Forbidden(
            "an agent key cannot register webhook triggers".into(),
        ));
    }
    let src = match t.source.as_deref() {
        None => WebhookSource::Github,
        Some(name) => source(name).ok_or_else(|| {
            Error::invalid(format!(
                "source: must be \"github\" or \"slack\", not {name:?} (the sources whose \
                 signatures sessiond verifies)"
            ))
        })?,
    };
    let path = forward_path(&t.forward_path)?;
    check_name(&t.name)?;
    let signing = signing_secret(src, t.secret)?;
    let base = base_url(t.base_url, default_base)?;
    let agent = agent_view::find(sessions, actor, AgentKey::Name(&t.agent_name)).await?;
    let id = crate::ids::new_id();
    let sealed = sealer.seal(signing.as_bytes(), &id)?;
    sessions
        .store()
        .webhooks()
        .create(NewWebhookTrigger {
            id: id.clone(),
            workspace_id: actor.workspace_id.clone(),
            agent_id: agent.id.clone(),
            source: src,
            name: t.name.clone(),
            forward_path: path.clone(),
            secret_sealed: sealed,
            created_by: actor.user_id.clone(),
            creator_app: matches!(actor.sender, Sender::App { .. }),
        })
        .await?;
    tracing::info!(agent = %agent.id, trigger = %id, source = src.name(), "a webhook trigger was registered");
    let webhook_path = webhook_path(&agent.slug, &path);
    Ok(json!({
        "key_id": id,
        "agent_name": agent.slug,
        "source": src.name(),
        "name": t.name,
        "secret": signing,
        "webhook_url": format!("{base}{webhook_path}"),
        "webhook_path": webhook_path,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_paths_are_plain_url_segments() {
        assert_eq!(forward_path("github-pr/cfg-9").unwrap(), "github-pr/cfg-9");
        assert_eq!(forward_path("/slack").unwrap(), "slack");
        for bad in [
            "", "/", "a//b", "a/", "../x", "a/./b", "a b", "a?b", "a%2fb", "é",
        ] {
            let e = forward_path(bad).unwrap_err();
            assert!(e.to_string().starts_with("forward_path:"), "{bad:?}: {e}");
        }
        assert!(forward_path(&"a".repeat(257)).is_err());
    }

    #[test]
    fn secrets_are_given_or_made_for_github_only() {
        let made = signing_secret(WebhookSource::Github, None).unwrap();
        assert_eq!(made.len(), 64);
        assert_ne!(made, signing_secret(WebhookSource::Github, None).unwrap());
        let e = signing_secret(WebhookSource::Slack, None).unwrap_err();
        assert!(
            e.to_string().starts_with("secret: required for slack"),
            "{e}"
        );
        let e = signing_secret(WebhookSource::Github, Some("short".into())).unwrap_err();
        assert!(e.to_string().starts_with("secret:"), "{e}");
        assert!(
            !e.to_string().contains("short"),
            "the secret is never echoed: {e}"
        );
        let given = "0123456789abcdef0123".to_owned();
        assert_eq!(
            signing_secret(WebhookSource::Slack, Some(given.clone())).unwrap(),
            given
        );
    }

    #[test]
    fn base_urls_are_http_without_query() {
        let d = || "http://127.0.0.1:1/agentex".to_owned();
        assert_eq!(base_url(None, d()).unwrap(), d());
        assert_eq!(base_url(Some(String::new()), d()).unwrap(), d());
        assert_eq!(
            base_url(Some("https://x.example/agentex/".into()), d()).unwrap(),
            "https://x.example/agentex"
        );
        for bad in [
            "ftp://x",
            "https://x/?a=1",
            "https://x/#f",
            "https://x y",
            "x",
        ] {
            assert!(base_url(Some(bad.into()), d()).is_err(), "{bad}");
        }
    }
}
