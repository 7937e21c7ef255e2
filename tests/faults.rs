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
    let (st, health) = s.get(&s.url("/healthz"));
    assert_eq!(st, 200);
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["storage"]["status"], "full", "{health}");
    assert!(health["storage"]["since"].is_u64(), "{health}");
    let (st, ready) = s.get(&s.url("/readyz"));
    assert_eq!(st, 503, "{ready}");
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
        !events
            .iter()
            .any(|e| e["event"]["note"] == Value::from("while full")),
        "a refused note was stored"
    );
    drop(s);
}
