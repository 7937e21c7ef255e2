//! The prompt search index's backlog (SQLite): prompts recorded but not yet in the index
//! (`session_search_prompts`), so that the index is written for many turns at once instead of in
//! every turn's transaction.
//!
//! Indexing a prompt costs the writer more than recording it: FTS5 tokenizes the text, writes a
//! segment, and the joins that keep a session's search rows few (`prompt_rows`) read and rewrite
//! rows that were written moments before. Written a prompt at a time, that was about a sixth of
//! the writer's time per turn. A batch's prompts therefore go to `prompt_backlog` (migration
//! 0022), a plain table, in the transaction that records them, and the writer moves the backlog
//! into the index when it holds [`FLUSH_ROWS`] prompts or [`FLUSH_BYTES`], when its oldest prompt
//! has waited [`FLUSH_AFTER`], or when a search asks for it. A session's prompts that wait
//! together are joined before they are indexed, so most of the joins the index would have done
//! one prompt at a time never happen.
//!
//! Search still reads its own writes: a search first has the writer empty the backlog
//! ([`super::writer::WriterHandle::flush_prompts`]). The backlog is durable, in the same
//! transactions as the events that hold its prompts: a crash loses nothing, and the next flush
//! after a restart indexes what was left. PostgreSQL has no backlog; each prompt is indexed in
//! its own transaction there.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::SessionKey;
use super::prompt_rows::PROMPT_CLASS_ENDS;
use super::sql::{Db, params};
use crate::error::Result;

/// Prompts the backlog holds at most before the writer indexes them.
const FLUSH_ROWS: usize = 1024;

/// Bytes of prompts the backlog holds at most before the writer indexes them.
const FLUSH_BYTES: usize = 1 << 20;

/// How long a prompt waits in the backlog at most, as seen by the next write (a quiet server
/// keeps its backlog until the next write or search: nothing is lost by waiting).
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// What the writer shares with the store's readers: how many prompts wait, and whether a search
/// is waiting for them.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    /// Prompts in the backlog as of the writer's last commit.
    rows: AtomicUsize,
    /// A search asked for the backlog to be indexed by the next batch.
    wanted: AtomicBool,
}

impl Waiting {
    /// Whether prompts wait for the index.
    pub(crate) fn any(&self) -> bool {
        self.rows.load(Ordering::Acquire) > 0
    }

    /// Asks the next batch to index the backlog.
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::Release);
    }
}

/// The writer's side of the backlog: what it holds, as of the last commit.
pub(crate) struct Backlog {
    rows: usize,
    bytes: usize,
    /// When the oldest prompt of the backlog was recorded (as this process saw it).
    since: Option<Instant>,
    waiting: Arc<Waiting>,
}

/// What a batch did to the backlog, applied to the writer's view once the batch commits.
#[must_use]
pub(crate) enum Change {
    /// The batch recorded no prompt and indexed none.
    None,
    /// The batch added prompts (and their bytes) to the backlog.
    Added(usize, usize),
    /// The batch indexed the whole backlog.
    Flushed,
}

impl Backlog {
    /// The backlog a database holds on opening (left by a crash or a stop). Should it not be
    /// readable, the first batch indexes whatever it holds.
    pub(crate) fn open(conn: &Connection) -> Self {
        let held = conn.query_row(
            "SELECT count(*), coalesce(sum(length(CAST(prompt AS BLOB))), 0) FROM prompt_backlog",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        );
        let (rows, bytes) = match held {
            Ok((rows, bytes)) => (
                usize::try_from(rows).unwrap_or(0),
                usize::try_from(bytes).unwrap_or(0),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the prompt search backlog; indexing it at the first write");
                (1, FLUSH_BYTES)
            }
        };
        let waiting = Arc::new(Waiting::default());
        waiting.rows.store(rows, Ordering::Release);
        Backlog {
            rows,
            bytes,
            since: (rows > 0).then(Instant::now),
            waiting,
        }
    }

    /// What the store's readers see of the backlog.
    pub(crate) fn waiting(&self) -> Arc<Waiting> {
        Arc::clone(&self.waiting)
    }

    /// Records a batch's prompts (session, seq and text, in the order their jobs ran) in the
    /// backlog, and when the backlog is due, has `index` write each run of it into the search
    /// index (the session, the seq of the run's first prompt, its text) and empties it. Runs
    /// after the batch's last job, in its transaction.
    pub(crate) fn take<'p>(
        &self,
        db: &Db<'_>,
        prompts: impl IntoIterator<Item = (&'p SessionKey, u64, &'p str)>,
        index: impl FnMut(&SessionKey, u64, &str) -> Result<()>,
    ) -> Result<Change> {
        let (mut rows, mut bytes) = (0, 0);
        for (key, seq, text) in prompts {
            db.prepare_cached(
                "INSERT INTO prompt_backlog (session_pk, seq, prompt) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![key.pk, seq as i64, text])?;
            rows += 1;
            bytes += text.len();
        }
        let due = self.rows + rows >= FLUSH_ROWS
            || self.bytes + bytes >= FLUSH_BYTES
            || self.since.is_some_and(|t| t.elapsed() >= FLUSH_AFTER)
            || ((self.rows + rows > 0) && self.waiting.wanted.swap(false, Ordering::AcqRel));
        if due {
            flush(db, index)?;
            return Ok(Change::Flushed);
        }
        Ok(if rows == 0 {
            Change::None
        } else {
            Change::Added(rows, bytes)
        })
    }

    /// Applies what a committed batch did.
    pub(crate) fn committed(&mut self, change: Change) {
        match change {
            Change::None => return,
            Change::Added(rows, bytes) => {
                self.rows += rows;
                self.bytes += bytes;
                self.since.get_or_insert_with(Instant::now);
            }
            Change::Flushed => {
                (self.rows, self.bytes, self.since) = (0, 0, None);
            }
        }
        self.waiting.rows.store(self.rows, Ordering::Release);
    }
}

/// Indexes every prompt of the backlog and empties it. A session's consecutive prompts are joined
/// (one per line, as the index's rows hold them) while they stay under the last size class's end,
/// so that each such run is one row being written for `index` (`Tx::write_prompt_index`), which
/// joins it with the session's rows before it by the index's usual rules.
fn flush(db: &Db<'_>, mut index: impl FnMut(&SessionKey, u64, &str) -> Result<()>) -> Result<()> {
    let waiting: Vec<(i64, String, i64, String)> = db
        .prepare_cached(
            "SELECT b.session_pk, s.id, b.seq, b.prompt
             FROM prompt_backlog b JOIN sessions s ON s.pk = b.session_pk
             ORDER BY b.session_pk, b.seq",
        )?
        .query_map(params![], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<super::sql::Result<_>>()?;
    let mut run: Option<(SessionKey, u64, String)> = None;
    for (pk, id, seq, prompt) in waiting {
        let Ok(seq) = u64::try_from(seq) else {
            continue;
        };
        match &mut run {
            Some((key, _, text)) if joins(key, text, pk, &prompt) => {
                text.push('\n');
                text.push_str(&prompt);
            }
            _ => {
                if let Some((key, first, text)) = run.replace((SessionKey { pk, id }, seq, prompt))
                {
                    index(&key, first, &text)?;
                }
            }
        }
    }
    if let Some((key, first, text)) = run {
        index(&key, first, &text)?;
    }
    db.execute("DELETE FROM prompt_backlog", params![])?;
    Ok(())
}

/// Whether `prompt` (of session `pk`) joins the run `text` of `key`'s prompts before it: the same
/// session, and the joined text still under the last size class's end (a row of that size or
/// more is sealed, and would no longer take the session's smaller rows before it).
fn joins(key: &SessionKey, text: &str, pk: i64, prompt: &str) -> bool {
    let last_end = PROMPT_CLASS_ENDS[PROMPT_CLASS_ENDS.len() - 1];
    key.pk == pk && text.len() + 1 + prompt.len() < last_end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::tests::{note, store_with_session};
    use crate::{Store, StoreConfig};

    /// Sends `prompts` to `key`'s session in one job (one batch: with nothing waiting before it,
    /// no flush falls due by age within it).
    async fn send(store: &Store, key: &SessionKey, prompts: &[String]) {
        let (k, prompts) = (key.clone(), prompts.to_vec());
        store
            .write(move |tx| {
                for p in &prompts {
                    let seq = tx.append(&k, &note(p))?;
                    tx.index_prompt(&k, seq, p)?;
                }
                Ok(())
            })
            .await
            .expect("prompts");
    }

    /// The prompts in the backlog and the prompts in the index, each in order.
    async fn held(store: &Store) -> (Vec<String>, Vec<String>) {
        store
            .read(|c| {
                let strings = |sql: &str| -> crate::sql::Result<Vec<String>> {
                    let mut stmt = c.prepare(sql)?;
                    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                    rows.collect()
                };
                let backlog = strings("SELECT prompt FROM prompt_backlog ORDER BY seq")?;
                let indexed = strings("SELECT prompts FROM session_search_prompts ORDER BY rowid")?
                    .iter()
                    .flat_map(|r| r.split('\n').map(str::to_owned).collect::<Vec<_>>())
                    .collect();
                Ok((backlog, indexed))
            })
            .await
            .expect("prompts held")
    }

    /// A prompt waits in the backlog, durable, until a search asks for it; a store closed (or a
    /// process killed) with prompts waiting indexes them after it is opened again, each once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_prompts_survive_a_stop_and_are_indexed_once_when_searched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let first: Vec<String> = (0..5).map(|i| format!("first {i}")).collect();
        send(&store, &key, &first).await;
        assert_eq!(
            held(&store).await,
            (first.clone(), vec![]),
            "waiting, not indexed"
        );
        store.flush_prompts().await;
        assert_eq!(
            held(&store).await,
            (vec![], first.clone()),
            "indexed, none waiting"
        );
        let second: Vec<String> = (0..3).map(|i| format!("second {i}")).collect();
        send(&store, &key, &second).await;
        store.close();

        let sink = crate::sink::recorder::Recorder::new();
        let store = Store::open(&dir.path().join("store.db"), &StoreConfig::default(), sink)
            .expect("reopen");
        assert_eq!(held(&store).await, (second.clone(), first.clone()));
        store.flush_prompts().await;
        let all: Vec<String> = first.iter().chain(&second).cloned().collect();
        assert_eq!(held(&store).await, (vec![], all.clone()));
        // A search with nothing waiting writes nothing.
        store.flush_prompts().await;
        assert_eq!(held(&store).await, (vec![], all));
        store.close();
    }

    /// A full backlog is indexed by the batch that fills it, without a search; a deleted
    /// session's waiting prompts go with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_backlog_is_indexed_and_a_deleted_sessions_prompts_leave_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let prompts: Vec<String> = (0..FLUSH_ROWS).map(|i| format!("p{i}")).collect();
        send(&store, &key, &prompts).await;
        assert_eq!(
            held(&store).await,
            (vec![], prompts),
            "indexed without a search"
        );

        let (doomed, other) = (key.clone(), vec!["doomed".to_owned()]);
        send(&store, &doomed, &other).await;
        assert_eq!(held(&store).await.0, other, "waiting");
        store
            .write(move |tx| tx.delete_session(&doomed))
            .await
            .expect("delete");
        assert_eq!(
            held(&store).await,
            (vec![], vec![]),
            "gone with its session"
        );
        store.close();
    }

    /// A session's prompts that wait together are joined into runs under the last class's end
    /// before they are indexed.
    #[test]
    fn runs_stay_within_one_session_and_under_a_sealed_row() {
        let key = SessionKey {
            pk: 7,
            id: "s".into(),
        };
        let last_end = PROMPT_CLASS_ENDS[PROMPT_CLASS_ENDS.len() - 1];
        assert!(joins(&key, "a", 7, "b"));
        assert!(!joins(&key, "a", 8, "b"), "another session");
        let long = "x".repeat(last_end - 3);
        assert!(
            joins(&key, "a", 7, &long),
            "1 + 1 + (end - 3) stays under the end"
        );
        assert!(
            !joins(&key, "ab", 7, &long),
            "reaching the end would seal the row"
        );
    }
}
