//! Portable archives: sessions exported as one tar file and imported on this server or another
//! (SQLite or PostgreSQL alike), with their ids, seqs and timestamps as they were.
//!
//! An archive holds, per session, `sessions/<id>/events.jsonl` (the timeline, one Sessions API
//! `HistoryEntry` per line, exactly as `GET …/history` shows each event), `session.json` (the
//! Sessions API `SessionDetail`), `record.json` (the `/v2` Session record), `usage.json` (usage
//! totals, tokens and cost) and `store.json` (the row's stored facts that the views are derived
//! from, which an import writes back); the inline images as `images/<sha-256>` and the drive files
//! its events attach as `files/<sha-256>`; and last `manifest.json`, which names every member
//! with its SHA-256 and size. The manifest comes last so that an export streams session after
//! session without holding the archive; an import holds it whole (up to
//! `limits.max_archive_bytes`) because nothing may be written before every checksum is right.
//!
//! Import is idempotent by the archive's ids: a session the workspace already holds is left as
//! it is, a drive file already there with the same bytes is not written again. A session id
//! another workspace of the server holds, or a drive path holding other bytes, refuses the whole
//! archive before anything is written. Sessions are exported only at rest (no running turn, no
//! queued input): a bulk export lists the others under `skipped`, a single one answers 409.

mod export;
mod import;
pub mod tar;

pub use export::Export;
pub use import::ImportReport;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::drive::Drive;
use crate::error::{Error, Result};
use crate::store::Store;

/// The format named in every manifest; an import refuses any other.
pub const FORMAT: &str = "sessiond-archive/1";

/// What names an agent's engine kind (`harness`) in a record, from its engine JSON.
pub type Harness = Arc<dyn Fn(&str) -> &'static str + Send + Sync>;

/// A member's checksum and size in the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemberSum {
    pub sha256: String,
    pub bytes: u64,
}

/// An inline image of a session, named by the member holding its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestImage {
    pub storage_id: String,
    pub mime_type: String,
    pub member: String,
}

/// A session of the archive.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestSession {
    pub id: String,
    pub agent: String,
    pub title: String,
    pub events: u64,
    #[serde(default)]
    pub images: Vec<ManifestImage>,
}

/// A drive file that events of the archive's sessions attach.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestFile {
    /// Relative to the workspace drive.
    pub path: String,
    pub member: String,
}

/// Something the export left out, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeftOut {
    /// A session id, or a drive path.
    pub id: String,
    pub reason: String,
}

/// `manifest.json`: what the archive holds and every member's checksum.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub created_at: String,
    pub server_version: String,
    pub workspace: String,
    pub sessions: Vec<ManifestSession>,
    #[serde(default)]
    pub files: Vec<ManifestFile>,
    /// Sessions not at rest, attached files no longer in the drive.
    #[serde(default)]
    pub skipped: Vec<LeftOut>,
    pub members: BTreeMap<String, MemberSum>,
}

/// The workspace an archive is made from or written to.
#[derive(Debug, Clone)]
pub struct Workspace {
    pub id: String,
    pub slug: String,
    /// Whose read markers the exported views are seen with (`unread`).
    pub user_id: String,
}

/// Archives of one server: its store, its drives and how records name engines.
#[derive(Clone)]
pub struct Archives {
    store: Store,
    data_dir: PathBuf,
    harness: Harness,
}

fn sha256_hex(data: &[u8]) -> String {
    crate::secret::hex(&Sha256::digest(data))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(v).map_err(|e| Error::Internal(format!("cannot encode archive: {e}")))
}

impl Archives {
    pub fn new(store: Store, data_dir: PathBuf, harness: Harness) -> Archives {
        Archives {
            store,
            data_dir,
            harness,
        }
    }

    fn drive(&self, ws: &Workspace) -> Drive {
        Drive::root_for(&self.data_dir, &ws.slug)
    }

    /// The ids of the workspace's sessions (of one agent when `agent` names one; 404
    /// `agent_not_found` when it names none of the workspace's agents).
    pub async fn session_ids(&self, ws: &Workspace, agent: Option<&str>) -> Result<Vec<String>> {
        if let Some(slug) = agent
            && self
                .store
                .directory()
                .agent_by_slug(&ws.id, slug)
                .await?
                .is_none()
        {
            return Err(Error::AgentNotFound);
        }
        Ok(self.store.archives().session_ids(&ws.id, agent).await?)
    }
}
