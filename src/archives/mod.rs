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

pub mod tar;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::clock;
use crate::drive::{self, Drive};
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::archives::{
    IdPlace, Imported, ImportedEvent, ImportedSession, PortableImage, PortableSession,
    SessionSnapshot,
};
use crate::store::projections::{Bucket, TurnStatus};

/// The format named in every manifest; an import refuses any other.
pub const FORMAT: &str = "sessiond-archive/1";

/// Events read per page while exporting a timeline.
const EVENT_PAGE: u32 = 1000;

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

/// The drive paths an event body attaches (`attachments[].path`).
fn attached_paths(body: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return Vec::new();
    };
    v.get("attachments")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.get("path").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// An export under way: one session's members per step, the manifest last.
pub struct Export {
    archives: Archives,
    ws: Workspace,
    ids: std::vec::IntoIter<String>,
    manifest: Manifest,
    /// Content members written already (images and files are stored once per archive).
    written: BTreeSet<String>,
    files_seen: BTreeSet<String>,
    done: bool,
}

impl Export {
    fn add(&mut self, out: &mut Vec<u8>, name: &str, data: &[u8]) -> Result<()> {
        tar::write_member(out, name, data, (clock::now_ms().max(0) / 1000) as u64)?;
        self.manifest.members.insert(
            name.to_owned(),
            MemberSum {
                sha256: sha256_hex(data),
                bytes: data.len() as u64,
            },
        );
        Ok(())
    }

    /// The next piece of the tar stream, `None` after the end blocks.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        let mut out = Vec::new();
        for id in self.ids.by_ref() {
            let snap = match self
                .archives
                .store
                .archives()
                .snapshot(&self.ws.id, &id)
                .await
            {
                Ok(s) => s,
                // Deleted since the list was read.
                Err(Error::NotFound) => continue,
                Err(e) => return Err(e),
            };
            if snap.busy {
                self.manifest.skipped.push(LeftOut {
                    id,
                    reason: "not at rest: a turn is running or an input is queued".into(),
                });
                continue;
            }
            let archives = self.archives.clone();
            archives.session_members(self, &mut out, snap).await?;
            return Ok(Some(out));
        }
        let manifest = encode(&self.manifest)?;
        tar::write_member(
            &mut out,
            "manifest.json",
            &manifest,
            (clock::now_ms().max(0) / 1000) as u64,
        )?;
        tar::write_end(&mut out);
        self.done = true;
        Ok(Some(out))
    }

    /// What the archive holds so far (all of it once the stream has ended).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The whole archive in memory (the HTTP route and the CLI stream it instead).
    pub async fn collect(mut self) -> Result<Vec<u8>> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk().await? {
            all.extend_from_slice(&chunk);
        }
        Ok(all)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// Sessions written.
    pub imported: Vec<String>,
    /// Sessions the workspace held already, left as they were.
    pub unchanged: Vec<String>,
    /// Drive files written.
    pub files_written: Vec<String>,
    /// Drive files already there with the same bytes.
    pub files_present: Vec<String>,
}

/// An archive read and checked, ready to be written.
struct Checked {
    sessions: Vec<ImportedSession>,
    files: Vec<(String, Vec<u8>)>,
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

    /// An export of `ids` (sessions of `ws`). With `single`, a session not at rest is a 409
    /// and a missing one a 404 before anything is sent.
    pub async fn export(&self, ws: &Workspace, ids: Vec<String>, single: bool) -> Result<Export> {
        if single {
            for id in &ids {
                if !crate::ids::looks_like_id(id) {
                    return Err(Error::NotFound);
                }
                if self.store.archives().snapshot(&ws.id, id).await?.busy {
                    return Err(Error::Conflict(
                        "session_busy",
                        format!(
                            "session {id} is not at rest (a turn is running or an input is \
                             queued); export it once it is"
                        ),
                    ));
                }
            }
        }
        Ok(Export {
            archives: self.clone(),
            ws: ws.clone(),
            ids: ids.into_iter(),
            manifest: Manifest {
                format: FORMAT.into(),
                created_at: clock::rfc3339(clock::now_ms()),
                server_version: env!("CARGO_PKG_VERSION").into(),
                workspace: ws.slug.clone(),
                sessions: Vec::new(),
                files: Vec::new(),
                skipped: Vec::new(),
                members: BTreeMap::new(),
            },
            written: BTreeSet::new(),
            files_seen: BTreeSet::new(),
            done: false,
        })
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
        self.store.archives().session_ids(&ws.id, agent).await
    }

    /// Writes one session's members into `out`.
    async fn session_members(
        &self,
        ex: &mut Export,
        out: &mut Vec<u8>,
        snap: SessionSnapshot,
    ) -> Result<()> {
        let SessionSnapshot {
            pk, stored, images, ..
        } = snap;
        let id = stored
            .columns
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let dir = format!("sessions/{id}");
        // The timeline, page by page, and the files its events attach.
        let mut lines = Vec::new();
        let mut attached = Vec::new();
        // Up to the last event the stored facts know of: an event appended since they were read
        // belongs to a later export.
        let last = stored
            .columns
            .get("last_event_seq")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let mut cursor = 0;
        while cursor < last {
            let page = self
                .store
                .log()
                .events_after(pk, cursor, EVENT_PAGE)
                .await?;
            for e in page.iter().take_while(|e| e.seq <= last) {
                lines.extend_from_slice(crate::sessions::view::entry_json(e).as_bytes());
                lines.push(b'\n');
                attached.extend(attached_paths(&e.body));
                cursor = e.seq;
            }
            if page.len() < EVENT_PAGE as usize {
                break;
            }
        }
        let row = self
            .store
            .projections()
            .session(&ex.ws.id, &id, &ex.ws.user_id)
            .await?;
        let facts = self
            .store
            .projections()
            .record_facts(pk)
            .await?
            .ok_or(Error::NotFound)?;
        let record =
            crate::sessions::record::record(&row, &facts, (self.harness)(&facts.agent_engine));
        let detail = serde_json::to_value(crate::sessions::view::detail(&row))
            .map_err(|e| Error::Internal(format!("cannot encode session: {e}")))?;
        let totals: Value = row_usage(&stored);
        let usage = json!({
            "usage": totals,
            "tokens": record.get("tokens").cloned().unwrap_or(Value::Null),
            "cost": record.get("cost").cloned().unwrap_or(Value::Null),
        });
        ex.add(out, &format!("{dir}/events.jsonl"), &lines)?;
        ex.add(out, &format!("{dir}/session.json"), &encode(&detail)?)?;
        ex.add(out, &format!("{dir}/record.json"), &encode(&record)?)?;
        ex.add(out, &format!("{dir}/usage.json"), &encode(&usage)?)?;
        ex.add(out, &format!("{dir}/store.json"), &encode(&stored)?)?;
        let mut manifest_images = Vec::new();
        for img in &images {
            let member = format!("images/{}", sha256_hex(&img.data));
            if ex.written.insert(member.clone()) {
                ex.add(out, &member, &img.data)?;
            }
            manifest_images.push(ManifestImage {
                storage_id: img.storage_id.clone(),
                mime_type: img.mime_type.clone(),
                member,
            });
        }
        let drive = self.drive(&ex.ws);
        for path in attached {
            if !ex.files_seen.insert(path.clone()) {
                continue;
            }
            let read = drive
                .check_file(&path)
                .ok()
                .and_then(|p| std::fs::read(drive.root().join(p)).ok());
            let Some(bytes) = read else {
                ex.manifest.skipped.push(LeftOut {
                    id: path,
                    reason: "attached file no longer in the drive".into(),
                });
                continue;
            };
            let member = format!("files/{}", sha256_hex(&bytes));
            if ex.written.insert(member.clone()) {
                ex.add(out, &member, &bytes)?;
            }
            ex.manifest.files.push(ManifestFile { path, member });
        }
        ex.manifest.sessions.push(ManifestSession {
            id,
            agent: stored.agent.slug.clone(),
            title: row.title.clone(),
            events: row.last_event_seq,
            images: manifest_images,
        });
        Ok(())
    }

    /// Imports an archive into `ws`: every checksum and every member checked first, then the
    /// drive files, then each session in a transaction of its own.
    pub async fn import(&self, ws: &Workspace, bytes: &[u8]) -> Result<ImportReport> {
        let checked = check_archive(bytes)?;
        // Ids held by another workspace refuse the archive before anything is written.
        let ids: Vec<String> = checked.sessions.iter().map(session_id).collect();
        let places = self.store.archives().id_places(&ws.id, ids.clone()).await?;
        if let Some((id, _)) = ids
            .iter()
            .zip(&places)
            .find(|(_, p)| **p == IdPlace::OtherWorkspace)
        {
            return Err(crate::store::archives::elsewhere(id));
        }
        // Drive files: the same bytes already there, or a path free to write.
        let drive = self.drive(ws);
        let mut report = ImportReport::default();
        let mut to_write = Vec::new();
        for (path, data) in &checked.files {
            match std::fs::read(drive.root().join(path)) {
                Ok(existing) if existing == *data => report.files_present.push(path.clone()),
                Ok(_) => {
                    return Err(Error::Conflict(
                        "file_exists",
                        format!(
                            "files: {path} is in the workspace drive already with other \
                             contents; move it away to import this archive"
                        ),
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    to_write.push((path.clone(), data));
                }
                Err(e) => return Err(Error::from_io(&format!("cannot read {path}"), &e)),
            }
        }
        for (path, data) in to_write {
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            match drive.write_new_file(dir, name, data) {
                Ok(_) => report.files_written.push(path),
                // Written by a concurrent import of the same archive.
                Err(Error::Exists) => report.files_present.push(path),
                Err(e) => return Err(e),
            }
        }
        for s in checked.sessions {
            let id = session_id(&s);
            match self.store.archives().import(&ws.id, s).await? {
                Imported::Created => report.imported.push(id),
                Imported::AlreadyPresent => report.unchanged.push(id),
            }
        }
        Ok(report)
    }
}

fn session_id(s: &ImportedSession) -> String {
    s.stored
        .columns
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn row_usage(stored: &PortableSession) -> Value {
    stored
        .columns
        .get("usage_totals")
        .and_then(Value::as_str)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| json!({}))
}

fn refused(why: String) -> Error {
    Error::invalid(format!("archive: {why}"))
}

/// Reads the members, checks each against the manifest and parses what will be written.
fn check_archive(bytes: &[u8]) -> Result<Checked> {
    let members = tar::read_members(bytes)?;
    let mut by_name: HashMap<String, Vec<u8>> = HashMap::new();
    for m in members {
        if by_name.contains_key(&m.name) {
            return Err(refused(format!("member {} appears twice", m.name)));
        }
        by_name.insert(m.name, m.data);
    }
    let manifest = by_name
        .remove("manifest.json")
        .ok_or_else(|| refused("no manifest.json: not a sessiond archive".into()))?;
    if crate::nul::escaped_in(&manifest) {
        return Err(refused("manifest.json: holds U+0000 (NUL)".into()));
    }
    let manifest: Manifest =
        serde_json::from_slice(&manifest).map_err(|e| refused(format!("manifest.json: {e}")))?;
    if manifest.format != FORMAT {
        return Err(refused(format!(
            "manifest.json: format {:?} is not {FORMAT:?}",
            manifest.format
        )));
    }
    for (name, sum) in &manifest.members {
        let data = by_name
            .get(name)
            .ok_or_else(|| refused(format!("member {name}: named by the manifest but missing")))?;
        if sha256_hex(data) != sum.sha256 || data.len() as u64 != sum.bytes {
            return Err(Error::invalid(format!(
                "archive: member {name}: checksum mismatch (the archive was changed after it was \
                 exported)"
            )));
        }
    }
    if let Some(extra) = by_name.keys().find(|n| !manifest.members.contains_key(*n)) {
        return Err(refused(format!("member {extra}: not in the manifest")));
    }
    let member = |name: &str| {
        by_name
            .get(name)
            .ok_or_else(|| refused(format!("member {name}: missing")))
    };
    let mut ids = BTreeSet::new();
    let mut sessions = Vec::new();
    for s in &manifest.sessions {
        if !crate::ids::looks_like_id(&s.id) || !ids.insert(s.id.clone()) {
            return Err(refused(format!(
                "sessions: {:?} is not a session id, or twice",
                s.id
            )));
        }
        let dir = format!("sessions/{}", s.id);
        let stored_bytes = member(&format!("{dir}/store.json"))?;
        if crate::nul::escaped_in(stored_bytes) {
            return Err(refused(format!("{dir}/store.json: holds U+0000 (NUL)")));
        }
        let stored: PortableSession = serde_json::from_slice(stored_bytes)
            .map_err(|e| refused(format!("{dir}/store.json: {e}")))?;
        check_stored(&dir, &s.id, &stored)?;
        let (events, prompts) = check_events(&dir, member(&format!("{dir}/events.jsonl"))?)?;
        let last = stored
            .columns
            .get("last_event_seq")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if events.len() as u64 != last {
            return Err(refused(format!(
                "{dir}/events.jsonl: {} events where the session's last seq is {last}",
                events.len()
            )));
        }
        let mut images = Vec::new();
        for i in &s.images {
            if !crate::ids::looks_like_id(&i.storage_id) || !i.mime_type.starts_with("image/") {
                return Err(refused(format!(
                    "{dir}: image {:?} is not an image",
                    i.storage_id
                )));
            }
            images.push(PortableImage {
                storage_id: i.storage_id.clone(),
                mime_type: i.mime_type.clone(),
                data: member(&i.member)?.clone(),
            });
        }
        sessions.push(ImportedSession {
            stored,
            events,
            images,
            prompts,
        });
    }
    let mut files = Vec::new();
    let mut paths = BTreeSet::new();
    for f in &manifest.files {
        let path = drive::normalise(&f.path)
            .filter(|p| !p.is_empty() && *p == f.path)
            .ok_or_else(|| refused(format!("files: {:?} is not a drive path", f.path)))?;
        let name = path.rsplit('/').next().unwrap_or(&path);
        drive::check_file_name(name).map_err(|e| refused(format!("files: {path}: {e}")))?;
        if path.split('/').any(|seg| seg.starts_with('.')) {
            return Err(refused(format!(
                "files: {path}: hidden paths are not imported"
            )));
        }
        if paths.insert(path.clone()) {
            files.push((path, member(&f.member)?.clone()));
        }
    }
    Ok(Checked { sessions, files })
}

/// Checks a session's stored facts: its id, agent and the columns whose values the server's
/// reads rely on.
fn check_stored(dir: &str, id: &str, s: &PortableSession) -> Result<()> {
    let bad = |why: String| refused(format!("{dir}/store.json: {why}"));
    let text = |name: &str| s.columns.get(name).and_then(Value::as_str);
    if text("id") != Some(id) {
        return Err(bad("columns/id is not the session's id".into()));
    }
    crate::agents::check_slug(&s.agent.slug).map_err(|e| bad(format!("agent/{e}")))?;
    if s.agent.name.trim().is_empty() || s.agent.name.chars().any(char::is_control) {
        return Err(bad("agent/name: must be a visible name".into()));
    }
    let known = |name: &str| {
        crate::store::archives::INT_COLUMNS
            .iter()
            .chain(crate::store::archives::TEXT_COLUMNS.iter())
            .any(|(n, _)| *n == name)
    };
    if let Some(unknown) = s.columns.keys().find(|k| !known(k)) {
        return Err(bad(format!(
            "columns/{unknown}: not a column sessiond keeps"
        )));
    }
    match text("turn_status").and_then(TurnStatus::parse) {
        None => return Err(bad("columns/turn_status: not a turn status".into())),
        Some(TurnStatus::Running) => {
            return Err(bad(
                "columns/turn_status: a running session is not imported".into(),
            ));
        }
        Some(_) => {}
    }
    if text("bucket").and_then(Bucket::parse).is_none() {
        return Err(bad("columns/bucket: not a bucket".into()));
    }
    if let Some(tier) = text("tier")
        && crate::timeline::Tier::parse(tier).is_none()
    {
        return Err(bad("columns/tier: not a tier".into()));
    }
    if !matches!(text("title_origin"), Some("excerpt" | "auto" | "manual")) {
        return Err(bad("columns/title_origin: not a title origin".into()));
    }
    for json_column in [
        "mode",
        "delivery_attempt",
        "todos",
        "follow_up_queue",
        "requested_machine",
        "machine_state",
        "machine",
        "engine_state",
        "engine_memo",
        "usage_totals",
        "metadata",
        "engine",
        "attribution_user",
    ] {
        if let Some(t) = text(json_column)
            && serde_json::from_str::<Value>(t).is_err()
        {
            return Err(bad(format!("columns/{json_column}: not JSON")));
        }
    }
    for name in [
        "parent_session_id",
        "created_by_session_id",
        "handed_off_to",
    ] {
        if let Some(t) = text(name)
            && !crate::ids::looks_like_id(t)
        {
            return Err(bad(format!("columns/{name}: not a session id")));
        }
    }
    for [input, turn] in &s.input_turns {
        if *input < 1 || *turn < 1 {
            return Err(bad("input_turns: seqs start at 1".into()));
        }
    }
    Ok(())
}

/// One line of `events.jsonl`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EntryLine<'a> {
    seq: u64,
    #[serde(borrow)]
    event: &'a serde_json::value::RawValue,
    created_at: i64,
}

/// The timeline of `events.jsonl`: seqs 1, 2, 3… without gaps, each event a known event of the
/// timeline, kept byte for byte; and the prompts to index for search.
#[allow(clippy::type_complexity)]
fn check_events(dir: &str, data: &[u8]) -> Result<(Vec<ImportedEvent>, Vec<(u64, String)>)> {
    let text =
        std::str::from_utf8(data).map_err(|_| refused(format!("{dir}/events.jsonl: not UTF-8")))?;
    if crate::nul::escaped_in(data) {
        return Err(refused(format!("{dir}/events.jsonl: holds U+0000 (NUL)")));
    }
    let mut events = Vec::new();
    let mut prompts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{dir}/events.jsonl: line {}", i + 1);
        let entry: EntryLine =
            serde_json::from_str(line).map_err(|e| refused(format!("{}: {e}", at())))?;
        if entry.seq != i as u64 + 1 {
            return Err(refused(format!(
                "{}: seq {} where {} was due",
                at(),
                entry.seq,
                i + 1
            )));
        }
        let body = entry.event.get();
        let event: crate::timeline::Event = serde_json::from_str(body)
            .map_err(|e| refused(format!("{}: not a timeline event: {e}", at())))?;
        if let crate::timeline::Event::PromptSubmitted { prompt, .. } = &event {
            prompts.push((entry.seq, prompt.clone()));
        }
        events.push(ImportedEvent {
            seq: entry.seq,
            created_at: entry.created_at,
            event_type: event.type_name().to_owned(),
            body: body.to_owned(),
        });
    }
    Ok((events, prompts))
}
