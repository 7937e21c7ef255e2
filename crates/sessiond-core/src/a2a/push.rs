//! Push-notification delivery: while a task has configs, sessiond follows its session and, each
//! time a turn ends (completed, failed, canceled, or asking for input), posts the task (a
//! `StreamResponse` `{"task": …}`, without its history) to every config's URL, with the config's
//! token in `X-A2A-Notification-Token` and its credentials in `Authorization: <scheme>
//! <credentials>`. A delivery is retried with backoff; the URL is checked against `[policy]`
//! again and the client is pinned to the addresses checked, so a name that comes to resolve
//! inside is refused. Following is process-local: it starts when a config is set (or a message
//! carrying one is sent) and stops when the task has no configs left, the session is deleted,
//! or the server shuts down.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Server;
use super::reading::{self, Reading};
use super::task;
use crate::outbound::destination::{self, Purpose};
use crate::secret::Sealer;
use crate::sessions::{Actor, HistoryQuery, Sessions};
use crate::store::SessionRow;
use crate::store::a2a_push::PushConfigRow;

/// The purpose the sealing key of push secrets is derived for.
pub const SEALING_PURPOSE: &str = "a2a push notification";

/// What a sealed secret of a config is bound to.
pub fn seal_context(session_pk: i64, id: &str, what: &str) -> String {
    format!("{session_pk}/{id}/{what}")
}

/// Attempts per delivery, and the wait before the second (doubled each time).
const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a follower without a bus subscription looks for new events.
const POLL: Duration = Duration::from_millis(500);

/// The sessions (by pk) this process follows.
static FOLLOWED: LazyLock<Mutex<HashSet<i64>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

struct Unfollow(i64);

impl Drop for Unfollow {
    fn drop(&mut self) {
        if let Ok(mut set) = FOLLOWED.lock() {
            set.remove(&self.0);
        }
    }
}

/// Starts following `row`'s task from timeline seq `after`, unless this process already does.
pub fn follow(server: &Server<'_>, row: &SessionRow, after: u64) {
    let fresh = FOLLOWED
        .lock()
        .map(|mut s| s.insert(row.pk))
        .unwrap_or(false);
    if !fresh {
        return;
    }
    let follower = Follower {
        sessions: server.sessions.clone(),
        actor: server.actor.clone(),
        sealer: server.sealer.clone(),
        pk: row.pk,
        id: row.id.clone(),
    };
    tokio::spawn(async move {
        let _unfollow = Unfollow(follower.pk);
        follower.run(after).await;
    });
}

struct Follower {
    sessions: Sessions,
    actor: Actor,
    sealer: Sealer,
    pk: i64,
    id: String,
}

impl Follower {
    async fn run(&self, mut cursor: u64) {
        let mut sub = self.sessions.store().bus().observe(&self.id).ok();
        let mut closed = self.sessions.store().bus().closed();
        loop {
            loop {
                let page = match self
                    .sessions
                    .history_of(self.pk, HistoryQuery::Forward { cursor, limit: 200 })
                    .await
                {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(error = %e, task = %self.id, "a2a push: timeline read failed");
                        break;
                    }
                };
                for e in &page.events {
                    cursor = e.seq;
                    let ends = serde_json::from_str::<Value>(&e.body)
                        .map(|v| matches!(reading::read(&v), Reading::Ended { .. }))
                        .unwrap_or(false);
                    if ends {
                        self.notify().await;
                    }
                }
                if page.next_cursor.is_none() {
                    break;
                }
            }
            match self.sessions.store().a2a_push().list(self.pk).await {
                Ok(configs) if configs.is_empty() => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, task = %self.id, "a2a push: configs read failed")
                }
            }
            match sub.as_mut() {
                Some(s) => tokio::select! {
                    msg = s.rx.recv() => match msg {
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                    _ = closed.changed() => return,
                },
                None => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Posts the task as it is now to every config.
    async fn notify(&self) {
        let row = match self.sessions.detail_row(&self.actor, &self.id).await {
            Ok(row) => row,
            Err(_) => return,
        };
        let body = match task::view(&self.sessions, &row, Some(0)).await {
            Ok((_, t)) => json!({ "task": t }).to_string(),
            Err(e) => {
                tracing::warn!(error = %e, task = %self.id, "a2a push: task read failed");
                return;
            }
        };
        let configs = self
            .sessions
            .store()
            .a2a_push()
            .list(self.pk)
            .await
            .unwrap_or_default();
        for c in &configs {
            if let Err(why) = self.deliver(c, &body).await {
                tracing::warn!(task = %self.id, config = %c.id, %why, "a2a push not delivered");
            }
        }
    }

    fn open(&self, sealed: &Option<String>, c: &PushConfigRow, what: &str) -> Option<String> {
        let sealed = sealed.as_deref()?;
        let plain = self
            .sealer
            .open(sealed, &seal_context(self.pk, &c.id, what))?;
        String::from_utf8(plain).ok()
    }

    /// One delivery, retried: a refusal by the policy is final, a failure to connect or an
    /// answer other than 2xx is tried again after a pause.
    async fn deliver(&self, c: &PushConfigRow, body: &str) -> Result<(), String> {
        let policy = &self.sessions.config().policy;
        let target =
            destination::check(&c.url, policy, Purpose::A2aPush).map_err(|e| e.to_string())?;
        let token = self.open(&c.token_sealed, c, "token");
        let credentials = self.open(&c.credentials_sealed, c, "credentials");
        let mut backoff = FIRST_BACKOFF;
        let mut last = String::new();
        for attempt in 1..=ATTEMPTS {
            // Resolved and checked on every attempt: the addresses connected to are these.
            let addrs = destination::resolve(&target)
                .await
                .map_err(|e| e.to_string())?;
            let client = crate::tls::client_builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(ATTEMPT_TIMEOUT)
                .resolve_to_addrs(&target.host, &addrs)
                .build()
                .map_err(|e| format!("no HTTP client: {e}"))?;
            let mut req = client
                .post(target.url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_owned());
            if let Some(token) = &token {
                req = req.header("X-A2A-Notification-Token", token);
            }
            if let (Some(scheme), Some(credentials)) = (&c.auth_scheme, &credentials) {
                req = req.header(
                    reqwest::header::AUTHORIZATION,
                    format!("{scheme} {credentials}"),
                );
            }
            match req.send().await {
                Ok(res) if res.status().is_success() => return Ok(()),
                Ok(res) => last = format!("answered {}", res.status()),
                Err(e) => last = format!("failed: {e}"),
            }
            if attempt < ATTEMPTS {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(format!("{ATTEMPTS} attempts: {last}"))
    }
}
