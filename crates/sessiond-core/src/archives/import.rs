//! An import: the whole archive checked against its manifest and parsed before anything is
//! written, then its drive files, then each session in a transaction of its own.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Archives, FORMAT, Manifest, Workspace, sha256_hex, tar};
use crate::drive;
use crate::error::{Error, Result};
use crate::store::archives::{
    IdPlace, Imported, ImportedEvent, ImportedSession, PortableImage, PortableSession,
};
use crate::store::projections::{Bucket, TurnStatus};

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
            return Err(crate::store::archives::elsewhere(id).into());
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
