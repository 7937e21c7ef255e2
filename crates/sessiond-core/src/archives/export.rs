//! An export: each session's members one after another (its timeline in the history's shapes,
//! its views, its stored facts, its images and attached drive files), then the manifest.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{
    Archives, FORMAT, LeftOut, Manifest, ManifestFile, ManifestImage, ManifestSession, MemberSum,
    Workspace, encode, sha256_hex, tar,
};
use crate::clock;
use crate::error::{Error, Result};
use crate::store::archives::{PortableSession, SessionSnapshot};

/// Events read per page while exporting a timeline.
const EVENT_PAGE: u32 = 1000;

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
                Err(crate::store::Error::NotFound) => continue,
                Err(e) => return Err(e.into()),
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

impl Archives {
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
}

fn row_usage(stored: &PortableSession) -> Value {
    stored
        .columns
        .get("usage_totals")
        .and_then(Value::as_str)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| json!({}))
}
