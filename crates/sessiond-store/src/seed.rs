//! Filling a data dir directly, for the benchmark commands: bare sessions and their events,
//! written as the store writes them but without the sessions core's rules (no first prompt, no
//! queue, no title from a prompt). The product never calls these.

use super::{NewSession, SessionKey, Store};
use crate::error::Result;
use crate::timeline::Event;

/// A bare session to insert: no events, turn `complete`.
#[derive(Debug, Clone)]
pub struct BareSession {
    pub workspace_id: String,
    pub agent_id: String,
    pub user_id: String,
    pub title: String,
}

/// Direct writes for tools that fill a data dir.
#[derive(Clone, Copy)]
pub struct SeedStore<'a> {
    store: &'a Store,
}

impl Store {
    /// Direct writes for the benchmark commands (see the module doc).
    pub fn seed(&self) -> SeedStore<'_> {
        SeedStore { store: self }
    }
}

impl SeedStore<'_> {
    /// Inserts bare sessions in one transaction; their keys, in order.
    pub fn sessions_blocking(&self, sessions: Vec<BareSession>) -> Result<Vec<SessionKey>> {
        self.store.write_blocking(move |tx| {
            sessions
                .iter()
                .map(|s| {
                    let id = crate::ids::new_id();
                    tx.insert_session(&NewSession::bare(
                        &id,
                        &s.workspace_id,
                        &s.agent_id,
                        &s.user_id,
                        &s.title,
                    ))
                })
                .collect()
        })
    }

    /// Appends events to one session in one transaction; the seq of the last.
    pub fn events_blocking(&self, key: &SessionKey, events: Vec<Event>) -> Result<u64> {
        let key = key.clone();
        self.store.write_blocking(move |tx| {
            let mut last = 0;
            for e in &events {
                last = tx.append(&key, e)?;
            }
            Ok(last)
        })
    }

    /// Appends prompts to one session in one transaction, each indexed for search as the
    /// message path indexes it, and has the prompts waiting for the search index indexed, so
    /// that the database holds none waiting when the benchmark hands it on.
    pub fn prompts_blocking(&self, key: &SessionKey, prompts: Vec<(Event, String)>) -> Result<()> {
        let key = key.clone();
        self.store.write_blocking(move |tx| {
            for (event, text) in &prompts {
                let seq = tx.append(&key, event)?;
                tx.index_prompt(&key, seq, text)?;
            }
            Ok(())
        })?;
        self.store.flush_prompts_blocking()
    }

    /// Appends and indexes one prompt as one write job; the job's own time inside the writer.
    /// The prompt is indexed inside the job, so that the time includes it (the message path
    /// indexes a batch's prompts after its jobs, with the same statements).
    pub async fn prompt(
        &self,
        key: &SessionKey,
        event: Event,
        text: String,
    ) -> Result<std::time::Duration> {
        let key = key.clone();
        self.store
            .write(move |tx| {
                let t = std::time::Instant::now();
                let seq = tx.append(&key, &event)?;
                tx.write_prompt_index(&key, seq, &text)?;
                Ok(t.elapsed())
            })
            .await
    }

    /// Appends one event as one write job without a savepoint: the path of a plain note.
    pub async fn append_one(&self, key: &SessionKey, event: Event) -> Result<u64> {
        let key = key.clone();
        self.store.write_one(move |w| w.append(&key, &event)).await
    }

    /// Appends one event as one write job in its own savepoint: the path of every job that
    /// writes more than once.
    pub async fn append_in_savepoint(&self, key: &SessionKey, event: Event) -> Result<u64> {
        let key = key.clone();
        self.store.write(move |tx| tx.append(&key, &event)).await
    }
}
