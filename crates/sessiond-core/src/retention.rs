//! Retention: each workspace's policy applied in the background by the sweeper, a task on the
//! runner's runtime (as the scheduler is), and what a policy would remove now (the dry run).
//!
//! A policy removes the sessions unchanged for longer than its idle time, except the newest
//! `keep_latest` of each agent; never a pinned session, an agent's default session, nor one with
//! a running turn or a queued input. A sweep works in steps of `retention.batch` sessions: one
//! bounded read, then each removal a transaction of its own through the sessions core's deletion
//! (every API family sees the session gone, its streams end), so no step holds the writer long.
//! With the `archive` action the step's sessions are first written to a portable archive file
//! (`crate::archives`) in `retention.archive_dir`, synced, and only the sessions the archive holds
//! are removed.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::archives::{Archives, Workspace};
use crate::clock;
use crate::config::RetentionConfig;
use crate::error::{Error, Result};
use crate::metrics::METRICS;
use crate::sessions::Sessions;
use crate::store::Store;
use crate::store::retention::{PolicyRow, RetentionAction, RetentionCandidate, RetentionPolicy};

/// Most sessions a dry run lists.
pub const PREVIEW_MAX: u32 = 10_000;

/// What the sweeper needs: the core (its deletion), archives, its settings.
#[derive(Clone)]
pub struct Retention {
    sessions: Sessions,
    archives: Archives,
    cfg: RetentionConfig,
    archive_dir: PathBuf,
}

/// The background sweeper.
pub struct Sweeper {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Swept {
    pub deleted: u64,
    pub archived: u64,
}

/// What the policy `p` of a workspace removes now, oldest change first (at most `limit`).
pub async fn preview(
    store: &Store,
    workspace_id: &str,
    p: &RetentionPolicy,
    limit: u32,
) -> Result<Vec<RetentionCandidate>> {
    Ok(store
        .retention()
        .candidates(workspace_id, p, clock::now_ms(), limit)
        .await?)
}

impl Retention {
    pub fn new(sessions: Sessions, data_dir: PathBuf, cfg: RetentionConfig) -> Retention {
        let core = sessions.clone();
        let archives = Archives::new(
            sessions.store().clone(),
            data_dir.clone(),
            Arc::new(move |engine: &str| core.harness_of(engine)),
        );
        let archive_dir = cfg.archive_dir(&data_dir);
        Retention {
            sessions,
            archives,
            cfg,
            archive_dir,
        }
    }

    /// One sweep over every workspace with a policy; stops early when `stopped` says so.
    pub async fn sweep(&self, stopped: &watch::Receiver<bool>) -> Result<Swept> {
        let mut swept = Swept::default();
        for row in self.sessions.store().retention().policies().await? {
            self.sweep_workspace(&row, stopped, &mut swept).await?;
            if *stopped.borrow() {
                break;
            }
        }
        METRICS.retention_sweeps.inc();
        Ok(swept)
    }

    async fn sweep_workspace(
        &self,
        row: &PolicyRow,
        stopped: &watch::Receiver<bool>,
        swept: &mut Swept,
    ) -> Result<()> {
        let now = clock::now_ms();
        loop {
            let batch = self
                .sessions
                .store()
                .retention()
                .candidates(&row.workspace_id, &row.policy, now, self.cfg.batch)
                .await?;
            if batch.is_empty() {
                return Ok(());
            }
            let removable: Vec<RetentionCandidate> = match row.policy.action {
                RetentionAction::Delete => batch,
                RetentionAction::Archive => self.archive(row, batch).await?,
            };
            let mut removed = 0;
            for c in &removable {
                let gone = self
                    .sessions
                    .delete_for_retention(&row.workspace_id, c, &row.policy)
                    .await?;
                if gone {
                    removed += 1;
                    METRICS
                        .retention_removed
                        .with(&[row.policy.action.name()])
                        .inc();
                    match row.policy.action {
                        RetentionAction::Delete => swept.deleted += 1,
                        RetentionAction::Archive => swept.archived += 1,
                    }
                    tracing::info!(
                        workspace = %row.workspace_slug,
                        session = %c.id,
                        action = row.policy.action.name(),
                        "retention removed a session"
                    );
                }
            }
            // Every candidate of this step changed meanwhile (a turn, a pin): the next read
            // would find them again, so leave them to the next sweep.
            if removed == 0 || *stopped.borrow() {
                return Ok(());
            }
            tokio::task::yield_now().await;
        }
    }

    /// Writes `batch` to a new archive file of the workspace and syncs it; the sessions it holds
    /// (those still at rest), which may now be removed.
    async fn archive(
        &self,
        row: &PolicyRow,
        batch: Vec<RetentionCandidate>,
    ) -> Result<Vec<RetentionCandidate>> {
        let ws = Workspace {
            id: row.workspace_id.clone(),
            slug: row.workspace_slug.clone(),
            user_id: String::new(),
        };
        let ids = batch.iter().map(|c| c.id.clone()).collect();
        let mut export = self.archives.export(&ws, ids, false).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = export.next_chunk().await? {
            bytes.extend_from_slice(&chunk);
        }
        let held: std::collections::BTreeSet<String> = export
            .manifest()
            .sessions
            .iter()
            .map(|s| s.id.clone())
            .collect();
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let dir = self.archive_dir.join(&ws.slug);
        let first = batch.first().map_or("", |c| c.id.as_str());
        let path = dir.join(format!("retention-{}-{first}.tar", clock::now_ms()));
        let written = tokio::task::spawn_blocking(move || write_synced(&dir, &path, &bytes))
            .await
            .map_err(|e| Error::Internal(format!("archive writer: {e}")))?;
        let path = written?;
        tracing::info!(workspace = %ws.slug, file = %path.display(), sessions = held.len(), "retention archive written");
        Ok(batch.into_iter().filter(|c| held.contains(&c.id)).collect())
    }
}

/// Writes a new file and syncs it and its folder: the sessions in it are deleted next.
fn write_synced(dir: &std::path::Path, path: &std::path::Path, bytes: &[u8]) -> Result<PathBuf> {
    use std::io::Write;
    let io = |e: std::io::Error| Error::from_io(&format!("cannot write {}", path.display()), &e);
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(path.to_owned())
}

impl Sweeper {
    /// Starts the sweeper on `rt`: a sweep every `retention.sweep_interval_ms`.
    pub fn start(retention: Retention, rt: &tokio::runtime::Handle) -> Sweeper {
        let (stop, stopped) = watch::channel(false);
        let task = rt.spawn(run(retention, stopped));
        Sweeper { stop, task }
    }

    /// Stops after the removal in progress, if any, and waits for that.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

async fn run(retention: Retention, mut stopped: watch::Receiver<bool>) {
    let interval = Duration::from_millis(retention.cfg.sweep_interval_ms);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stopped.changed() => break,
        }
        if *stopped.borrow() {
            break;
        }
        if let Err(e) = retention.sweep(&stopped).await {
            METRICS.retention_failures.inc();
            tracing::error!(error = %e, "retention sweep failed; the next one tries again");
        }
    }
    tracing::debug!("retention sweeper stopped");
}
