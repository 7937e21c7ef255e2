//! The crash-and-fault suite: what an operator meets on a bad day. A full disk under a running
//! turn, `kill -9` under concurrent load, SSE clients that stall or vanish while the writer works.
//! Each test waits on conditions (history, health, metrics), never on elapsed time.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// A session whose turn writes a durable text every 30 ms for a long time: it is certainly
/// writing when the disk fills, and it would still be writing long after the test if its writes
/// did not fail.
fn long_writing_prompt() -> String {
    let mut p = String::from("/slow 30\n");
    for i in 0..3000 {
        p.push_str(&format!("/reply line {i}\n"));
    }
    p
}

#[test]
fn a_full_disk_ends_the_running_turn_answers_507_and_recovers_on_its_own() {
    if skip_on_postgres("the disk it fills holds the SQLite database") {
        return;
    }
    let Some(fs) = Tmpfs::mount("8m") else { return };
    let data = fs.path().join("data");
    let s = Server::start_in(&data, &[]);

    let id = s.create_prompt(&long_writing_prompt());
    // The turn is running and has written some of its lines.
    s.wait_for_event(&id, &["step"], 1, Duration::from_secs(20));
    assert_eq!(s.detail(&id)["turnStatus"], "running");

    let filler = fs.fill("filler");
    // Writes now fail: a note is refused with 507 storage_full (the first ones may still fit in
    // the database's write-ahead log).
    let note = s.sessions_url(&format!("/{id}/note"));
    let refused = poll_until(
        "a write refused for lack of space",
        Duration::from_secs(20),
        || {
            let (st, v) = s.post(&note, &json!({"note": "while full"}));
            (st != 200).then_some((st, v))
        },
    );
    assert_eq!(refused.0, 507, "{}", refused.1);
    assert_eq!(refused.1["error"], "storage_full", "{}", refused.1);
    assert!(refused.1["message"].is_string());
    // Health follows the writer's last batch: wait for the report rather than read it once (the
    // refusal and the report are two requests, and the turn keeps writing between them).
    let (health, ready) = poll_until(
        "health and readiness report the full disk",
        Duration::from_secs(20),
        || {
            let (st, health) = s.get(&s.url("/healthz"));
            assert_eq!(st, 200, "{health}");
            let (st, ready) = s.get(&s.url("/readyz"));
            (health["status"] == "degraded" && st == 503).then_some((health, ready))
        },
    );
    assert_eq!(health["storage"]["status"], "full", "{health}");
    assert!(health["storage"]["since"].is_u64(), "{health}");
    assert_eq!(ready["error"], "not_ready");
    // The running turn's own next write fails too: its terminal now waits for the storage.
    poll_until(
        "the turn waiting for storage",
        Duration::from_secs(20),
        || (s.metric("sessiond_turns_awaiting_storage") == Some(1.0)).then_some(()),
    );
    assert_eq!(s.metric("sessiond_store_writable"), Some(0.0));
    // Reads still work while the disk is full.
    assert_eq!(s.detail(&id)["turnStatus"], "running");

    std::fs::remove_file(&filler).expect("free the space");

    // The turn whose writes failed reaches its terminal without a restart, and says why.
    let terminal = s.wait_terminal(&id, 1);
    assert_eq!(terminal["event"]["type"], "complete", "{terminal}");
    assert_eq!(terminal["event"]["status"], "failed", "{terminal}");
    let error = terminal["event"]["error"].as_str().unwrap_or("");
    assert!(error.contains("storage is full"), "{terminal}");
    // Health turns ok on its own, and the session takes work again.
    poll_until("storage healthy again", Duration::from_secs(20), || {
        let (_, h) = s.get(&s.url("/healthz"));
        (h["status"] == "ok" && h["storage"]["status"] == "ok").then_some(())
    });
    let (st, _) = s.get(&s.url("/readyz"));
    assert_eq!(st, 200);
    assert_eq!(s.metric("sessiond_turns_awaiting_storage"), Some(0.0));
    assert_eq!(s.metric("sessiond_store_writable"), Some(1.0));
    assert!(
        s.metric("sessiond_store_commit_failures_total{reason=\"full\"}")
            .is_some_and(|n| n >= 1.0)
    );
    let after = s.detail(&id)["lastEventSeq"]
        .as_u64()
        .expect("lastEventSeq");
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "after the disk was freed"}),
    );
    assert_eq!(st, 200, "{v}");
    let t = s.wait_terminal(&id, after + 1);
    assert_eq!(t["event"]["type"], "complete", "{t}");
    assert_eq!(t["event"]["status"], "completed", "{t}");
    // Nothing was written twice or skipped: seqs are 1..=n.
    let events = s.history_all(&id);
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(
        !events.iter().any(|e| e["event"]["note"] == "while full"),
        "a refused note was stored"
    );
    drop(s);
}

/// Five rounds of `kill -9` while clients submit notes and messages with `clientRequestId`s:
/// every acknowledged input is in the timeline exactly once, a retry of any input (acknowledged
/// or not) returns the original or stores it once, no session is left running, and seqs have no
/// gaps.
#[test]
fn kill9_rounds_under_concurrent_load_lose_and_duplicate_nothing() {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::{Arc, Mutex};

    let mut s = Server::start_with_config("[runner]\nack_window_ms = 50\n");
    let sessions: Vec<String> = (0..4)
        .map(|i| s.create_prompt(&format!("/slow 20\n/stream 50\n/reply base {i}")))
        .collect();
    /// (session, clientRequestId, kind) -> the seq the server acknowledged.
    type Acked = Arc<Mutex<HashMap<(String, String, &'static str), u64>>>;
    /// (session, clientRequestId, kind, body) of every input sent.
    type Sent = Vec<(String, String, &'static str, Value)>;
    let acked: Acked = Arc::default();
    let mut sent: Sent = Vec::new();
    for round in 0..5 {
        let base = s.base.clone();
        let token = s.token.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let round_sent: Arc<Mutex<Sent>> = Arc::default();
        let clients: Vec<_> = (0..6)
            .map(|c| {
                let (base, token, sessions) = (base.clone(), token.clone(), sessions.clone());
                let (acked, stop, round_sent) =
                    (Arc::clone(&acked), Arc::clone(&stop), Arc::clone(&round_sent));
                std::thread::spawn(move || {
                    let http = reqwest::blocking::Client::builder()
                        .timeout(Duration::from_secs(10))
                        .build()
                        .expect("client");
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        n += 1;
                        let sid = &sessions[(c + n) % sessions.len()];
                        let id = new_uuid();
                        let (kind, path, body) = if n % 3 == 0 {
                            (
                                "message",
                                "messages",
                                json!({"prompt": format!("/reply r{round} c{c} n{n}"), "behavior": "follow_up", "clientRequestId": id}),
                            )
                        } else {
                            ("note", "note", json!({"note": format!("r{round} c{c} n{n}"), "clientRequestId": id}))
                        };
                        round_sent
                            .lock()
                            .unwrap()
                            .push((sid.clone(), id.clone(), kind, body.clone()));
                        let url = format!("{base}/v1/ws/{WS}/agent/sessions/{sid}/{path}");
                        let Ok(r) = http
                            .post(&url)
                            .header("authorization", format!("Bearer {token}"))
                            .json(&body)
                            .send()
                        else {
                            continue;
                        };
                        if r.status().as_u16() != 200 {
                            continue;
                        }
                        let Ok(v) = r.json::<Value>() else { continue };
                        let seq = v["seq"].as_u64().or_else(|| v["inputSeq"].as_u64());
                        if let Some(seq) = seq {
                            acked.lock().unwrap().insert((sid.clone(), id, kind), seq);
                        }
                    }
                })
            })
            .collect();
        // Kill once this round has acknowledged writes under way.
        let before = acked.lock().unwrap().len();
        poll_until(
            "writes acknowledged in this round",
            Duration::from_secs(30),
            || (acked.lock().unwrap().len() >= before + 20).then_some(()),
        );
        s.kill9();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for c in clients {
            let _ = c.join();
        }
        sent.extend(round_sent.lock().unwrap().drain(..));
        s.restart();
    }

    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 100,
        "only {} acknowledged inputs",
        acked.len()
    );
    // Every acknowledged input is stored exactly once, at the seq it was acknowledged with.
    let mut by_session: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for sid in &sessions {
        by_session.insert(sid.clone(), s.history_all(sid));
    }
    for ((sid, id, kind), seq) in &acked {
        let events = &by_session[sid];
        let matching: Vec<&Value> = events
            .iter()
            .filter(|e| e["event"]["clientRequestId"] == id.as_str())
            .collect();
        assert_eq!(matching.len(), 1, "{kind} {id} in {sid}: {matching:?}");
        assert_eq!(matching[0]["seq"], *seq, "{kind} {id}");
    }
    // Retrying any input returns the original (acknowledged) or stores it once (lost before the
    // commit): never twice.
    for (sid, id, kind, body) in sent.iter().step_by(7) {
        let path = if *kind == "note" { "note" } else { "messages" };
        let (st, v) = s.post(&s.sessions_url(&format!("/{sid}/{path}")), body);
        assert_eq!(st, 200, "retry of {kind} {id}: {v}");
        if let Some(seq) = acked.get(&(sid.clone(), id.clone(), *kind)) {
            let got = v["seq"].as_u64().or_else(|| v["inputSeq"].as_u64());
            assert_eq!(
                got,
                Some(*seq),
                "the retry of {kind} {id} returned another input"
            );
        }
    }
    for sid in &sessions {
        let events = s.history_all(sid);
        for (_, id, _, _) in sent.iter().filter(|(s2, ..)| s2 == sid) {
            let n = events
                .iter()
                .filter(|e| e["event"]["clientRequestId"] == id.as_str())
                .count();
            assert!(n <= 1, "{id} stored {n} times in {sid}");
        }
        let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
        assert_eq!(
            seqs,
            (1..=events.len() as u64).collect::<Vec<_>>(),
            "gap-free seq in {sid}"
        );
    }
    // Nothing is left running: every session reaches a terminal with nothing queued.
    for sid in &sessions {
        poll_until(&format!("{sid} settled"), Duration::from_secs(120), || {
            let d = s.detail(sid);
            (d["turnStatus"] != "running").then_some(())
        });
    }
}

/// Subscribers that stop reading, and ones that vanish, while the writer appends: every write is
/// acknowledged (a stalled stream never holds the writer back), the stalled streams are cut off
/// or freed instead of buffering without bound, and a reconnect with `Last-Event-ID` gets every
/// event it missed.
#[test]
fn stalled_and_vanishing_subscribers_cost_the_writer_nothing_and_reconnects_lose_nothing() {
    use std::io::{Read, Write};
    let s = Server::start_with_config("[stream]\nchannel_capacity = 64\n");
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    let addr = s.base.trim_start_matches("http://").to_owned();
    let open = |last: Option<u64>| {
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        let resume = last
            .map(|l| format!("Last-Event-ID: {l}\r\n"))
            .unwrap_or_default();
        write!(
            c,
            "GET /v1/ws/default/agent/sessions/{id}/events HTTP/1.1\r\nHost: {addr}\r\n\
             Authorization: Bearer {}\r\nAccept: text/event-stream\r\n{resume}\r\n",
            s.token
        )
        .expect("write");
        let mut head = [0u8; 12];
        c.read_exact(&mut head).expect("head");
        assert_eq!(&head, b"HTTP/1.1 200");
        c
    };
    // 50 that never read, 50 that hang up at once.
    let stalled: Vec<_> = (0..50).map(|_| open(None)).collect();
    for c in (0..50).map(|_| open(None)) {
        drop(c);
    }
    // A reader to resume later, from the current end.
    let last = s.detail(&id)["lastEventSeq"].as_u64().expect("seq");
    let note = s.sessions_url(&format!("/{id}/note"));
    let big = "x".repeat(8 * 1024);
    for i in 0..300 {
        let (st, v) = s.post(&note, &json!({"note": format!("{i} {big}")}));
        assert_eq!(st, 200, "write {i} with stalled subscribers: {v}");
    }
    // The vanished ones are gone; the stalled ones are cut off once they fall behind (their
    // send buffers are full long before 300 notes of 8 KiB), or still counted while open.
    poll_until("vanished streams freed", Duration::from_secs(10), || {
        let open = s.metric("sessiond_sse_subscribers")?;
        (open <= 50.0).then_some(())
    });
    drop(stalled);
    poll_until(
        "stalled streams freed after they hung up",
        Duration::from_secs(10),
        || (s.metric("sessiond_sse_subscribers") == Some(0.0)).then_some(()),
    );
    // A reconnect from where the reader left off gets every note, in order, without gaps.
    let sse = s.sse(&id, None, Some(last));
    let mut seqs = Vec::new();
    while seqs.len() < 300 {
        let f = sse
            .next_frame(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("stream ended after {} frames", seqs.len()));
        if let Some(seq) = f.id {
            seqs.push(seq);
        }
    }
    assert_eq!(seqs, (last + 1..=last + 300).collect::<Vec<_>>());
}

/// Every file under `dir`, hidden ones (an upload's temporary file) included.
fn all_files(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Checks the storage is reported full: `/healthz` degraded, `/readyz` 503, and a write 507.
fn assert_reported_full(s: &Server, id: &str) {
    let (st, health) = s.get(&s.url("/healthz"));
    assert_eq!(st, 200, "{health}");
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["storage"]["status"], "full", "{health}");
    let (st, ready) = s.get(&s.url("/readyz"));
    assert_eq!(st, 503, "{ready}");
    assert_eq!(ready["error"], "not_ready", "{ready}");
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "while full"}),
    );
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"], "storage_full", "{v}");
    assert!(v["message"].is_string(), "{v}");
}

/// Waits until `/healthz` and `/readyz` say the storage writes again.
fn wait_healthy(s: &Server) {
    poll_until("storage healthy again", Duration::from_secs(20), || {
        let (_, h) = s.get(&s.url("/healthz"));
        let (ready, _) = s.get(&s.url("/readyz"));
        (h["status"] == "ok" && h["storage"]["status"] == "ok" && ready == 200).then_some(())
    });
}

/// A server started on a data dir whose disk is already full (after a clean stop, which removes
/// the database's write-ahead log and shared-memory index, and after `kill -9` in the middle of a
/// turn, which leaves that turn for start-up recovery to end) starts, serves reads, reports the
/// fault, refuses writes with 507, and recovers on its own when space returns.
#[test]
fn a_server_started_on_a_full_disk_serves_reads_and_recovers_when_space_returns() {
    if skip_on_postgres("the disk it fills holds the SQLite database") {
        return;
    }
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let data = fs.path().join("data");
    let mut s = Server::start_in(&data, &[]);
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    let history = s.history_all(&id);
    let status = s.detail(&id)["turnStatus"].clone();

    // 1. After a clean stop.
    assert!(s.stop().success());
    let filler = fs.fill("filler");
    s.restart();
    assert_eq!(s.history_all(&id), history, "reads while the disk is full");
    assert_eq!(s.detail(&id)["turnStatus"], status);
    let (st, list) = s.get(&s.sessions_url(""));
    assert_eq!(st, 200, "{list}");
    assert_reported_full(&s, &id);
    std::fs::remove_file(&filler).expect("free the space");
    wait_healthy(&s);
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "space again"}),
    );
    assert_eq!(st, 200, "{v}");

    // 2. After kill -9 with a turn running: start-up recovery cannot write its terminal yet.
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": long_writing_prompt()}),
    );
    assert_eq!(st, 200, "{v}");
    let from = s.detail(&id)["lastEventSeq"].as_u64().expect("seq");
    s.wait_for_event(&id, &["step"], from, Duration::from_secs(20));
    s.kill9();
    let filler = fs.fill("filler");
    s.restart();
    assert_eq!(s.detail(&id)["turnStatus"], "running", "reads while full");
    assert_reported_full(&s, &id);
    std::fs::remove_file(&filler).expect("free the space");
    wait_healthy(&s);
    // Recovery ends the cut-off turn once it can write, and the session takes work again.
    let t = s.wait_terminal(&id, from);
    assert_eq!(t["event"]["type"], "interrupted", "{t}");
    let after = s.detail(&id)["lastEventSeq"].as_u64().expect("seq");
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "after the disk was freed"}),
    );
    assert_eq!(st, 200, "{v}");
    let t = s.wait_terminal(&id, after + 1);
    assert_eq!(t["event"]["status"], "completed", "{t}");
    let events = s.history_all(&id);
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    assert!(
        !events.iter().any(|e| e["event"]["note"] == "while full"),
        "a refused note was stored"
    );
}

/// An upload while the disk is full answers 507 `storage_full` JSON and leaves no file behind,
/// not even its temporary one; once space returns the same upload works.
#[test]
fn an_upload_on_a_full_disk_answers_507_leaves_nothing_and_works_again() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let data = fs.path().join("data");
    let s = Server::start_in(&data, &[]);
    let (st, grant) = s.post(&s.sessions_url("/attachments/session"), &json!({}));
    assert_eq!(st, 200, "{grant}");
    let url = format!(
        "{}{}/report.bin",
        grant["vmBaseUrl"].as_str().expect("vmBaseUrl"),
        grant["uploadPath"].as_str().expect("uploadPath")
    );
    let put = |body: Vec<u8>| {
        let r = reqwest::blocking::Client::new()
            .put(&url)
            .header(
                "authorization",
                format!("Bearer {}", grant["uploadToken"].as_str().expect("token")),
            )
            .body(body)
            .send()
            .expect("the upload gets an answer");
        into_json(r)
    };
    let drive = data.join("drive");
    let before = all_files(&drive);
    let body: Vec<u8> = (0..2 * 1024 * 1024).map(|i| (i % 251) as u8).collect();

    let filler = fs.fill("filler");
    let (st, v) = put(body.clone());
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"], "storage_full", "{v}");
    assert!(v["message"].is_string(), "{v}");
    assert_eq!(all_files(&drive), before, "the failed upload left a file");
    // Room for a part of the file only: the upload fails midway and still leaves nothing.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .expect("filler");
    let len = f.metadata().expect("filler size").len();
    f.set_len(len - 512 * 1024).expect("free 512 KiB");
    drop(f);
    let (st, v) = put(body.clone());
    assert_eq!(st, 507, "{v}");
    assert_eq!(v["error"], "storage_full", "{v}");
    assert_eq!(all_files(&drive), before, "the failed upload left a file");

    std::fs::remove_file(&filler).expect("free the space");
    let (st, v) = put(body.clone());
    assert_eq!(st, 201, "{v}");
    let stored = drive.join(WS).join(v["path"].as_str().expect("path"));
    assert_eq!(std::fs::read(&stored).expect("the uploaded file"), body);
}
