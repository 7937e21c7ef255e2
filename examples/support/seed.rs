//! What the benchmark commands that seed their own data dir share: the owner and API key a served
//! bench authenticates with, and an HTTP client that sends that key (included with `#[path]`; not
//! a target itself, and not every command uses every piece).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use sessiond::store::Store;
use sessiond::store::identity::{FirstRole, Role};

/// The default workspace's owner, its root agent and an API key with the `sessions` scope: what
/// `sessiond user create` and `sessiond token create` make.
pub struct Owner {
    pub workspace: String,
    pub agent: String,
    pub user: String,
    pub api_key: String,
}

pub fn owner(store: &Store) -> Result<Owner, String> {
    let phc = sessiond::auth::password::hash("bench-password-123").map_err(|e| e.to_string())?;
    let e = |e: sessiond::store::Error| e.to_string();
    let directory = store.directory();
    let workspace = directory
        .ensure_workspace_blocking(sessiond::store::DEFAULT_WORKSPACE, "Default")
        .map_err(e)?;
    let agent = directory
        .agent_by_slug_blocking(&workspace, "root")
        .map_err(e)?
        .ok_or("the workspace has no root agent")?
        .id;
    let (user, _) = store
        .identity()
        .create_user_blocking(
            "bench@bench.local",
            &phc,
            &workspace,
            FirstRole::Given(Role::Owner),
        )
        .map_err(e)?;
    let (key, row) = sessiond::auth::mint_key("bench", &workspace, &["sessions".to_owned()], None)
        .map_err(|e| e.to_string())?;
    store
        .identity()
        .insert_user_key_blocking(&user, row)
        .map_err(e)?;
    Ok(Owner {
        workspace,
        agent,
        user,
        api_key: key.key,
    })
}

/// A client for a served bench: no proxy, Nagle off, `Authorization: Bearer KEY` when given.
pub fn client(api_key: Option<&str>, timeout: Duration) -> Result<reqwest::Client, String> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = api_key {
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|e| format!("authorization header: {e}"))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    sessiond::tls::client_builder()
        .no_proxy()
        .tcp_nodelay(true)
        .default_headers(headers)
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())
}

/// Waits until the server at `base` answers `GET /healthz` with success, at most `limit`.
pub async fn wait_healthy(c: &reqwest::Client, base: &str, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(r) = c.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "did not become healthy within {} s",
                limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Appends and indexes `texts` as prompts of one session, in one write job (the rows they make
/// are the store's own: `POST …/message` writes each with the same statements).
pub fn write_prompts(
    store: &Store,
    key: &sessiond::store::SessionKey,
    texts: impl IntoIterator<Item = String>,
) -> sessiond::store::Result<()> {
    let prompts = texts
        .into_iter()
        .map(|text| (prompt_event(text.clone()), text))
        .collect();
    store.seed().prompts_blocking(key, prompts)
}

/// A user's `prompt_submitted` message, as `POST …/message` appends it.
pub fn prompt_event(prompt: String) -> sessiond::timeline::Event {
    sessiond::timeline::Event::PromptSubmitted {
        prompt,
        input_kind: sessiond::timeline::InputKind::Message,
        behavior: sessiond::timeline::Behavior::FollowUp,
        sender: sessiond::timeline::Sender::User {
            user_id: "bench".into(),
        },
        client_request_id: None,
        images: Vec::new(),
        attachments: Vec::new(),
    }
}
