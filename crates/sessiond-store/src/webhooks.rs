//! Webhook triggers (migration 0016): a GitHub or Slack signing secret registered for an agent,
//! kept sealed (the store never sees it in the clear), and the lookup of a delivery's triggers
//! by its URL — the agent's name and the forward path — in every workspace at once, since a
//! delivery carries no credential of its own.

use super::Tx;
use super::sql::{Db, Value as SqlValue, params, params_from_iter};
use crate::error::{Error, Result};

/// The webhook sources whose signatures sessiond verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookSource {
    Github,
    Slack,
}

impl WebhookSource {
    pub fn name(self) -> &'static str {
        match self {
            WebhookSource::Github => "github",
            WebhookSource::Slack => "slack",
        }
    }
}

impl super::sql::FromSql for WebhookSource {
    fn column_result(value: super::sql::ValueRef<'_>) -> super::sql::FromSqlResult<Self> {
        match value.as_str()? {
            "github" => Ok(WebhookSource::Github),
            "slack" => Ok(WebhookSource::Slack),
            other => Err(super::sql::FromSqlError::Other(
                format!("unknown webhook source {other:?}").into(),
            )),
        }
    }
}

/// A trigger to record; its secret is already sealed (with `id` as the seal's context).
#[derive(Clone)]
pub struct NewWebhookTrigger {
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub source: WebhookSource,
    pub name: String,
    pub forward_path: String,
    pub secret_sealed: String,
    /// The user, or the app (`creator_app`), deliveries act as.
    pub created_by: String,
    pub creator_app: bool,
}

/// A trigger as a delivery's verification and its session need it.
#[derive(Clone)]
pub struct WebhookTriggerRow {
    pub id: String,
    pub workspace_id: String,
    pub workspace_slug: String,
    pub agent_id: String,
    pub source: WebhookSource,
    pub name: String,
    pub forward_path: String,
    pub secret_sealed: String,
    pub created_by: String,
    pub creator_app: bool,
}

/// Most triggers one delivery is checked against (one URL shared by agents of the same name in
/// several workspaces, or a delivery that names no repository or app).
pub(crate) const CANDIDATES_MAX: u32 = 16;

/// The triggers a delivery to `agent_slug`/`forward_path` signed for `source` may be for: those
/// whose creator still belongs to the workspace, named `name` when the delivery names one, at
/// most [`CANDIDATES_MAX`], oldest first.
fn candidates(
    conn: &Db,
    agent_slug: &str,
    source: WebhookSource,
    forward_path: &str,
    name: Option<&str>,
) -> Result<Vec<WebhookTriggerRow>> {
    let by_name = if name.is_some() {
        "AND t.name = ?5"
    } else {
        ""
    };
    let sql = format!(
        "SELECT t.id, t.workspace_id, w.slug, t.agent_id, t.source, t.name, t.forward_path,
            t.secret_sealed, t.created_by, t.creator_kind
         FROM agentex_webhook_triggers t
         JOIN agents a ON a.id = t.agent_id
         JOIN workspaces w ON w.id = t.workspace_id
         WHERE t.forward_path = ?1 AND t.source = ?2 AND a.slug = ?3 {by_name}
           AND CASE t.creator_kind
               WHEN 'app' THEN EXISTS (SELECT 1 FROM apps p
                   WHERE p.id = t.created_by AND p.workspace_id = t.workspace_id)
               ELSE EXISTS (SELECT 1 FROM memberships m
                   WHERE m.user_id = t.created_by AND m.workspace_id = t.workspace_id)
               END
         ORDER BY t.created_at, t.id
         LIMIT ?4"
    );
    let mut args = vec![
        SqlValue::Text(forward_path.to_owned()),
        SqlValue::Text(source.name().to_owned()),
        SqlValue::Text(agent_slug.to_owned()),
        SqlValue::Integer(i64::from(CANDIDATES_MAX)),
    ];
    if let Some(name) = name {
        args.push(SqlValue::Text(name.to_owned()));
    }
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), |r| {
        let kind: String = r.get(9)?;
        Ok(WebhookTriggerRow {
            id: r.get(0)?,
            workspace_id: r.get(1)?,
            workspace_slug: r.get(2)?,
            agent_id: r.get(3)?,
            source: r.get(4)?,
            name: r.get(5)?,
            forward_path: r.get(6)?,
            secret_sealed: r.get(7)?,
            created_by: r.get(8)?,
            creator_app: kind == "app",
        })
    })?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

impl Tx<'_> {
    /// Records a trigger; 409 `webhook_trigger_exists` when the agent already has one of that
    /// source and name.
    fn insert_webhook_trigger(&mut self, t: &NewWebhookTrigger) -> Result<()> {
        let taken = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM agentex_webhook_triggers
                 WHERE agent_id = ?1 AND source = ?2 AND name = ?3",
            )?
            .exists([t.agent_id.as_str(), t.source.name(), t.name.as_str()])?;
        if taken {
            return Err(Error::Conflict(
                "webhook_trigger_exists",
                format!(
                    "name: the agent already has a {} trigger for {:?}",
                    t.source.name(),
                    t.name
                ),
            ));
        }
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_webhook_triggers (id, workspace_id, agent_id, source, name,
                    forward_path, secret_sealed, created_by, creator_kind, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(params![
                t.id,
                t.workspace_id,
                t.agent_id,
                t.source.name(),
                t.name,
                t.forward_path,
                t.secret_sealed,
                t.created_by,
                if t.creator_app { "app" } else { "user" },
                self.now
            ])?;
        Ok(())
    }
}

/// Webhook triggers, in sessiond's own types.
#[derive(Clone, Copy)]
pub struct WebhookStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Webhook triggers and the lookup of a delivery's.
    pub fn webhooks(&self) -> WebhookStore<'_> {
        WebhookStore { store: self }
    }
}

impl WebhookStore<'_> {
    /// Records a trigger (409 when the agent has one of that source and name).
    pub async fn create(&self, t: NewWebhookTrigger) -> Result<()> {
        self.store
            .write(move |tx| tx.insert_webhook_trigger(&t))
            .await
    }

    /// The triggers a delivery may be for (see [`candidates`]).
    pub async fn candidates(
        &self,
        agent_slug: &str,
        source: WebhookSource,
        forward_path: &str,
        name: Option<&str>,
    ) -> Result<Vec<WebhookTriggerRow>> {
        let (slug, path, name) = (
            agent_slug.to_owned(),
            forward_path.to_owned(),
            name.map(str::to_owned),
        );
        self.store
            .read(move |c| candidates(c, &slug, source, &path, name.as_deref()))
            .await
    }
}
