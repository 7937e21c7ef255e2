//! The push-notification config methods: `CreateTaskPushNotificationConfig` (a set: the same id
//! again replaces it), `GetTaskPushNotificationConfig`, `ListTaskPushNotificationConfigs`,
//! `DeleteTaskPushNotificationConfig`. A config's URL must be one `[policy]` `a2a_push_hosts`
//! allows; its token and credentials are sealed when stored and shown only in the create's
//! answer (reads show the scheme, never the secrets). Creating one starts the task's
//! deliveries (`push`).

use serde_json::{Value, json};

use super::error::{A2aError, A2aResult};
use super::push::{self, seal_context};
use super::{Server, task};
use crate::ids;
use crate::outbound::destination::{self, Purpose};
use crate::store::a2a_push::PushConfigRow;

const ID_MAX_CHARS: usize = 256;
const SECRET_MAX_CHARS: usize = 4096;

fn str_field<'a>(v: &'a Value, field: &str, max: usize) -> A2aResult<Option<&'a str>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s)),
        Some(_) => Err(A2aError::invalid_params(format!(
            "{field}: a string of at most {max} characters"
        ))),
    }
}

/// A config as reads show it: no token, no credentials.
fn view(task_id: &str, c: &PushConfigRow) -> Value {
    let mut v = json!({ "id": c.id, "taskId": task_id, "url": c.url });
    if let Some(scheme) = &c.auth_scheme {
        v["authentication"] = json!({ "scheme": scheme });
    }
    v
}

/// Records `config` (a `TaskPushNotificationConfig`) for the task `row` is, and starts
/// following the task from timeline seq `after`. The answer shows the config as given.
pub async fn put(
    server: &Server<'_>,
    row: &crate::store::SessionRow,
    config: &Value,
    after: u64,
) -> A2aResult<Value> {
    if !config.is_object() {
        return Err(A2aError::invalid_params("the config must be an object"));
    }
    let url = str_field(config, "url", destination::URL_MAX_CHARS)?
        .ok_or_else(|| A2aError::invalid_params("url: required"))?;
    destination::check(url, &server.sessions.config().policy, Purpose::A2aPush)
        .map_err(|e| A2aError::invalid_params(e.to_string()))?;
    let id = match str_field(config, "id", ID_MAX_CHARS)? {
        Some(id) => id.to_owned(),
        None => ids::new_id(),
    };
    let token = str_field(config, "token", SECRET_MAX_CHARS)?;
    let auth = config.get("authentication").filter(|a| !a.is_null());
    let (scheme, credentials) = match auth {
        None => (None, None),
        Some(a) if a.is_object() => (
            str_field(a, "scheme", 64)?.map(str::to_owned),
            str_field(a, "credentials", SECRET_MAX_CHARS)?,
        ),
        Some(_) => {
            return Err(A2aError::invalid_params(
                "authentication: an object with scheme and credentials",
            ));
        }
    };
    if credentials.is_some() && scheme.is_none() {
        return Err(A2aError::invalid_params(
            "authentication.scheme: required with credentials",
        ));
    }
    let seal = |secret: Option<&str>, what: &str| {
        secret
            .map(|s| {
                server
                    .sealer
                    .seal(s.as_bytes(), &seal_context(row.pk, &id, what))
            })
            .transpose()
    };
    let stored = PushConfigRow {
        session_pk: row.pk,
        id: id.clone(),
        url: url.to_owned(),
        token_sealed: seal(token, "token")?,
        auth_scheme: scheme.clone(),
        credentials_sealed: seal(credentials, "credentials")?,
        created_at: 0,
    };
    server.sessions.store().a2a_push().put(stored).await?;
    push::follow(server, row, after);
    let mut shown = json!({ "id": id, "taskId": row.id, "url": url });
    if let Some(token) = token {
        shown["token"] = json!(token);
    }
    if let Some(scheme) = scheme {
        shown["authentication"] = json!({ "scheme": scheme });
        if let Some(c) = credentials {
            shown["authentication"]["credentials"] = json!(c);
        }
    }
    Ok(shown)
}

fn task_id(params: &Value) -> &str {
    params.get("taskId").and_then(Value::as_str).unwrap_or("")
}

pub async fn create(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let row = task::find(server.sessions, server.actor, server.agent, task_id(params)).await?;
    put(server, &row, params, row.last_event_seq).await
}

pub async fn get(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let row = task::find(server.sessions, server.actor, server.agent, task_id(params)).await?;
    let id = params.get("id").and_then(Value::as_str).unwrap_or("");
    let configs = server.sessions.store().a2a_push().list(row.pk).await?;
    configs
        .iter()
        .find(|c| c.id == id)
        .map(|c| view(&row.id, c))
        .ok_or_else(|| A2aError::invalid_params(format!("id: the task has no config {id:?}")))
}

pub async fn list(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let row = task::find(server.sessions, server.actor, server.agent, task_id(params)).await?;
    let configs = server.sessions.store().a2a_push().list(row.pk).await?;
    let shown: Vec<Value> = configs.iter().map(|c| view(&row.id, c)).collect();
    Ok(json!({ "configs": shown, "nextPageToken": "" }))
}

pub async fn delete(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let row = task::find(server.sessions, server.actor, server.agent, task_id(params)).await?;
    let id = params.get("id").and_then(Value::as_str).unwrap_or("");
    if !server
        .sessions
        .store()
        .a2a_push()
        .delete(row.pk, id)
        .await?
    {
        return Err(A2aError::invalid_params(format!(
            "id: the task has no config {id:?}"
        )));
    }
    Ok(Value::Null)
}
