//! Portable archives on the real server: a session (an agent's, a workspace's) exported as one
//! tar file and imported on another server — on the same backend, and from SQLite to PostgreSQL
//! and back — gives the same history, record, images and drive files; a second import changes
//! nothing; a changed member, an id of another workspace, a body over the limit and garbage are
//! refused with a 4xx that writes nothing; whole-workspace archives are for owners; and the CLI
//! (`sessiond export`, `sessiond import`) does the same on the data dir and the database.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use common::*;
use serde_json::{Value, json};
use sessiond::archives::tar;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\narchived pixels \x00\x01\xff";
const REPORT: &[u8] = b"quarterly report\n\x00\x01 binary tail \xff";

fn agents_url(s: &Server, rest: &str) -> String {
    s.url(&format!("/v1/ws/{WS}/agents{rest}"))
}

fn ws_url(s: &Server, slug: &str, rest: &str) -> String {
    s.url(&format!("/v1/ws/{slug}{rest}"))
}

/// Uploads `bytes` as `name` through an upload grant; the drive path it landed at.
fn upload(s: &Server, name: &str, bytes: &[u8]) -> String {
    let (status, g) = s.post(&s.sessions_url("/attachments/session"), &json!({}));
    assert_eq!(status, 200, "mint: {g}");
    let url = format!(
        "{}{}/{name}",
        g["vmBaseUrl"].as_str().unwrap(),
        g["uploadPath"].as_str().unwrap()
    );
    let resp = http_builder()
        .build()
        .unwrap()
        .put(url)
        .bearer_auth(g["uploadToken"].as_str().unwrap())
        .body(bytes.to_vec())
        .send()
        .expect("upload");
    let (status, v) = into_json(resp);
    assert_eq!(status, 201, "upload: {v}");
    v["path"].as_str().unwrap().to_owned()
}

/// Sessions worth archiving: one with an image, an attachment and two turns (the agent `root`),
/// one of the agent `research` that asked a question and waits for its answer. Their ids.
fn populate(s: &Server) -> (String, String) {
    let path = upload(s, "report.txt", REPORT);
    let v = s.create(json!({
        "prompt": "/reply archived zebra reply",
        "images": [{"data": B64.encode(PNG), "mimeType": "image/png"}],
        "attachments": [{"path": path, "name": "report.txt", "bytes": REPORT.len()}],
    }));
    let a = v["session"]["sessionId"].as_str().unwrap().to_owned();
    s.wait_terminal(&a, 1);
    let (status, m) = s.post(
        &s.sessions_url(&format!("/{a}/messages")),
        &json!({"prompt": "a second turn", "behavior": "follow_up"}),
    );
    assert_eq!(status, 200, "{m}");
    s.wait_terminal(&a, m["inputSeq"].as_u64().unwrap_or(3));
    let (status, v) = s.post(
        &agents_url(s, ""),
        &json!({"slug": "research", "name": "Research"}),
    );
    assert_eq!(status, 201, "{v}");
    // The agent's default session, made by its first message.
    let (status, v) = s.post(
        &agents_url(s, "/research/sessions/default/messages"),
        &json!({"prompt": "/ask which one? | left | right"}),
    );
    assert_eq!(status, 200, "{v}");
    let b = v["session"]["sessionId"]
        .as_str()
        .or(v["sessionId"].as_str())
        .unwrap_or_else(|| panic!("default message: {v}"))
        .to_owned();
    s.wait_terminal(&b, 1);
    s.wait_runner_idle();
    (a, b)
}

/// What another server must show the same: history, the detail (less the workspace's id, the
/// reader's unread flag and the agent's id: an agent the importing workspace has already, as it
/// always has `root`, keeps its own id) and the `/v2` record.
fn views(s: &Server, id: &str) -> (Vec<Value>, Value, Value) {
    let history = s.history_all(id);
    let mut detail = s.detail(id);
    let obj = detail.as_object_mut().unwrap();
    obj.remove("workspaceId");
    obj.remove("unread");
    obj["agent"].as_object_mut().unwrap().remove("id");
    let (status, mut record) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(status, 200, "record: {record}");
    // The agent's id again.
    record.as_object_mut().unwrap().remove("config_id");
    (history, detail, record)
}

fn get_archive(s: &Server, url: &str) -> Vec<u8> {
    let (status, headers, body) = s.get_bytes(url);
    assert_eq!(status, 200, "{url}: {}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/x-tar");
    body
}

fn post_archive_with(s: &Server, slug: &str, key: &str, archive: Vec<u8>) -> (u16, Value) {
    let resp = http_builder()
        .build()
        .unwrap()
        .post(ws_url(s, slug, "/import"))
        .bearer_auth(key)
        .header("content-type", "application/x-tar")
        .body(archive)
        .send()
        .expect("import");
    into_json(resp)
}

fn import(s: &Server, archive: Vec<u8>) -> (u16, Value) {
    post_archive_with(s, WS, &s.token.clone(), archive)
}

fn members(archive: &[u8]) -> Vec<tar::Member> {
    tar::read_members(archive).expect("a tar file")
}

fn manifest(archive: &[u8]) -> Value {
    let m = members(archive);
    let last = m.last().expect("members");
    assert_eq!(last.name, "manifest.json", "the manifest comes last");
    serde_json::from_slice(&last.data).unwrap()
}

fn rebuild(members: &[tar::Member]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        tar::write_member(&mut out, &m.name, &m.data, 0).unwrap();
    }
    tar::write_end(&mut out);
    out
}

fn drive_file(s: &Server, path: &str) -> Option<Vec<u8>> {
    std::fs::read(s.data_dir.join("drive").join(WS).join(path)).ok()
}

fn session_count(s: &Server) -> usize {
    let (status, v) = s.get(&s.sessions_url("?limit=100"));
    assert_eq!(status, 200, "{v}");
    v["sessions"].as_array().unwrap().len()
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Everything a server shows of `ids`, compared with what `from` shows.
fn assert_same(from: &Server, to: &Server, ids: &[&str]) {
    for id in ids {
        let (h1, d1, r1) = views(from, id);
        let (h2, d2, r2) = views(to, id);
        assert_eq!(h1, h2, "history of {id}");
        assert_eq!(d1, d2, "detail of {id}");
        assert_eq!(r1, r2, "record of {id}");
    }
}

#[test]
fn a_session_round_trips_onto_another_server_and_a_second_import_changes_nothing() {
    let a = Server::start();
    let (first, _) = populate(&a);
    let (status, _) = a.put(
        &a.sessions_url(&format!("/{first}/pin")),
        &json!({"pinned": true}),
    );
    assert_eq!(status, 200);
    let archive = get_archive(&a, &a.sessions_url(&format!("/{first}/export")));

    // The members: the timeline exactly as history shows it, the views, the image and the file,
    // each with its checksum in the manifest.
    let m = manifest(&archive);
    assert_eq!(m["format"], "sessiond-archive/1");
    assert_eq!(m["sessions"].as_array().unwrap().len(), 1);
    let all = members(&archive);
    for member in &all[..all.len() - 1] {
        let sum = &m["members"][&member.name];
        assert_eq!(sum["sha256"], sha256_hex(&member.data), "{}", member.name);
        assert_eq!(sum["bytes"], member.data.len(), "{}", member.name);
    }
    let events = all
        .iter()
        .find(|x| x.name == format!("sessions/{first}/events.jsonl"))
        .expect("events.jsonl");
    let lines: Vec<Value> = std::str::from_utf8(&events.data)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, a.history_all(&first), "one history entry per line");
    assert!(all.iter().any(|x| x.data == PNG), "the image is a member");
    assert!(
        all.iter().any(|x| x.data == REPORT),
        "the attached file is a member"
    );
    assert_eq!(m["files"][0]["path"], "uploads/report.txt");
    for name in ["session.json", "record.json", "usage.json", "store.json"] {
        assert!(
            all.iter()
                .any(|x| x.name == format!("sessions/{first}/{name}")),
            "{name}"
        );
    }
    let usage: Value = serde_json::from_slice(
        &all.iter()
            .find(|x| x.name.ends_with("/usage.json"))
            .unwrap()
            .data,
    )
    .unwrap();
    assert!(
        usage["cost"].is_object() && usage["tokens"].is_object(),
        "{usage}"
    );

    let b = Server::start();
    let (status, report) = import(&b, archive.clone());
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], json!([first]));
    assert_eq!(report["filesWritten"], json!(["uploads/report.txt"]));
    assert_same(&a, &b, &[&first]);
    assert_eq!(
        drive_file(&b, "uploads/report.txt").as_deref(),
        Some(REPORT)
    );
    let storage_id = a.history_all(&first)[1]["event"]["images"][0]["storageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _, png) = b.get_bytes(&b.sessions_url(&format!("/{first}/images/{storage_id}")));
    assert_eq!((status, png.as_slice()), (200, PNG));
    // Its pin comes along, so retention keeps it there too.
    let (status, pinned) = b.get(&b.sessions_url(&format!("/{first}/pin")));
    assert_eq!((status, pinned), (200, json!({"pinned": true})));
    // Its prompts are searchable where it was imported.
    let (status, found) = b.get(&b.sessions_url("?search=zebra"));
    assert_eq!(status, 200);
    assert_eq!(found["sessions"][0]["id"], first.as_str(), "{found}");

    // Again: nothing changes.
    let before = b.history_all(&first);
    let (status, report) = import(&b, archive.clone());
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"], json!([]));
    assert_eq!(report["unchanged"], json!([first]));
    assert_eq!(report["filesPresent"], json!(["uploads/report.txt"]));
    assert_eq!(b.history_all(&first), before);
    assert_eq!(session_count(&b), 1);

    // The imported session goes on like any other: a new turn appends after its last seq.
    let last = before.last().unwrap()["seq"].as_u64().unwrap();
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{first}/messages")),
        &json!({"prompt": "after the import", "behavior": "follow_up"}),
    );
    assert_eq!(status, 200, "{v}");
    b.wait_terminal(&first, last + 1);
    let after = b.history_all(&first);
    assert_eq!(after[last as usize]["seq"].as_u64(), Some(last + 1));
    assert_eq!(after[last as usize]["event"]["type"], "prompt_submitted");
}

#[test]
fn agent_and_workspace_exports_hold_their_sessions_and_need_an_owner() {
    let a = Server::start();
    let (first, second) = populate(&a);

    let whole = get_archive(&a, &ws_url(&a, WS, "/export"));
    let ids: Vec<String> = manifest(&whole)["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.contains(&first) && ids.contains(&second), "{ids:?}");
    let research = get_archive(&a, &ws_url(&a, WS, "/export?agent=research"));
    let m = manifest(&research);
    assert_eq!(m["sessions"].as_array().unwrap().len(), 1, "{m}");
    assert_eq!(m["sessions"][0]["id"], second.as_str());
    assert_eq!(m["sessions"][0]["agent"], "research");
    let (status, v) = a.get(&ws_url(&a, WS, "/export?agent=nobody"));
    assert_eq!(status, 404, "{v}");

    // The whole workspace onto another server: the agent comes along, with its id.
    let b = Server::start();
    let (status, report) = import(&b, whole.clone());
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["imported"].as_array().unwrap().len(), ids.len());
    assert_same(&a, &b, &[&first, &second]);
    let (_, agent_a) = a.get(&agents_url(&a, "/research"));
    let (_, agent_b) = b.get(&agents_url(&b, "/research"));
    assert_eq!(agent_a["id"], agent_b["id"]);
    // It was the agent's default session, and is again.
    let (status, d) = b.get(&agents_url(&b, "/research/sessions/default"));
    assert_eq!(status, 200, "{d}");
    assert!(d.to_string().contains(&second), "{d}");

    // A member (not an owner) of the workspace reads one session's archive, not the whole.
    let email = "member@default.test.local";
    cli(
        &a.data_dir,
        &[
            "user",
            "create",
            "--email",
            email,
            "--password-stdin",
            "--workspace",
            WS,
            "--role",
            "member",
        ],
        Some("another-password-123\n"),
    );
    let member = cli(
        &a.data_dir,
        &[
            "token",
            "create",
            "--user",
            email,
            "--workspace",
            WS,
            "--name",
            "m",
            "--scope",
            "sessions",
        ],
        None,
    );
    let as_member = |url: &str| {
        let resp = http_builder()
            .build()
            .unwrap()
            .get(url)
            .bearer_auth(&member)
            .send()
            .unwrap();
        resp.status().as_u16()
    };
    assert_eq!(as_member(&a.sessions_url(&format!("/{first}/export"))), 200);
    assert_eq!(as_member(&ws_url(&a, WS, "/export")), 403);
    let (status, v) = post_archive_with(&a, WS, &member, whole.clone());
    assert_eq!(status, 403, "{v}");

    // Another workspace's key reaches none of it.
    let other = workspace_member_key(&a.data_dir, "other", "owner");
    let as_other = |url: &str| {
        http_builder()
            .build()
            .unwrap()
            .get(url)
            .bearer_auth(&other)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(as_other(&a.sessions_url(&format!("/{first}/export"))), 404);
    assert_eq!(as_other(&ws_url(&a, WS, "/export")), 404);
    assert_eq!(
        as_other(&ws_url(
            &a,
            "other",
            &format!("/agent/sessions/{first}/export")
        )),
        404
    );
    // Its owner imports nothing whose ids this server holds in `default`.
    let (status, v) = post_archive_with(&a, "other", &other, whole);
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "session_exists_elsewhere");
    let resp = http_builder()
        .build()
        .unwrap()
        .get(ws_url(&a, "other", "/agent/sessions?limit=100"))
        .bearer_auth(&other)
        .send()
        .unwrap();
    let (_, listed) = into_json(resp);
    assert_eq!(listed["sessions"], json!([]), "nothing was written");
}

#[test]
fn a_changed_or_malformed_archive_is_refused_and_nothing_is_written() {
    let a = Server::start();
    let (first, _) = populate(&a);
    let archive = get_archive(&a, &a.sessions_url(&format!("/{first}/export")));
    let b = Server::start_with_config("[limits]\nmax_archive_bytes = 200000\n");

    // One byte of the timeline changed: refused, naming the member.
    let mut m = members(&archive);
    let events = m
        .iter_mut()
        .find(|x| x.name.ends_with("events.jsonl"))
        .unwrap();
    let at = events.data.iter().position(|&c| c == b'z').unwrap();
    events.data[at] = b'Z';
    let (status, v) = import(&b, rebuild(&m));
    assert_eq!(status, 400, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("sessions/{first}/events.jsonl")) && message.contains("checksum"),
        "{message}"
    );

    // A member the manifest does not name, a missing manifest, garbage, nothing at all.
    let mut extra = members(&archive);
    extra.insert(
        0,
        tar::Member {
            name: "extra.txt".into(),
            data: b"x".to_vec(),
        },
    );
    let (status, v) = import(&b, rebuild(&extra));
    assert_eq!(status, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("extra.txt"), "{v}");
    let mut headless = members(&archive);
    headless.pop();
    let (status, v) = import(&b, rebuild(&headless));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("manifest.json"),
        "{v}"
    );
    let (status, v) = import(&b, b"not a tar file at all".repeat(100));
    assert_eq!(status, 400, "{v}");
    let (status, v) = import(&b, Vec::new());
    assert_eq!(status, 400, "{v}");
    // A consistent archive whose contents are not a session's: checksums recomputed.
    let mut forged = members(&archive);
    let store = forged
        .iter_mut()
        .find(|x| x.name.ends_with("store.json"))
        .unwrap();
    let mut facts: Value = serde_json::from_slice(&store.data).unwrap();
    facts["columns"]["turn_status"] = json!("running");
    store.data = serde_json::to_vec(&facts).unwrap();
    let (data, name) = (store.data.clone(), store.name.clone());
    let last = forged.last_mut().unwrap();
    let mut man: Value = serde_json::from_slice(&last.data).unwrap();
    man["members"][&name] = json!({"sha256": sha256_hex(&data), "bytes": data.len()});
    last.data = serde_json::to_vec(&man).unwrap();
    let (status, v) = import(&b, rebuild(&forged));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("turn_status"),
        "{v}"
    );

    // Over `limits.max_archive_bytes`: 413.
    let (status, v) = import(&b, vec![0u8; 300_000]);
    assert_eq!(status, 413, "{v}");
    assert_eq!(v["error"], "payload_too_large");

    assert_eq!(session_count(&b), 0, "nothing was written");
    assert!(
        drive_file(&b, "uploads/report.txt").is_none(),
        "no file was written"
    );

    // A drive path that holds other bytes refuses the archive before any session is written.
    std::fs::create_dir_all(b.data_dir.join("drive").join(WS).join("uploads")).unwrap();
    std::fs::write(
        b.data_dir.join("drive").join(WS).join("uploads/report.txt"),
        b"mine",
    )
    .unwrap();
    let (status, v) = import(&b, archive);
    assert_eq!(status, 409, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("uploads/report.txt"),
        "{v}"
    );
    assert_eq!(session_count(&b), 0);
}

#[test]
fn a_session_whose_turn_runs_is_not_exported() {
    let a = Server::start();
    let busy = a.create_prompt("/await_steer\n/reply done");
    a.wait_for_event(&busy, &["turn_started"], 1, Duration::from_secs(20));
    let (status, v) = a.get(&a.sessions_url(&format!("/{busy}/export")));
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "session_busy");
    let whole = get_archive(&a, &ws_url(&a, WS, "/export"));
    let m = manifest(&whole);
    assert_eq!(m["sessions"], json!([]));
    assert_eq!(m["skipped"][0]["id"], busy.as_str(), "{m}");
    let (status, _) = a.post(&a.sessions_url(&format!("/{busy}/interrupt")), &json!({}));
    assert_eq!(status, 200);
    a.wait_terminal(&busy, 1);
    a.wait_runner_idle();
    let m = manifest(&get_archive(&a, &ws_url(&a, WS, "/export")));
    assert_eq!(m["sessions"][0]["id"], busy.as_str(), "{m}");
}

/// Runs the CLI on `s`'s data dir and database; its output.
fn sessiond(s: &Server, args: &[&str]) -> String {
    cli(&s.data_dir, args, None)
}

fn temp_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

#[test]
fn the_cli_exports_and_imports_like_the_routes() {
    let a = Server::start();
    let (first, second) = populate(&a);
    let out = temp_file(a.tmp_dir(), "all.tar");
    let printed = sessiond(
        &a,
        &[
            "export",
            "--workspace",
            WS,
            "--output",
            out.to_str().unwrap(),
        ],
    );
    assert!(printed.contains("exported 2 session(s)"), "{printed}");
    let one = temp_file(a.tmp_dir(), "one.tar");
    sessiond(
        &a,
        &[
            "export",
            "--session",
            &first,
            "--output",
            one.to_str().unwrap(),
        ],
    );
    assert_eq!(
        manifest(&std::fs::read(&one).unwrap())["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let b = Server::start();
    let printed = sessiond(&b, &["import", "--workspace", WS, out.to_str().unwrap()]);
    assert!(printed.contains(&format!("imported {first}")), "{printed}");
    assert_same(&a, &b, &[&first, &second]);
    assert_eq!(
        drive_file(&b, "uploads/report.txt").as_deref(),
        Some(REPORT)
    );
    let printed = sessiond(&b, &["import", out.to_str().unwrap()]);
    assert!(printed.contains(&format!("unchanged {first}")), "{printed}");
    assert!(!printed.contains("imported"), "{printed}");

    // A changed archive: the CLI fails, naming the member, and writes nothing.
    let mut m = members(&std::fs::read(&one).unwrap());
    let rec = m
        .iter_mut()
        .find(|x| x.name.ends_with("record.json"))
        .unwrap();
    rec.data.push(b' ');
    let bad = temp_file(a.tmp_dir(), "bad.tar");
    std::fs::write(&bad, rebuild(&m)).unwrap();
    let c = Server::start();
    let mut cmd = sessiond_command();
    cmd.args(["import", bad.to_str().unwrap(), "--data-dir"])
        .arg(&c.data_dir)
        .args(database_args(&c.data_dir));
    let run = run_bounded(cmd, Duration::from_secs(60));
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("record.json") && err.contains("checksum"),
        "{err}"
    );
    assert_eq!(session_count(&c), 0);
}

#[test]
fn archives_carry_sessions_from_sqlite_to_postgresql_and_back() {
    if skip_on_postgres("this test starts servers on both backends itself, on the SQLite pass") {
        return;
    }
    let Some(db) = common::postgres::database("archives_across_backends") else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let a = Server::start();
    let (first, second) = populate(&a);
    let whole = get_archive(&a, &ws_url(&a, WS, "/export"));

    let tmp = tempfile::tempdir().unwrap();
    let pg_dir = tmp.path().join("pg");
    share_database(&pg_dir, &db);
    let b = Server::start_in(&pg_dir, &[]);
    assert!(
        b.database_url().is_some(),
        "the second server runs on PostgreSQL"
    );
    let (status, report) = import(&b, whole);
    assert_eq!(status, 200, "{report}");
    assert_same(&a, &b, &[&first, &second]);

    // And back, from what PostgreSQL exported.
    let again = get_archive(&b, &ws_url(&b, WS, "/export"));
    let c = Server::start();
    let (status, report) = import(&c, again);
    assert_eq!(status, 200, "{report}");
    assert_same(&a, &c, &[&first, &second]);
    assert_eq!(
        drive_file(&c, "uploads/report.txt").as_deref(),
        Some(REPORT)
    );
}
