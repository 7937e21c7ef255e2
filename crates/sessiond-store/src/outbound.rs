//! Outbound webhooks' tables (migration 0018): a workspace's subscriptions, the outbox of
//! messages for them and the log of every attempt, behind `store.outbound()`.
//!
//! A message is written by the unit of work that writes what causes it, in the same transaction
//! (`Tx::outbox_*`, called from `Tx::insert_session`, `Tx::append_raw`, `Tx::delete_session` and
//! `Tx::record_schedule_run`): a crash either loses both or neither, and the deliverer
//! (`outbound::deliver`) finds every committed message, however the process ended.

use serde_json::{Value, json};

use super::Tx;
use super::sql::{Db, OptionalExtension, params};
use crate::error::{Error, Result};

/// The event types a subscription may ask for, in the order the documentation lists them.
pub const EVENT_KINDS: [&str; 8] = [
    "session.created",
    "run.completed",
    "run.failed",
    "run.interrupted",
    "input.requested",
    "budget_hit",
    "schedule.fired",
    "session.deleted",
];

/// Characters of a run's result or error a message carries at most: a message is a notice, the
/// whole text is one read of the session away.
const TEXT_MAX_CHARS: usize = 4096;

/// Bytes of an `ask`'s questions (as JSON) an `input.requested` message carries at most.
const QUESTIONS_MAX_BYTES: usize = 16 * 1024;

/// A subscription to record; its secret is already sealed (with `id` as the seal's context).
#[derive(Clone)]
pub struct NewSubscription {
    pub id: String,
    pub workspace_id: String,
    pub url: String,
    pub description: String,
    pub event_kinds: Vec<String>,
    pub agent_id: Option<String>,
    pub session_id: Option<String>,
    pub secret_sealed: String,
    pub created_by: String,
}

/// A subscription as stored (its secrets sealed).
#[derive(Clone)]
pub struct SubscriptionRow {
    pub id: String,
    pub workspace_id: String,
    pub url: String,
    pub description: String,
    /// Empty: every kind.
    pub event_kinds: Vec<String>,
    pub agent_id: Option<String>,
    pub agent_slug: Option<String>,
    pub session_id: Option<String>,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_secret_until: Option<i64>,
    pub failing_since: Option<i64>,
    pub disabled_at: Option<i64>,
    pub disabled_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What a change to a subscription sets (`None`: unchanged; the filters' inner `None`: removed).
#[derive(Clone, Default)]
pub struct SubscriptionChange {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_kinds: Option<Vec<String>>,
    pub agent_id: Option<Option<String>>,
    pub session_id: Option<Option<String>>,
    /// `Some(true)` enables it again (its failures forgotten), `Some(false)` disables it.
    pub enabled: Option<bool>,
}

/// A message as the deliverer attempts it.
#[derive(Clone)]
pub struct DueDelivery {
    pub id: String,
    pub subscription_id: String,
    pub url: String,
    pub payload: String,
    pub attempts: i64,
    pub retry_from: i64,
    pub secret_sealed: String,
    pub previous_secret_sealed: Option<String>,
    pub previous_secret_until: Option<i64>,
}

/// What one attempt came to.
#[derive(Clone, Debug)]
pub struct AttemptOutcome {
    pub delivery_id: String,
    pub subscription_id: String,
    /// This attempt's number (1 for the first).
    pub attempt: i64,
    pub started_at: i64,
    pub status: Option<u16>,
    pub latency_ms: i64,
    /// `None` when the receiver took it (a 2xx answer).
    pub error: Option<String>,
    /// When to try again; `None` when it was taken or the retries have run out.
    pub next_attempt_at: Option<i64>,
    /// A subscription failing since at least this long ago is disabled.
    pub disable_after_ms: i64,
}

/// A message in a subscription's delivery log.
#[derive(Clone, Debug)]
pub struct DeliveryRow {
    pub id: String,
    pub event_type: String,
    pub payload: String,
    pub state: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<i64>,
    pub last_attempt_at: Option<i64>,
    pub delivered_at: Option<i64>,
    pub created_at: i64,
}

/// One attempt of a delivery.
#[derive(Clone, Debug)]
pub struct AttemptRow {
    pub attempt: i64,
    pub started_at: i64,
    pub status: Option<i64>,
    pub latency_ms: i64,
    pub error: Option<String>,
}

fn kinds_json(kinds: &[String]) -> String {
    Value::from(kinds.to_vec()).to_string()
}

fn kinds_of(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

const SUBSCRIPTION_COLUMNS: &str = "s.id, s.workspace_id, s.url, s.description, s.event_kinds,
    s.agent_id, a.slug, s.session_id, s.secret_sealed, s.previous_secret_sealed,
    s.previous_secret_until, s.failing_since, s.disabled_at, s.disabled_reason, s.created_at,
    s.updated_at";

fn subscription_of(r: &super::sql::Row<'_>) -> super::sql::Result<SubscriptionRow> {
    let kinds: String = r.get(4)?;
    Ok(SubscriptionRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        url: r.get(2)?,
        description: r.get(3)?,
        event_kinds: kinds_of(&kinds),
        agent_id: r.get(5)?,
        agent_slug: r.get(6)?,
        session_id: r.get(7)?,
        secret_sealed: r.get(8)?,
        previous_secret_sealed: r.get(9)?,
        previous_secret_until: r.get(10)?,
        failing_since: r.get(11)?,
        disabled_at: r.get(12)?,
        disabled_reason: r.get(13)?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
    })
}

fn subscriptions(conn: &Db, workspace_id: &str) -> Result<Vec<SubscriptionRow>> {
    let sql = format!(
        "SELECT {SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions s
         LEFT JOIN agents a ON a.id = s.agent_id
         WHERE s.workspace_id = ?1 ORDER BY s.created_at, s.id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([workspace_id], subscription_of)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

fn subscription(conn: &Db, workspace_id: &str, id: &str) -> Result<SubscriptionRow> {
    let sql = format!(
        "SELECT {SUBSCRIPTION_COLUMNS} FROM webhook_subscriptions s
         LEFT JOIN agents a ON a.id = s.agent_id
         WHERE s.workspace_id = ?1 AND s.id = ?2"
    );
    conn.prepare_cached(&sql)?
        .query_row([workspace_id, id], subscription_of)
        .optional()?
        .ok_or(Error::NotFound)
}

const DELIVERY_COLUMNS: &str = "id, event_type, payload, state, attempts, next_attempt_at,
    last_status, last_error, last_latency_ms, last_attempt_at, delivered_at, created_at";

fn delivery_of(r: &super::sql::Row<'_>) -> super::sql::Result<DeliveryRow> {
    Ok(DeliveryRow {
        id: r.get(0)?,
        event_type: r.get(1)?,
        payload: r.get(2)?,
        state: r.get(3)?,
        attempts: r.get(4)?,
        next_attempt_at: r.get(5)?,
        last_status: r.get(6)?,
        last_error: r.get(7)?,
        last_latency_ms: r.get(8)?,
        last_attempt_at: r.get(9)?,
        delivered_at: r.get(10)?,
        created_at: r.get(11)?,
    })
}

/// A subscription's messages, newest first, older than `before` (a delivery id) when given.
fn deliveries(
    conn: &Db,
    workspace_id: &str,
    subscription_id: &str,
    before: Option<&str>,
    limit: u32,
) -> Result<Vec<DeliveryRow>> {
    subscription(conn, workspace_id, subscription_id)?;
    // Message ids are `msg_` and hex: every one sorts before `msg_~`.
    let before = before.unwrap_or("msg_~");
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
         WHERE subscription_id = ?1 AND id < ?2
         ORDER BY id DESC LIMIT ?3"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![subscription_id, before, i64::from(limit)],
        delivery_of,
    )?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

fn delivery(
    conn: &Db,
    workspace_id: &str,
    subscription_id: &str,
    delivery_id: &str,
) -> Result<(DeliveryRow, Vec<AttemptRow>)> {
    subscription(conn, workspace_id, subscription_id)?;
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE subscription_id = ?1 AND id = ?2"
    );
    let row = conn
        .prepare_cached(&sql)?
        .query_row([subscription_id, delivery_id], delivery_of)
        .optional()?
        .ok_or(Error::NotFound)?;
    let mut stmt = conn.prepare_cached(
        "SELECT attempt, started_at, status, latency_ms, error FROM webhook_attempts
         WHERE delivery_id = ?1 ORDER BY attempt",
    )?;
    let attempts = stmt
        .query_map([delivery_id], |r| {
            Ok(AttemptRow {
                attempt: r.get(0)?,
                started_at: r.get(1)?,
                status: r.get(2)?,
                latency_ms: r.get(3)?,
                error: r.get(4)?,
            })
        })?
        .collect::<super::sql::Result<_>>()?;
    Ok((row, attempts))
}

/// When the earliest pending message of an enabled subscription is due, or its lease ends when
/// an attempt holds it (the deliverer sleeps until then at most).
fn next_due(conn: &Db) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT min(CASE WHEN d.lease_until IS NOT NULL AND d.lease_until >= d.next_attempt_at
                        THEN d.lease_until + 1 ELSE d.next_attempt_at END)
             FROM webhook_deliveries d
             JOIN webhook_subscriptions s ON s.id = d.subscription_id
             WHERE d.state = 'pending' AND s.disabled_at IS NULL",
        )?
        .query_row([], |r| r.get::<_, Option<i64>>(0))?)
}

/// A subscription an event may go to: its id, kinds and filters.
struct Subscriber {
    id: String,
    kinds: Vec<String>,
    agent_id: Option<String>,
    session_id: Option<String>,
}

/// Who hears about a session: its workspace and agent, and the workspace's enabled
/// subscriptions.
struct Audience {
    workspace_id: String,
    agent_id: String,
    subscribers: Vec<Subscriber>,
}

impl Subscriber {
    fn wants(&self, kind: &str, agent_id: &str, session_id: &str) -> bool {
        (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind))
            && self.agent_id.as_deref().is_none_or(|a| a == agent_id)
            && self.session_id.as_deref().is_none_or(|s| s == session_id)
    }
}

/// Whether an event of this type may be of a kind a subscription receives: the types
/// [`kinds_of_event`] names kinds for.
fn may_notify(event_type: &str) -> bool {
    matches!(event_type, "ask" | "interrupted" | "complete")
}

/// The kinds a timeline event of `event_type` (`body` its JSON) is a message of.
fn kinds_of_event(event_type: &str, body: &str) -> Vec<&'static str> {
    match event_type {
        "ask" => vec!["input.requested"],
        "interrupted" => vec!["run.interrupted"],
        "complete" => {
            let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
            match v["status"].as_str() {
                Some("completed") => vec!["run.completed"],
                Some("cancelled") => vec!["run.interrupted"],
                Some("failed") => {
                    let budget = v["error"]
                        .as_str()
                        .is_some_and(|e| e.starts_with("budget_hit:"));
                    if budget {
                        vec!["run.failed", "budget_hit"]
                    } else {
                        vec!["run.failed"]
                    }
                }
                _ => Vec::new(),
            }
        }
        _ => Vec::new(),
    }
}

fn clipped(text: &str) -> String {
    match text.char_indices().nth(TEXT_MAX_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// What a terminal event tells a receiver beyond its type.
fn terminal_data(event_type: &str, body: &str, seq: u64) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let mut data = json!({ "seq": seq });
    match event_type {
        "complete" => {
            data["status"] = v["status"].clone();
            if let Some(r) = v["result"].as_str() {
                data["result"] = json!(clipped(r));
            }
            if let Some(e) = v["error"].as_str() {
                data["error"] = json!(clipped(e));
            }
        }
        // Questions are short; should they not be, the message says so rather than grow.
        "ask" if v["questions"].to_string().len() <= QUESTIONS_MAX_BYTES => {
            data["questions"] = v["questions"].clone();
        }
        "ask" => data["questionsOmitted"] = json!(true),
        _ => {}
    }
    data
}

impl Tx<'_> {
    fn subscribers(&self, workspace_id: &str) -> Result<Vec<Subscriber>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, event_kinds, agent_id, session_id FROM webhook_subscriptions
             WHERE workspace_id = ?1 AND disabled_at IS NULL",
        )?;
        let rows = stmt.query_map([workspace_id], |r| {
            let kinds: String = r.get(1)?;
            Ok(Subscriber {
                id: r.get(0)?,
                kinds: kinds_of(&kinds),
                agent_id: r.get(2)?,
                session_id: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<super::sql::Result<_>>()?)
    }

    /// A session's workspace and agent and the enabled subscriptions of its workspace, in one
    /// statement (a turn's terminal reads it inside its unit of work); `None` when the session
    /// is gone.
    fn audience(&self, pk: i64) -> Result<Option<Audience>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.workspace_id, s.agent_id, w.id, w.event_kinds, w.agent_id, w.session_id
             FROM sessions s
             LEFT JOIN webhook_subscriptions w
               ON w.workspace_id = s.workspace_id AND w.disabled_at IS NULL
             WHERE s.pk = ?1",
        )?;
        let rows = stmt.query_map([pk], |r| {
            let subscriber = match r.get::<_, Option<String>>(2)? {
                Some(id) => Some(Subscriber {
                    id,
                    kinds: kinds_of(&r.get::<_, String>(3)?),
                    agent_id: r.get(4)?,
                    session_id: r.get(5)?,
                }),
                None => None,
            };
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, subscriber))
        })?;
        let mut audience: Option<Audience> = None;
        for row in rows {
            let (workspace_id, agent_id, subscriber) = row?;
            let a = audience.get_or_insert_with(|| Audience {
                workspace_id,
                agent_id,
                subscribers: Vec::new(),
            });
            a.subscribers.extend(subscriber);
        }
        Ok(audience)
    }

    /// Writes one message per subscription of the workspace that wants each of `kinds` about
    /// this session, in this transaction. `data` gets the session's ids added.
    fn outbox(
        &mut self,
        workspace_id: &str,
        agent_id: &str,
        session_id: &str,
        kinds: &[&str],
        data: Value,
    ) -> Result<()> {
        if kinds.is_empty() {
            return Ok(());
        }
        let subscribers = self.subscribers(workspace_id)?;
        let audience = Audience {
            workspace_id: workspace_id.to_owned(),
            agent_id: agent_id.to_owned(),
            subscribers,
        };
        self.outbox_to(&audience, session_id, kinds, data)
    }

    /// [`Tx::outbox`] for an audience already read.
    fn outbox_to(
        &mut self,
        audience: &Audience,
        session_id: &str,
        kinds: &[&str],
        data: Value,
    ) -> Result<()> {
        let Audience {
            workspace_id,
            agent_id,
            subscribers,
        } = audience;
        let (workspace_id, agent_id) = (workspace_id.as_str(), agent_id.as_str());
        if kinds.is_empty() || subscribers.is_empty() {
            return Ok(());
        }
        let agent_slug: Option<String> = self
            .conn
            .prepare_cached("SELECT slug FROM agents WHERE id = ?1")?
            .query_row([agent_id], |r| r.get(0))
            .optional()?;
        let mut data = data;
        data["workspaceId"] = json!(workspace_id);
        data["agentId"] = json!(agent_id);
        data["agent"] = json!(agent_slug);
        data["sessionId"] = json!(session_id);
        for kind in kinds {
            let payload = json!({
                "type": kind,
                "timestamp": crate::clock::rfc3339(self.now),
                "data": data,
            })
            .to_string();
            for s in subscribers
                .iter()
                .filter(|s| s.wants(kind, agent_id, session_id))
            {
                let id = format!("msg_{}", crate::ids::new_id().replace('-', ""));
                self.conn
                    .prepare_cached(
                        "INSERT INTO webhook_deliveries (id, subscription_id, event_type, payload,
                            state, attempts, next_attempt_at, retry_from, created_at)
                         VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?5, ?5)",
                    )?
                    .execute(params![id, s.id, kind, payload, self.now])?;
            }
        }
        Ok(())
    }

    /// `session.created` for a session just inserted.
    pub(super) fn outbox_session_created(
        &mut self,
        workspace_id: &str,
        agent_id: &str,
        session_id: &str,
    ) -> Result<()> {
        self.outbox(
            workspace_id,
            agent_id,
            session_id,
            &["session.created"],
            json!({}),
        )
    }

    /// The messages a timeline event just appended is (terminals and questions only).
    pub(super) fn outbox_event(
        &mut self,
        key: &super::SessionKey,
        event_type: &str,
        body: &str,
        seq: u64,
    ) -> Result<()> {
        // Most workspaces subscribe to nothing: their turns' terminals are not parsed again.
        if !may_notify(event_type) {
            return Ok(());
        }
        let Some(audience) = self.audience(key.pk)? else {
            return Ok(());
        };
        if audience.subscribers.is_empty() {
            return Ok(());
        }
        let kinds = kinds_of_event(event_type, body);
        if kinds.is_empty() {
            return Ok(());
        }
        let data = terminal_data(event_type, body, seq);
        self.outbox_to(&audience, &key.id, &kinds, data)
    }

    /// `session.deleted`, written before the session's rows go.
    pub(super) fn outbox_session_deleted(&mut self, key: &super::SessionKey) -> Result<()> {
        let Some(audience) = self.audience(key.pk)? else {
            return Ok(());
        };
        self.outbox_to(&audience, &key.id, &["session.deleted"], json!({}))
    }

    /// `schedule.fired` for the session a schedule's tick made.
    pub(super) fn outbox_schedule_fired(
        &mut self,
        key: &super::SessionKey,
        schedule_id: &str,
        fire_time: i64,
    ) -> Result<()> {
        let Some(audience) = self.audience(key.pk)? else {
            return Ok(());
        };
        let data = json!({
            "scheduleId": schedule_id,
            "fireTime": crate::clock::rfc3339(fire_time),
        });
        self.outbox_to(&audience, &key.id, &["schedule.fired"], data)
    }

    fn insert_subscription(&mut self, s: &NewSubscription, max: u32) -> Result<()> {
        let count: i64 = self
            .conn
            .prepare_cached("SELECT count(*) FROM webhook_subscriptions WHERE workspace_id = ?1")?
            .query_row([&s.workspace_id], |r| r.get(0))?;
        if count >= i64::from(max) {
            return Err(Error::Conflict(
                "webhook_limit",
                format!("the workspace has {count} webhook subscriptions, the most it may have"),
            ));
        }
        self.conn
            .prepare_cached(
                "INSERT INTO webhook_subscriptions (id, workspace_id, url, description,
                    event_kinds, agent_id, session_id, secret_sealed, created_by, created_at,
                    updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
            )?
            .execute(params![
                s.id,
                s.workspace_id,
                s.url,
                s.description,
                kinds_json(&s.event_kinds),
                s.agent_id,
                s.session_id,
                s.secret_sealed,
                s.created_by,
                self.now
            ])?;
        Ok(())
    }

    fn change_subscription(
        &mut self,
        workspace_id: &str,
        id: &str,
        c: &SubscriptionChange,
    ) -> Result<SubscriptionRow> {
        let mut row = subscription(self.conn, workspace_id, id)?;
        if let Some(url) = &c.url {
            row.url = url.clone();
        }
        if let Some(d) = &c.description {
            row.description = d.clone();
        }
        if let Some(k) = &c.event_kinds {
            row.event_kinds = k.clone();
        }
        if let Some(a) = &c.agent_id {
            row.agent_id = a.clone();
        }
        if let Some(s) = &c.session_id {
            row.session_id = s.clone();
        }
        match c.enabled {
            Some(true) => {
                row.disabled_at = None;
                row.disabled_reason = None;
                row.failing_since = None;
            }
            Some(false) if row.disabled_at.is_none() => {
                row.disabled_at = Some(self.now);
                row.disabled_reason = Some("disabled by a member of the workspace".into());
            }
            _ => {}
        }
        self.conn
            .prepare_cached(
                "UPDATE webhook_subscriptions SET url = ?2, description = ?3, event_kinds = ?4,
                    agent_id = ?5, session_id = ?6, disabled_at = ?7, disabled_reason = ?8,
                    failing_since = ?9, updated_at = ?10
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                row.url,
                row.description,
                kinds_json(&row.event_kinds),
                row.agent_id,
                row.session_id,
                row.disabled_at,
                row.disabled_reason,
                row.failing_since,
                self.now
            ])?;
        subscription(self.conn, workspace_id, id)
    }

    fn rotate_subscription_secret(
        &mut self,
        workspace_id: &str,
        id: &str,
        new_sealed: &str,
        previous_sealed: Option<&str>,
        previous_until: i64,
    ) -> Result<()> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE webhook_subscriptions SET secret_sealed = ?3,
                    previous_secret_sealed = ?4, previous_secret_until = ?5, updated_at = ?6
                 WHERE workspace_id = ?1 AND id = ?2",
            )?
            .execute(params![
                workspace_id,
                id,
                new_sealed,
                previous_sealed,
                previous_until,
                self.now
            ])?;
        if n == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    /// Leases up to `limit` due messages of enabled subscriptions until `lease_until`. A row
    /// another process leased meanwhile is skipped: the lease is taken by an update that
    /// checks it again.
    fn claim_due(&mut self, limit: u32, lease_until: i64) -> Result<Vec<DueDelivery>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT d.id, d.subscription_id, s.url, d.payload, d.attempts, d.retry_from,
                s.secret_sealed, s.previous_secret_sealed, s.previous_secret_until
             FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
             WHERE d.state = 'pending' AND d.next_attempt_at <= ?1
               AND (d.lease_until IS NULL OR d.lease_until < ?1) AND s.disabled_at IS NULL
             ORDER BY d.next_attempt_at, d.id LIMIT ?2",
        )?;
        let found: Vec<DueDelivery> = stmt
            .query_map(params![self.now, i64::from(limit)], |r| {
                Ok(DueDelivery {
                    id: r.get(0)?,
                    subscription_id: r.get(1)?,
                    url: r.get(2)?,
                    payload: r.get(3)?,
                    attempts: r.get(4)?,
                    retry_from: r.get(5)?,
                    secret_sealed: r.get(6)?,
                    previous_secret_sealed: r.get(7)?,
                    previous_secret_until: r.get(8)?,
                })
            })?
            .collect::<super::sql::Result<_>>()?;
        let mut claimed = Vec::with_capacity(found.len());
        for d in found {
            let n = self
                .conn
                .prepare_cached(
                    "UPDATE webhook_deliveries SET lease_until = ?2
                     WHERE id = ?1 AND state = 'pending'
                       AND (lease_until IS NULL OR lease_until < ?3)",
                )?
                .execute(params![d.id, lease_until, self.now])?;
            if n == 1 {
                claimed.push(d);
            }
        }
        Ok(claimed)
    }

    fn record_attempt(&mut self, o: &AttemptOutcome) -> Result<()> {
        let status = o.status.map(i64::from);
        let (state, next) = match (&o.error, o.next_attempt_at) {
            (None, _) => ("delivered", o.started_at),
            (Some(_), Some(next)) => ("pending", next),
            (Some(_), None) => ("failed", o.started_at),
        };
        let n = self
            .conn
            .prepare_cached(
                "UPDATE webhook_deliveries SET state = ?2, attempts = ?3, next_attempt_at = ?4,
                    lease_until = NULL, last_status = ?5, last_error = ?6, last_latency_ms = ?7,
                    last_attempt_at = ?8,
                    delivered_at = CASE WHEN ?2 = 'delivered' THEN ?9 ELSE delivered_at END
                 WHERE id = ?1",
            )?
            .execute(params![
                o.delivery_id,
                state,
                o.attempt,
                next,
                status,
                o.error,
                o.latency_ms,
                o.started_at,
                self.now
            ])?;
        if n == 0 {
            // Its subscription was removed while the attempt was under way.
            return Ok(());
        }
        self.conn
            .prepare_cached(
                "INSERT INTO webhook_attempts (delivery_id, attempt, started_at, status,
                    latency_ms, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (delivery_id, attempt) DO NOTHING",
            )?
            .execute(params![
                o.delivery_id,
                o.attempt,
                o.started_at,
                status,
                o.latency_ms,
                o.error
            ])?;
        if o.error.is_none() {
            self.conn
                .prepare_cached(
                    "UPDATE webhook_subscriptions SET failing_since = NULL WHERE id = ?1",
                )?
                .execute([&o.subscription_id])?;
            return Ok(());
        }
        let since: Option<i64> = self
            .conn
            .prepare_cached(
                "UPDATE webhook_subscriptions SET failing_since = coalesce(failing_since, ?2)
                 WHERE id = ?1 AND disabled_at IS NULL RETURNING failing_since",
            )?
            .query_row(params![o.subscription_id, o.started_at], |r| r.get(0))
            .optional()?;
        if let Some(since) = since
            && self.now - since >= o.disable_after_ms
        {
            let reason = format!(
                "disabled: its deliveries have failed since {} (last error: {})",
                crate::clock::rfc3339(since),
                o.error.as_deref().unwrap_or("")
            );
            self.conn
                .prepare_cached(
                    "UPDATE webhook_subscriptions SET disabled_at = ?2, disabled_reason = ?3,
                        updated_at = ?2
                     WHERE id = ?1",
                )?
                .execute(params![o.subscription_id, self.now, reason])?;
        }
        Ok(())
    }

    fn redeliver(&mut self, workspace_id: &str, subscription_id: &str, id: &str) -> Result<()> {
        subscription(self.conn, workspace_id, subscription_id)?;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = ?3,
                    retry_from = ?3
                 WHERE subscription_id = ?1 AND id = ?2",
            )?
            .execute(params![subscription_id, id, self.now])?;
        if n == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }
}

/// Outbound webhooks' subscriptions, outbox and delivery log, in sessiond's own types.
#[derive(Clone, Copy)]
pub struct OutboundStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Outbound webhooks: subscriptions, the outbox and the delivery log.
    pub fn outbound(&self) -> OutboundStore<'_> {
        OutboundStore { store: self }
    }
}

impl OutboundStore<'_> {
    /// Records a subscription (409 `webhook_limit` past `max` in the workspace).
    pub async fn create(&self, s: NewSubscription, max: u32) -> Result<()> {
        self.store
            .write(move |tx| tx.insert_subscription(&s, max))
            .await
    }

    pub async fn list(&self, workspace_id: &str) -> Result<Vec<SubscriptionRow>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| subscriptions(c, &ws)).await
    }

    pub async fn get(&self, workspace_id: &str, id: &str) -> Result<SubscriptionRow> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store.read(move |c| subscription(c, &ws, &id)).await
    }

    pub async fn update(
        &self,
        workspace_id: &str,
        id: &str,
        change: SubscriptionChange,
    ) -> Result<SubscriptionRow> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store
            .write(move |tx| tx.change_subscription(&ws, &id, &change))
            .await
    }

    /// Removes a subscription with its outbox and log.
    pub async fn delete(&self, workspace_id: &str, id: &str) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store
            .write(move |tx| {
                subscription(tx.conn, &ws, &id)?;
                tx.conn.execute(
                    "DELETE FROM webhook_attempts WHERE delivery_id IN
                        (SELECT id FROM webhook_deliveries WHERE subscription_id = ?1)",
                    [&id],
                )?;
                tx.conn.execute(
                    "DELETE FROM webhook_deliveries WHERE subscription_id = ?1",
                    [&id],
                )?;
                tx.conn
                    .execute("DELETE FROM webhook_subscriptions WHERE id = ?1", [&id])?;
                Ok(())
            })
            .await
    }

    /// Makes `new_sealed` the secret, keeping `previous_sealed` signing until `previous_until`.
    pub async fn rotate(
        &self,
        workspace_id: &str,
        id: &str,
        new_sealed: String,
        previous_sealed: Option<String>,
        previous_until: i64,
    ) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store
            .write(move |tx| {
                tx.rotate_subscription_secret(
                    &ws,
                    &id,
                    &new_sealed,
                    previous_sealed.as_deref(),
                    previous_until,
                )
            })
            .await
    }

    /// Leases due messages for an attempt (see [`Tx::claim_due`]).
    pub async fn claim_due(&self, limit: u32, lease_ms: i64) -> Result<Vec<DueDelivery>> {
        self.store
            .write(move |tx| {
                let until = tx.now + lease_ms;
                tx.claim_due(limit, until)
            })
            .await
    }

    /// Records an attempt, moves its message on and disables a subscription failing too long.
    pub async fn record_attempt(&self, outcome: AttemptOutcome) -> Result<()> {
        self.store
            .write(move |tx| tx.record_attempt(&outcome))
            .await
    }

    /// Drops every lease (at the start of the only process of a SQLite database, whose leases
    /// were a previous process's).
    pub async fn release_leases(&self) -> Result<()> {
        self.store
            .write(|tx| {
                tx.conn.execute(
                    "UPDATE webhook_deliveries SET lease_until = NULL
                     WHERE lease_until IS NOT NULL",
                    [],
                )?;
                Ok(())
            })
            .await
    }

    pub async fn next_due(&self) -> Result<Option<i64>> {
        self.store.read(next_due).await
    }

    pub async fn deliveries(
        &self,
        workspace_id: &str,
        subscription_id: &str,
        before: Option<String>,
        limit: u32,
    ) -> Result<Vec<DeliveryRow>> {
        let (ws, sub) = (workspace_id.to_owned(), subscription_id.to_owned());
        self.store
            .read(move |c| deliveries(c, &ws, &sub, before.as_deref(), limit))
            .await
    }

    pub async fn delivery(
        &self,
        workspace_id: &str,
        subscription_id: &str,
        delivery_id: &str,
    ) -> Result<(DeliveryRow, Vec<AttemptRow>)> {
        let (ws, sub, id) = (
            workspace_id.to_owned(),
            subscription_id.to_owned(),
            delivery_id.to_owned(),
        );
        self.store.read(move |c| delivery(c, &ws, &sub, &id)).await
    }

    /// 404 unless the workspace has the session (a subscription's session filter).
    pub async fn check_session(&self, workspace_id: &str, session_id: &str) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .read(move |c| super::session_key(c, &ws, &id).map(|_| ()))
            .await
    }

    /// Queues a message again now, with the same `webhook-id`, retried afresh.
    pub async fn redeliver(
        &self,
        workspace_id: &str,
        subscription_id: &str,
        delivery_id: &str,
    ) -> Result<()> {
        let (ws, sub, id) = (
            workspace_id.to_owned(),
            subscription_id.to_owned(),
            delivery_id.to_owned(),
        );
        self.store
            .write(move |tx| tx.redeliver(&ws, &sub, &id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminals_map_to_kinds() {
        assert_eq!(
            kinds_of_event("complete", r#"{"status":"completed"}"#),
            ["run.completed"]
        );
        assert_eq!(
            kinds_of_event(
                "complete",
                r#"{"status":"failed","error":"budget_hit: spent"}"#
            ),
            ["run.failed", "budget_hit"]
        );
        assert_eq!(
            kinds_of_event("complete", r#"{"status":"cancelled"}"#),
            ["run.interrupted"]
        );
        assert_eq!(kinds_of_event("ask", "{}"), ["input.requested"]);
        assert!(kinds_of_event("sleep", "{}").is_empty());
        for t in ["ask", "interrupted"] {
            assert!(may_notify(t) && !kinds_of_event(t, "{}").is_empty(), "{t}");
        }
        assert!(may_notify("complete"));
        for t in ["sleep", "step", "prompt_submitted", "output", "usage"] {
            assert!(!may_notify(t) && kinds_of_event(t, "{}").is_empty(), "{t}");
        }
        assert!(kinds_of_event("step", "{}").is_empty());
    }

    #[test]
    fn filters_narrow_what_a_subscriber_wants() {
        let s = Subscriber {
            id: "s".into(),
            kinds: vec!["run.completed".into()],
            agent_id: Some("a1".into()),
            session_id: None,
        };
        assert!(s.wants("run.completed", "a1", "x"));
        assert!(!s.wants("run.failed", "a1", "x"));
        assert!(!s.wants("run.completed", "a2", "x"));
    }
}
