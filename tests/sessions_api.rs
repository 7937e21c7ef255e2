//! Integration tests of every routed Sessions API operation (`/v1/ws/{workspaceSlug}/agent/sessions`)
//! against the real binary.
//!
//! Every JSON response is validated against its seed response schema (`schemas/sessions/`), every
//! history event and every SSE event against the known seed event variants. Rule ids (R#, S#) refer
//! to the digest `spec/sessions-api.md`.

mod common;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use common::*;
use serde_json::{Value, json};

const LIST: &str = "GET_v1_ws__workspaceSlug__agent_sessions.response.json";
const CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const EVENTS: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId__events.response.json";
const MESSAGES: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.response.json";
const NOTE: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.response.json";
const ANSWER: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.response.json";
const INTERRUPT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__interrupt.response.json";
const TITLE: &str = "PATCH_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const ARCHIVE: &str = "PUT_v1_ws__workspaceSlug__agent_sessions__sessionId__archive.response.json";
const READ: &str = "PUT_v1_ws__workspaceSlug__agent_sessions__sessionId__read.response.json";
const DELETE: &str = "DELETE_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const ACTIVITY: &str = "GET_v1_ws__workspaceSlug__agent_sessions_activity.response.json";

/// Long enough that nothing in a test races it, short enough that a hung turn fails fast.
const WAIT: Duration = Duration::from_secs(20);

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

// ---------------------------------------------------------------------------------------------
// Checked helpers: each asserts the status and validates the body against the seed schema.

fn assert_not_found(status: u16, body: &Value) {
    assert_error(status, body, 404, "not_found");
}

fn list_url(s: &Server, query: &str) -> String {
    if query.is_empty() {
        s.sessions_url("")
    } else {
        s.sessions_url(&format!("?{query}"))
    }
}

/// `GET …/agent/sessions?query`, 200 + schema.
fn list(s: &Server, query: &str) -> Value {
    let (status, v) = s.get(&list_url(s, query));
    assert_eq!(status, 200, "list {query:?}: {v}");
    assert_schema(LIST, &v);
    v
}

fn ids_of(page: &Value) -> Vec<String> {
    page["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect()
}

fn list_ids(s: &Server, query: &str) -> Vec<String> {
    ids_of(&list(s, query))
}

/// Walks every page of a listing (`query` without cursor) and returns the ids in order.
fn list_all_ids(s: &Server, query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let q = match &cursor {
            Some(c) => format!("{query}&cursor={}", query_escape(c)),
            None => query.to_owned(),
        };
        let page = list(s, &q);
        out.extend(ids_of(&page));
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.as_str().expect("nextCursor is a string").to_owned()),
            None => return out,
        }
    }
    panic!("listing never ended");
}

fn create_id(s: &Server, prompt: &str) -> String {
    id_of(&create_checked(s, json!({ "prompt": prompt })))
}

/// `GET …/{id}/history?query`, 200 + schema + known events.
fn history_page(s: &Server, id: &str, query: &str) -> Value {
    let (status, v) = s.get(&s.sessions_url(&format!("/{id}/history?{query}")));
    assert_eq!(status, 200, "history {id} {query:?}: {v}");
    check_history_page(&v);
    v
}

/// Every event of a session (forward walk, every page validated).
fn history(s: &Server, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let page = history_page(s, id, &format!("cursor={cursor}&limit=500"));
        out.extend(page["events"].as_array().expect("events").iter().cloned());
        match page.get("nextCursor").and_then(Value::as_u64) {
            Some(next) => cursor = next,
            None => return out,
        }
    }
}

fn after(events: &[Value], from: u64) -> Vec<Value> {
    events.iter().filter(|e| seq(e) > from).cloned().collect()
}

/// The text of every durable `step` `text` event.
fn texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| etype(e) == "step" && e["event"]["step"]["type"] == "text")
        .map(|e| e["event"]["step"]["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Waits for the first turn of a fresh session to end with `terminal_type`.
fn settle(s: &Server, id: &str, terminal_type: &str) -> Value {
    let t = wait_terminal(s, id, 0);
    assert_eq!(etype(&t), terminal_type, "terminal: {t:#}");
    t
}

/// `POST …/{id}/messages`, 200 + schema.
fn message(s: &Server, id: &str, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/messages")), &body);
    assert_eq!(status, 200, "message {body}: {v}");
    assert_schema(MESSAGES, &v);
    assert_eq!(v["ok"], true);
    assert!(
        matches!(v["delivery"].as_str(), Some("accepted" | "queued")),
        "{v}"
    );
    v
}

/// `POST …/{id}/note`, 200 + schema; returns the seq.
fn note(s: &Server, id: &str, body: Value) -> u64 {
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/note")), &body);
    assert_eq!(status, 200, "note {body}: {v}");
    assert_schema(NOTE, &v);
    v["seq"].as_u64().expect("seq")
}

/// `POST …/{id}/answer`, 200 + schema.
fn answer(s: &Server, id: &str, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/answer")), &body);
    assert_eq!(status, 200, "answer {body}: {v}");
    assert_schema(ANSWER, &v);
    assert_eq!(v["ok"], true);
    assert!(
        matches!(v["delivery"].as_str(), Some("accepted" | "queued")),
        "{v}"
    );
    v
}

fn interrupt(s: &Server, id: &str) {
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "interrupt: {v}");
    assert_schema(INTERRUPT, &v);
    assert_eq!(v, json!({"ok": true}));
}

fn set_title(s: &Server, id: &str, title: &str) -> Value {
    let (status, v) = s.patch(
        &s.sessions_url(&format!("/{id}")),
        &json!({ "title": title }),
    );
    assert_eq!(status, 200, "PATCH title: {v}");
    assert_schema(TITLE, &v);
    v
}

fn archive(s: &Server, id: &str, archived: bool) -> Value {
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{id}/archive")),
        &json!({ "archived": archived }),
    );
    assert_eq!(status, 200, "archive: {v}");
    assert_schema(ARCHIVE, &v);
    v
}

fn mark_read(s: &Server, id: &str, seq: u64) -> u64 {
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{id}/read")),
        &json!({ "seq": seq }),
    );
    assert_eq!(status, 200, "read: {v}");
    assert_schema(READ, &v);
    v["lastReadSeq"].as_u64().expect("lastReadSeq")
}

fn activity(s: &Server, query: &str) -> Value {
    let (status, v) = s.get(&s.sessions_url(&format!("/activity?{query}")));
    assert_eq!(status, 200, "activity: {v}");
    assert_schema(ACTIVITY, &v);
    v
}

fn png(payload: &[u8]) -> Vec<u8> {
    let mut b = PNG_SIGNATURE.to_vec();
    b.extend_from_slice(payload);
    b
}

fn png_image(payload: &[u8]) -> Value {
    json!({ "data": B64.encode(png(payload)), "mimeType": "image/png" })
}

fn total_sessions(s: &Server) -> usize {
    list_ids(s, "limit=100").len() + list_ids(s, "limit=100&archived=only").len()
}

// ---------------------------------------------------------------------------------------------
// List (S9, R13)

#[test]
fn list_is_newest_first_with_default_limit_and_cursor_paging_r13_s9() {
    let s = Server::start();
    assert_eq!(list(&s, ""), json!({"sessions": []}), "empty workspace");

    let created: Vec<String> = (0..25)
        .map(|i| create_id(&s, &format!("listing number {i}")))
        .collect();
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();

    // Default limit 20, newest first, with a cursor for the rest.
    let page = list(&s, "");
    assert_eq!(ids_of(&page), newest_first[..20].to_vec());
    assert!(page["nextCursor"].is_string(), "{page}");
    let stamps: Vec<i64> = page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["createdAt"].as_i64().unwrap())
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");

    // Limit bounds 1..=100.
    let one = list(&s, "limit=1");
    assert_eq!(ids_of(&one), newest_first[..1].to_vec());
    assert!(one["nextCursor"].is_string());
    let all = list(&s, "limit=100");
    assert_eq!(ids_of(&all), newest_first);
    assert!(
        all.get("nextCursor").is_none(),
        "a complete page has no cursor"
    );

    // Opaque cursor paging visits every session exactly once, in order, then ends.
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = match &cursor {
            Some(c) => format!("limit=7&cursor={}", query_escape(c)),
            None => "limit=7".to_owned(),
        };
        let page = list(&s, &q);
        pages.push(ids_of(&page));
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.as_str().unwrap().to_owned()),
            None => break,
        }
        assert!(pages.len() < 10, "paging does not end");
    }
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [7, 7, 7, 4]);
    assert_eq!(pages.concat(), newest_first);
    assert_eq!(list_all_ids(&s, "limit=3"), newest_first);
    assert_eq!(list_all_ids(&s, "limit=25"), newest_first);

    // A cursor stays valid when newer sessions arrive: the walk continues below it.
    let first = list(&s, "limit=10");
    let c = first["nextCursor"].as_str().unwrap().to_owned();
    let newer = create_id(&s, "arrived during the walk");
    let rest = list(&s, &format!("limit=100&cursor={}", query_escape(&c)));
    assert_eq!(ids_of(&rest), newest_first[10..].to_vec());
    assert_eq!(list_ids(&s, "limit=1"), [newer]);
}

#[test]
fn list_rejects_invalid_query_values_s9() {
    let s = Server::start();
    create_id(&s, "one session");
    let long_search = "x".repeat(201);
    for q in [
        "bucket=nope",
        "bucket=",
        "limit=0",
        "limit=101",
        "limit=-1",
        "limit=abc",
        "archived=all",
        "archived=",
        "cursor=garbage",
        "cursor=",
        "agentId=",
        "excludeDefault=yes",
        &format!("search={long_search}"),
    ] {
        let (status, v) = s.get(&list_url(&s, q));
        assert_invalid(status, &v);
        assert!(v["message"].is_string(), "{q}: {v}");
    }
    // The bounds themselves are fine.
    assert_eq!(list_ids(&s, "limit=1").len(), 1);
    assert_eq!(list_ids(&s, "limit=100").len(), 1);
    list(&s, &format!("search={}", "x".repeat(200)));
}

#[test]
fn list_bucket_filter_follows_the_turn_r11_r13() {
    let s = Server::start();
    let done = create_id(&s, "plain prompt, done quickly");
    let running = create_id(&s, "/slow 30000\n/reply x");
    let asking = create_id(&s, "/ask Pick | a | b");
    let scheduled = create_id(&s, "/sleep 60000");
    settle(&s, &done, "complete");
    settle(&s, &asking, "ask");
    settle(&s, &scheduled, "sleep");
    wait_event(&s, &running, &["turn_started"], 0);

    for (bucket, id, turn_status) in [
        ("done", &done, "complete"),
        ("running", &running, "running"),
        ("asking", &asking, "ask"),
        ("scheduled", &scheduled, "sleep"),
    ] {
        let page = list(&s, &format!("bucket={bucket}"));
        assert_eq!(ids_of(&page), [id.as_str()], "bucket={bucket}");
        assert_eq!(page["sessions"][0]["bucket"], bucket);
        assert_eq!(page["sessions"][0]["turnStatus"], turn_status);
        let d = detail_checked(&s, id);
        assert_eq!(d["bucket"], bucket);
        assert_eq!(d["turnStatus"], turn_status);
    }
    // Without a bucket: everything, newest first (R13).
    assert_eq!(list_ids(&s, ""), [scheduled, asking, running, done]);
}

#[test]
fn list_search_matches_titles_and_prompts() {
    let s = Server::start();
    let a = create_id(&s, "Alpha banana report");
    let b = create_id(
        &s,
        "Cherry delta summary\nthe body mentions zucchini only here",
    );
    let c = create_id(&s, "unrelated words");
    for id in [&a, &b, &c] {
        settle(&s, id, "complete");
    }
    let search = |q: &str| list_ids(&s, &format!("search={}", query_escape(q)));

    assert_eq!(search("banana"), [a.as_str()], "title word");
    assert_eq!(search("BANANA"), [a.as_str()], "case-insensitive");
    assert_eq!(search("alpha banana"), [a.as_str()], "all words must match");
    assert_eq!(search("banan"), [a.as_str()], "last word is a prefix");
    assert!(search("alpha zucchini").is_empty(), "words of two sessions");
    assert_eq!(
        search("zucchini"),
        [b.as_str()],
        "prompt text beyond the title"
    );
    assert!(search("nomatchanywhere").is_empty());
    // FTS syntax in the search box is text, never an error.
    for q in ["\"", "AND", "*", "a OR b", "NEAR(", "-x", "'"] {
        search(q);
    }

    // Later prompts (messages) are searchable too.
    let before = last_seq(&s, &c);
    message(&s, &c, json!({"prompt": "please include a kumquat"}));
    wait_terminal(&s, &c, before);
    assert_eq!(search("kumquat"), [c.as_str()]);

    // After PATCH title the new title is searchable.
    set_title(&s, &a, "Quarterly xylophone plan");
    assert_eq!(search("xylophone"), [a.as_str()]);

    // Search combines with other filters.
    assert_eq!(list_ids(&s, "search=banana&bucket=done"), [a.as_str()]);
    assert!(list_ids(&s, "search=banana&bucket=running").is_empty());
    archive(&s, &a, true);
    assert!(search("xylophone").is_empty(), "archived are excluded");
    assert_eq!(list_ids(&s, "search=xylophone&archived=only"), [a]);
}

/// Every prompt is searchable however many follow it (these fill more than one search row),
/// and a session that many prompts match is listed once.
#[test]
fn list_search_finds_the_first_of_many_prompts() {
    let s = Server::start();
    let a = create_id(&s, "Preserves\nquince with cardamom, slowly");
    let b = create_id(&s, "Unrelated\nbread dough");
    for id in [&a, &b] {
        settle(&s, id, "complete");
    }
    for i in 0..25 {
        for id in [&a, &b] {
            let before = last_seq(&s, id);
            let prompt = format!(
                "lantern step {i} of the plan: read the notes again, compare them with the \
                 earlier draft and write down what is still missing"
            );
            message(&s, id, json!({ "prompt": prompt }));
            wait_terminal(&s, id, before);
        }
    }
    let search = |q: &str| list_ids(&s, &format!("search={}", query_escape(q)));
    assert_eq!(search("cardamom"), [a.as_str()], "the first of 26 prompts");
    assert_eq!(search("quince cardam"), [a.as_str()]);
    assert_eq!(search("dough"), [b.as_str()]);
    assert_eq!(
        search("lantern"),
        [b.as_str(), a.as_str()],
        "each session once"
    );
    assert_eq!(search("lantern step 24"), [b.as_str(), a.as_str()]);
    assert!(search("cardamom dough").is_empty(), "words of two sessions");
}

#[test]
fn list_archived_filter_and_archive_restore_s10() {
    let s = Server::start();
    let a = create_id(&s, "first");
    let b = create_id(&s, "second");
    let c = create_id(&s, "third");

    let summary = archive(&s, &b, true);
    assert_eq!(summary["id"], b.as_str());
    let archived_at = summary["archivedAt"].as_f64().expect("archivedAt set");
    assert!(archived_at > 0.0);
    assert_eq!(detail_checked(&s, &b)["archivedAt"], summary["archivedAt"]);

    assert_eq!(list_ids(&s, ""), [c.clone(), a.clone()], "default excludes");
    assert_eq!(list_ids(&s, "archived=exclude"), [c.clone(), a.clone()]);
    let only = list(&s, "archived=only");
    assert_eq!(ids_of(&only), [b.as_str()]);
    assert_eq!(only["sessions"][0]["archivedAt"], summary["archivedAt"]);

    // Declared idempotent: archiving again keeps the first archivedAt.
    let again = archive(&s, &b, true);
    assert_eq!(again["archivedAt"], summary["archivedAt"]);

    // Restore clears archivedAt.
    let restored = archive(&s, &b, false);
    assert!(restored.get("archivedAt").is_none(), "{restored}");
    assert!(detail_checked(&s, &b).get("archivedAt").is_none());
    assert_eq!(list_ids(&s, ""), [c, b.clone(), a]);
    assert!(list_ids(&s, "archived=only").is_empty());
    archive(&s, &b, false);

    // Bad bodies are refused and change nothing.
    for body in [
        json!({}),
        json!({"archived": "yes"}),
        json!({"archived": null}),
    ] {
        let (status, v) = s.put(&s.sessions_url(&format!("/{b}/archive")), &body);
        assert_invalid(status, &v);
    }
    assert!(detail_checked(&s, &b).get("archivedAt").is_none());
}

#[test]
fn list_agent_filter_and_exclude_default_s9_r63() {
    let s = Server::start();
    let a = create_id(&s, "first");
    let b = create_id(&s, "second");
    let agent = detail_checked(&s, &a)["agent"]["id"]
        .as_str()
        .expect("agent.id")
        .to_owned();
    assert_eq!(
        list_ids(&s, &format!("agentId={}", query_escape(&agent))),
        [b.clone(), a.clone()]
    );
    assert!(list_ids(&s, "agentId=no-such-agent").is_empty());
    // No default session is bound, so excludeDefault leaves everything in.
    assert_eq!(list_ids(&s, "excludeDefault=true"), [b.clone(), a.clone()]);
    assert_eq!(
        list_ids(
            &s,
            &format!("excludeDefault=true&agentId={}", query_escape(&agent))
        ),
        [b, a]
    );
}

// ---------------------------------------------------------------------------------------------
// Create (R1, R5, R23, R24, R27, R28, S1, S5)

#[test]
fn create_returns_ref_snapshot_and_initial_history_r27_r28() {
    let s = Server::start();
    let v = create_checked(&s, json!({"prompt": "hello there"}));
    let id = id_of(&v);
    assert_eq!(v["dispatched"], false);
    assert!(
        matches!(v["delivery"].as_str(), Some("accepted" | "queued")),
        "{v}"
    );
    let snap = &v["snapshot"];
    assert_eq!(snap["id"], id.as_str());
    assert_eq!(snap["title"], "hello there");
    assert_eq!(snap["titleOrigin"], "excerpt");
    assert!(snap.get("createdBySessionId").is_none());
    assert!(snap.get("tier").is_none(), "no tier requested: {snap}");
    assert!(v["session"]["lastEventSeq"].as_u64().unwrap() >= 2);

    let events = v["history"]["events"].as_array().unwrap();
    assert_eq!(seq(&events[0]), 1);
    assert_eq!(etype(&events[0]), "session_created");
    assert_eq!(events[0]["event"]["prompt"], "hello there");
    let created_at = events[0]["event"]["createdAt"].as_str().expect("string");
    assert!(created_at.contains('T'), "RFC 3339: {created_at}");
    assert_eq!(seq(&events[1]), 2);
    let p = &events[1]["event"];
    assert_eq!(p["type"], "prompt_submitted");
    assert_eq!(p["prompt"], "hello there");
    assert_eq!(p["inputKind"], "initial");
    assert_eq!(p["behavior"], "steer", "R23 default");
    assert_eq!(p["sender"]["kind"], "user", "R5/R6");
    assert_eq!(p["sender"]["userId"], snap["userId"]);
    assert!(!p["sender"]["userId"].as_str().unwrap().is_empty());

    // The create response's history is the start of the real history (R27).
    let all = history(&s, &id);
    assert_eq!(&all[..events.len()], events.as_slice());

    // The turn runs to completion on its own (R1).
    let t = settle(&s, &id, "complete");
    assert_eq!(t["event"]["status"], "completed");
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
    assert_eq!(d["lastEventSeq"].as_u64(), Some(seq(&t)));
    assert_eq!(d["lastDeliveredInputSeq"].as_u64(), Some(2));
    assert_eq!(texts(&history(&s, &id)), ["echo: hello there"]);
}

#[test]
fn create_rejects_invalid_bodies_and_writes_nothing_r16_s1() {
    let s = Server::start();
    for body in [
        json!({}),
        json!({"prompt": ""}),
        json!({"prompt": 5}),
        json!({"prompt": "x", "tier": "ultra"}),
        json!({"prompt": "x", "behavior": "later"}),
        json!({"prompt": "x", "clientRequestId": "not-a-uuid"}),
        json!({"prompt": "x", "images": "nope"}),
        json!([1, 2]),
    ] {
        let (status, v) = s.post(&s.sessions_url(""), &body);
        assert_invalid(status, &v);
    }
    for raw in ["{", "", "null", "\"prompt\""] {
        let (status, v) = s.post_raw(&s.sessions_url(""), raw.to_owned());
        assert_invalid(status, &v);
    }
    assert_eq!(total_sessions(&s), 0);
}

#[test]
fn create_accepts_explicit_follow_up_behavior_r24() {
    let s = Server::start();
    let v = create_checked(
        &s,
        json!({"prompt": "Summarize release notes after indexing finishes.", "behavior": "follow_up"}),
    );
    let id = id_of(&v);
    assert_eq!(v["history"]["events"][1]["event"]["behavior"], "follow_up");
    // A new session has no turn yet: follow-up starts exactly like steer.
    settle(&s, &id, "complete");
    let events = history(&s, &id);
    assert_eq!(of_type(&events, "turn_started").len(), 1);
    assert_eq!(
        texts(&events),
        ["echo: Summarize release notes after indexing finishes."]
    );
}

#[test]
fn tier_on_create_and_message_is_sticky_r19_r21() {
    let s = Server::start();
    let v = create_checked(&s, json!({"prompt": "tiered", "tier": "economy"}));
    let id = id_of(&v);
    assert_eq!(v["snapshot"]["tier"], "economy");
    settle(&s, &id, "complete");
    assert_eq!(detail_checked(&s, &id)["tier"], "economy");

    // A message without tier keeps the sticky one.
    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "no tier here"}));
    wait_terminal(&s, &id, before);
    assert_eq!(detail_checked(&s, &id)["tier"], "economy");

    // An explicit tier on a message becomes the new sticky tier.
    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "go big", "tier": "frontier"}));
    assert_eq!(detail_checked(&s, &id)["tier"], "frontier");
    wait_terminal(&s, &id, before);
    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "still big?"}));
    wait_terminal(&s, &id, before);
    assert_eq!(detail_checked(&s, &id)["tier"], "frontier");

    // A message tier also becomes sticky on a session created without one.
    let plain = create_id(&s, "untiered");
    settle(&s, &plain, "complete");
    assert!(detail_checked(&s, &plain).get("tier").is_none());
    message(&s, &plain, json!({"prompt": "cheap", "tier": "balanced"}));
    assert_eq!(detail_checked(&s, &plain)["tier"], "balanced");

    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "x", "tier": "ultra"}),
    );
    assert_invalid(status, &v);
    assert_eq!(detail_checked(&s, &id)["tier"], "frontier");
}

// ---------------------------------------------------------------------------------------------
// History (R30–R33, S7)

/// A completed session padded with notes to `min_events` events.
fn session_with_events(s: &Server, min_events: u64) -> (String, u64) {
    let id = create_id(s, "history subject");
    settle(s, &id, "complete");
    let mut last = last_seq(s, &id);
    while last < min_events {
        last = note(s, &id, json!({"note": format!("padding {last}")}));
    }
    (id, last)
}

#[test]
fn history_forward_and_backward_walks_agree_r30_r31_r33() {
    let s = Server::start();
    let (id, n) = session_with_events(&s, 13);
    assert_eq!(n, 13);

    // Forward: cursor omitted starts at the first event; nextCursor is fed back as cursor.
    let mut forward: Vec<Value> = Vec::new();
    let mut sizes = Vec::new();
    let mut query = "limit=4".to_owned();
    loop {
        let page = history_page(&s, &id, &query);
        let events = page["events"].as_array().unwrap().clone();
        let seqs: Vec<u64> = events.iter().map(seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        sizes.push(events.len());
        forward.extend(events);
        match page.get("nextCursor") {
            Some(c) => {
                assert_eq!(c.as_u64(), forward.last().map(seq), "cursor = last seq");
                query = format!("limit=4&cursor={c}");
            }
            None => break, // R33
        }
        assert!(sizes.len() < 10);
    }
    assert_eq!(sizes, [4, 4, 4, 1]);
    assert_eq!(
        forward.iter().map(seq).collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );

    // Backward: before=0 is the newest page, ascending; nextCursor is passed back as before.
    let mut backward_pages: Vec<Vec<Value>> = Vec::new();
    let mut query = "limit=4&before=0".to_owned();
    loop {
        let page = history_page(&s, &id, &query);
        let events = page["events"].as_array().unwrap().clone();
        let seqs: Vec<u64> = events.iter().map(seq).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "ascending: {seqs:?}"
        );
        let first = seqs.first().copied();
        backward_pages.push(events);
        match page.get("nextCursor") {
            Some(c) => {
                assert_eq!(c.as_u64(), first, "before-cursor = first seq of the page");
                query = format!("limit=4&before={c}");
            }
            None => break,
        }
        assert!(backward_pages.len() < 10);
    }
    let first_page: Vec<u64> = backward_pages[0].iter().map(seq).collect();
    assert_eq!(first_page, [n - 3, n - 2, n - 1, n], "newest page");
    let backward: Vec<Value> = backward_pages.into_iter().rev().flatten().collect();
    assert_eq!(backward, forward, "both walks return the same entries");

    // cursor=K pages strictly after K (R9, R30); before=K strictly before K.
    let page = history_page(&s, &id, "cursor=5&limit=3");
    assert_eq!(
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(seq)
            .collect::<Vec<_>>(),
        [6, 7, 8]
    );
    let page = history_page(&s, &id, "before=5&limit=100");
    assert_eq!(
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(seq)
            .collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert!(page.get("nextCursor").is_none());
    let page = history_page(&s, &id, &format!("cursor={n}"));
    assert_eq!(page, json!({"events": []}), "nothing after the last event");
    let page = history_page(&s, &id, "before=1");
    assert_eq!(
        page,
        json!({"events": []}),
        "nothing before the first event"
    );
}

#[test]
fn history_limits_and_exclusive_cursors_r32_s7() {
    let s = Server::start();
    let (id, n) = session_with_events(&s, 105);

    let page = history_page(&s, &id, "");
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 100, "default limit 100");
    assert_eq!(page["nextCursor"].as_u64(), Some(100));
    let page = history_page(&s, &id, "limit=500");
    assert_eq!(page["events"].as_array().unwrap().len() as u64, n);
    assert!(page.get("nextCursor").is_none());
    let page = history_page(&s, &id, "limit=1");
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    assert_eq!(page["nextCursor"].as_u64(), Some(1));
    let page = history_page(&s, &id, "before=0");
    assert_eq!(page["events"][0]["seq"].as_u64(), Some(n - 99));

    for q in [
        "cursor=1&before=5",
        "cursor=0&before=0",
        "limit=0",
        "limit=501",
        "limit=x",
        "cursor=-1",
        "cursor=abc",
        "before=1.5",
        "cursor=9007199254740992",
    ] {
        let (status, v) = s.get(&s.sessions_url(&format!("/{id}/history?{q}")));
        assert_invalid(status, &v);
    }
}

// ---------------------------------------------------------------------------------------------
// Events (SSE): basics (R34, S8)

fn check_frame(f: &SseFrame) {
    assert_schema(EVENTS, &f.data);
    assert_known_events([&f.data["event"]]);
    if let Some(id) = f.id {
        assert_eq!(f.data["seq"].as_u64(), Some(id), "id: equals seq: {f:?}");
    } else {
        assert!(f.data.get("seq").is_none(), "volatile frames carry no seq");
    }
}

fn next_durable(sse: &Sse) -> SseFrame {
    loop {
        let f = sse
            .next_frame(Duration::from_secs(10))
            .expect("an SSE frame");
        check_frame(&f);
        if f.id.is_some() {
            return f;
        }
    }
}

#[test]
fn events_stream_replays_follows_and_resumes_r34_s8() {
    let s = Server::start();
    let id = create_id(&s, "stream me");
    settle(&s, &id, "complete");
    let stored = history(&s, &id);
    let n = stored.len() as u64;

    let sse = s.sse(&id, None, None);
    assert_eq!(sse.status, 200);
    assert!(
        sse.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(sse.headers["x-accel-buffering"], "no");
    // The backlog is exactly the stored history, in order.
    for e in &stored {
        let f = next_durable(&sse);
        assert_eq!(f.id, Some(seq(e)));
        assert_eq!(f.data["event"], e["event"]);
    }
    // Live: a new turn arrives on the open stream.
    message(&s, &id, json!({"prompt": "/reply live words"}));
    let frames = sse.until_terminal(WAIT);
    for f in &frames {
        check_frame(f);
    }
    let durable: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    assert_eq!(
        durable.first().copied(),
        Some(n + 1),
        "no gap after the backlog"
    );
    assert!(durable.windows(2).all(|w| w[1] == w[0] + 1), "{durable:?}");
    assert!(
        frames
            .iter()
            .any(|f| f.data["event"]["step"]["text"] == "live words")
    );
    assert_eq!(frames.last().unwrap().data["event"]["type"], "complete");
    drop(sse);

    // Resume with `since` and with Last-Event-ID (which wins).
    let sse = s.sse(&id, Some(n - 2), None);
    assert_eq!(next_durable(&sse).id, Some(n - 1));
    let sse = s.sse(&id, Some(0), Some(n));
    assert_eq!(next_durable(&sse).id, Some(n + 1));

    let (status, v) = s.get(&s.sessions_url(&format!("/{id}/events?since=abc")));
    assert_invalid(status, &v);
    let sse = s.sse("0190aaaa-0000-7000-8000-000000000000", None, None);
    assert_eq!(sse.status, 404);
}

// ---------------------------------------------------------------------------------------------
// Messages (R25, R26, R64, S2)

#[test]
fn message_to_an_idle_session_starts_a_new_turn_r26_r64() {
    let s = Server::start();
    let id = create_id(&s, "first");
    settle(&s, &id, "complete");

    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "/reply second answer"}));
    let t = wait_terminal(&s, &id, before);
    assert_eq!(etype(&t), "complete");
    let new = after(&history(&s, &id), before);
    let types: Vec<&str> = new.iter().map(etype).collect();
    assert_eq!(
        types[..2],
        ["prompt_submitted", "turn_started"],
        "{types:?}"
    );
    let p = &new[0]["event"];
    assert_eq!(p["inputKind"], "message");
    assert_eq!(p["behavior"], "steer", "R23 default");
    assert_eq!(p["prompt"], "/reply second answer");
    assert_eq!(p["sender"]["kind"], "user");
    assert_eq!(texts(&new), ["second answer"]);
    let d = detail_checked(&s, &id);
    assert_eq!(d["lastDeliveredInputSeq"].as_u64(), Some(before + 1));
    assert_eq!(d["turnStatus"], "complete");

    // follow_up is stored on the message itself (R26) and, on an idle session, runs next.
    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "third", "behavior": "follow_up"}));
    wait_terminal(&s, &id, before);
    let new = after(&history(&s, &id), before);
    assert_eq!(new[0]["event"]["type"], "prompt_submitted");
    assert_eq!(new[0]["event"]["behavior"], "follow_up");
    assert_eq!(texts(&new), ["echo: third"]);

    for body in [
        json!({}),
        json!({"prompt": ""}),
        json!({"prompt": "x", "behavior": "now"}),
        json!({"prompt": "x", "sourceSessionId": ""}),
    ] {
        let (status, v) = s.post(&s.sessions_url(&format!("/{id}/messages")), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(last_seq(&s, &id), seq(history(&s, &id).last().unwrap()));
}

#[test]
fn follow_up_waits_for_the_running_turn_r26() {
    let s = Server::start();
    // The turn streams only once the follow-up is queued behind it (a condition, not a window).
    let id = create_id(&s, "/await_follow_up\n/stream 4");
    let started = wait_event(&s, &id, &["turn_started"], 0);

    let ack = message(
        &s,
        &id,
        json!({"prompt": "/reply later", "behavior": "follow_up"}),
    );
    assert_eq!(
        ack["delivery"], "queued",
        "a follow-up waits for the running turn"
    );
    let first_end = wait_terminal(&s, &id, seq(&started));
    let second_end = wait_terminal(&s, &id, seq(&first_end));
    assert_eq!(etype(&first_end), "complete");
    assert_eq!(etype(&second_end), "complete");

    let events = history(&s, &id);
    let prompt = events
        .iter()
        .find(|e| etype(e) == "prompt_submitted" && e["event"]["behavior"] == "follow_up")
        .expect("follow-up prompt");
    assert!(
        seq(prompt) < seq(&first_end),
        "accepted and persisted immediately"
    );
    // While waiting it was in the follow-up queue.
    assert!(
        events.iter().any(|e| etype(e) == "follow_up_queue"
            && e["event"]["followUpQueue"][0]["message"] == "/reply later"),
        "{:#?}",
        event_types(&events)
    );
    // The first turn never saw it; a second turn ran it after the first ended.
    let first_turn: Vec<Value> = events
        .iter()
        .filter(|e| seq(e) <= seq(&first_end))
        .cloned()
        .collect();
    assert_eq!(texts(&first_turn), ["chunk 1 chunk 2 chunk 3 chunk 4 "]);
    let second_turn = after(&events, seq(&first_end));
    assert!(
        second_turn.iter().any(|e| etype(e) == "turn_started"),
        "{:?}",
        event_types(&second_turn)
    );
    assert_eq!(texts(&second_turn), ["later"]);
    let d = detail_checked(&s, &id);
    assert!(
        d.get("followUpQueue").is_none() || d["followUpQueue"] == json!([]),
        "queue drained: {d}"
    );
}

#[test]
fn steer_joins_the_running_turn_r25() {
    let s = Server::start();
    // The turn waits for the steer (a condition, not a time window), then streams on.
    let id = create_id(&s, "/await_steer\n/stream 4");
    let started = wait_event(&s, &id, &["turn_started"], 0);
    let ack = message(&s, &id, json!({"prompt": "/reply steered in"}));
    assert_eq!(ack["delivery"], "accepted", "a running turn takes a steer");
    let end = wait_terminal(&s, &id, seq(&started));
    assert_eq!(etype(&end), "complete");
    s.wait_runner_idle();
    let events = history(&s, &id);
    assert_eq!(
        of_type(&events, "turn_started").len(),
        1,
        "{:?}",
        event_types(&events)
    );
    let in_turn: Vec<Value> = events
        .iter()
        .filter(|e| seq(e) <= seq(&end))
        .cloned()
        .collect();
    assert!(
        texts(&in_turn).contains(&"steered in".to_owned()),
        "{:?}",
        texts(&in_turn)
    );
}

// ---------------------------------------------------------------------------------------------
// Note (S3)

#[test]
fn note_is_recorded_without_starting_a_turn_s3() {
    let s = Server::start();
    let id = create_id(&s, "hello");
    settle(&s, &id, "complete");

    let n = note(&s, &id, json!({"note": "remember the milk"}));
    let events = history(&s, &id);
    let e = events.iter().find(|e| seq(e) == n).expect("note event");
    assert_eq!(etype(e), "note_submitted");
    assert_eq!(e["event"]["note"], "remember the milk");
    assert_eq!(e["event"]["sender"]["kind"], "user");
    let d = detail_checked(&s, &id);
    assert_eq!(d["lastEventSeq"].as_u64(), Some(n));
    assert_eq!(d["turnStatus"], "complete");

    s.wait_runner_idle();
    let later = after(&history(&s, &id), n);
    assert!(later.is_empty(), "a note starts no turn: {later:#?}");
    assert_eq!(detail_checked(&s, &id)["bucket"], "done");

    // Bounds (R16): 1..=16384 characters.
    let max = "é".repeat(16384);
    let n2 = note(&s, &id, json!({ "note": max }));
    assert_eq!(n2, n + 1);
    for body in [
        json!({}),
        json!({"note": ""}),
        json!({"note": "é".repeat(16385)}),
        json!({"note": "x", "clientRequestId": "nope"}),
    ] {
        let (status, v) = s.post(&s.sessions_url(&format!("/{id}/note")), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(last_seq(&s, &id), n2);
}

// ---------------------------------------------------------------------------------------------
// Answer (R20, S4)

#[test]
fn answer_resumes_an_asking_session() {
    let s = Server::start();
    let id = create_id(&s, "/ask Pick | a | b");
    let ask = settle(&s, &id, "ask");
    let q = &ask["event"]["questions"][0];
    assert_eq!(q["question"], "Pick");
    assert_eq!(q["options"], json!([{"label": "a"}, {"label": "b"}]));
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "ask");
    assert_eq!(d["bucket"], "asking");
    assert_eq!(list_ids(&s, "bucket=asking"), [id.as_str()]);

    let before = last_seq(&s, &id);
    answer(&s, &id, json!({"answer": "a"}));
    let end = wait_terminal(&s, &id, before);
    assert_eq!(etype(&end), "complete");
    let new = after(&history(&s, &id), before);
    assert_eq!(etype(&new[0]), "answer_submitted");
    assert_eq!(new[0]["event"]["answer"], "a");
    assert_eq!(new[0]["event"]["sender"]["kind"], "user");
    assert_eq!(etype(&new[1]), "turn_started");
    assert_eq!(texts(&new), ["answer: a"]);
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");

    // Not asking any more: 409 not_asking and nothing is written.
    let last = last_seq(&s, &id);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/answer")),
        &json!({"answer": "b"}),
    );
    assert_error(status, &v, 409, "not_asking");
    assert_eq!(last_seq(&s, &id), last);

    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/answer")),
        &json!({"answer": ""}),
    );
    assert_invalid(status, &v);
}

#[test]
fn answer_continues_the_script_after_the_ask() {
    let s = Server::start();
    let id = create_id(
        &s,
        "/ask Continue? | yes | no\n/reply continued after the answer",
    );
    settle(&s, &id, "ask");
    let before = last_seq(&s, &id);
    answer(&s, &id, json!({"answer": "yes"}));
    wait_terminal(&s, &id, before);
    assert_eq!(
        texts(&after(&history(&s, &id), before)),
        ["continued after the answer"]
    );
}

#[test]
fn answer_to_a_session_that_is_not_asking_is_409() {
    let s = Server::start();
    let idle = create_id(&s, "never asks");
    settle(&s, &idle, "complete");
    let running = create_id(&s, "/slow 30000\n/reply x");
    wait_event(&s, &running, &["turn_started"], 0);
    for id in [&idle, &running] {
        let last = last_seq(&s, id);
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{id}/answer")),
            &json!({"answer": "unsolicited"}),
        );
        assert_error(status, &v, 409, "not_asking");
        assert_eq!(last_seq(&s, id), last, "nothing written");
    }
}

// ---------------------------------------------------------------------------------------------
// Interrupt (S12)

#[test]
fn interrupt_ends_a_running_turn_with_interrupted() {
    let s = Server::start();
    let id = create_id(&s, "/slow 200\n/stream 100");
    let started = wait_event(&s, &id, &["turn_started"], 0);
    interrupt(&s, &id);
    let end = wait_terminal(&s, &id, seq(&started));
    assert_eq!(etype(&end), "interrupted");
    let events = history(&s, &id);
    let req = of_type(&events, "interrupt_requested");
    assert_eq!(req.len(), 1);
    assert!(req[0]["event"]["requestedAt"].is_string());
    assert!(seq(req[0]) < seq(&end), "request precedes the terminal");
    assert!(of_type(&events, "complete").is_empty());
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "interrupted");
    assert_eq!(d["bucket"], "done");

    // The session takes new work afterwards.
    let before = last_seq(&s, &id);
    message(&s, &id, json!({"prompt": "/reply back again"}));
    let end = wait_terminal(&s, &id, before);
    assert_eq!(etype(&end), "complete");
    assert_eq!(texts(&after(&history(&s, &id), before)), ["back again"]);
}

#[test]
fn interrupt_on_an_idle_session_records_only_the_request() {
    let s = Server::start();
    let id = create_id(&s, "idle soon");
    settle(&s, &id, "complete");
    let before = last_seq(&s, &id);
    interrupt(&s, &id);
    s.wait_runner_idle();
    let new = after(&history(&s, &id), before);
    assert_eq!(event_types(&new), ["interrupt_requested"]);
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

// ---------------------------------------------------------------------------------------------
// PATCH title (S10)

#[test]
fn patch_title_sets_a_manual_title_s10() {
    let s = Server::start();
    let id = create_id(&s, "generated title");
    let v = set_title(&s, &id, "My chosen title");
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["title"], "My chosen title");
    assert_eq!(v["titleOrigin"], "manual");
    let d = detail_checked(&s, &id);
    assert_eq!(d["title"], "My chosen title");
    assert_eq!(d["titleOrigin"], "manual");
    assert_eq!(list(&s, "")["sessions"][0]["title"], "My chosen title");

    // 120 characters (not bytes) is the maximum.
    let max = "é".repeat(120);
    assert_eq!(set_title(&s, &id, &max)["title"], max.as_str());
    for body in [
        json!({"title": "é".repeat(121)}),
        json!({"title": ""}),
        json!({"title": 5}),
        json!({}),
    ] {
        let (status, v) = s.patch(&s.sessions_url(&format!("/{id}")), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(
        detail_checked(&s, &id)["title"],
        max.as_str(),
        "unchanged by bad input"
    );
}

// ---------------------------------------------------------------------------------------------
// Read marker (S11)

#[test]
fn read_marker_is_monotonic_clamped_and_drives_unread_s11() {
    let s = Server::start();
    let id = create_id(&s, "read me");
    settle(&s, &id, "complete");
    let d = detail_checked(&s, &id);
    let last = d["lastEventSeq"].as_u64().unwrap();
    assert_eq!(d["unread"], true, "the agent replied and nobody read it");

    assert_eq!(mark_read(&s, &id, 2), 2);
    assert_eq!(
        detail_checked(&s, &id)["unread"],
        true,
        "output after seq 2 is unread"
    );
    assert_eq!(mark_read(&s, &id, 1), 2, "never moves backwards");
    assert_eq!(mark_read(&s, &id, 0), 2);
    assert_eq!(
        mark_read(&s, &id, last + 1000),
        last,
        "clamped to lastEventSeq"
    );
    assert_eq!(detail_checked(&s, &id)["unread"], false);
    assert_eq!(list(&s, "")["sessions"][0]["unread"], false);
    assert_eq!(mark_read(&s, &id, last), last, "idempotent");

    // New agent output makes it unread again.
    message(&s, &id, json!({"prompt": "more please"}));
    let end = wait_terminal(&s, &id, last);
    assert_eq!(detail_checked(&s, &id)["unread"], true);
    assert_eq!(mark_read(&s, &id, seq(&end)), seq(&end));
    assert_eq!(detail_checked(&s, &id)["unread"], false);

    for body in [
        json!({}),
        json!({"seq": -1}),
        json!({"seq": "3"}),
        json!({"seq": 1.5}),
    ] {
        let (status, v) = s.put(&s.sessions_url(&format!("/{id}/read")), &body);
        assert_invalid(status, &v);
    }
}

// ---------------------------------------------------------------------------------------------
// Delete (S12, R54)

#[test]
fn delete_removes_the_session_and_leaves_others_alone() {
    let s = Server::start();
    let doomed = create_id(&s, "doomed");
    let survivor = create_id(&s, "survivor");
    settle(&s, &doomed, "complete");
    settle(&s, &survivor, "complete");
    let survivor_history = history(&s, &survivor);
    let survivor_last = last_seq(&s, &survivor);

    let (status, v) = s.delete(&s.sessions_url(&format!("/{doomed}")));
    assert_eq!(status, 200, "{v}");
    assert_schema(DELETE, &v);
    assert_eq!(v, json!({"deleted": true}));

    let u = |rest: &str| s.sessions_url(&format!("/{doomed}{rest}"));
    for (status, v) in [
        s.get(&u("")),
        s.get(&u("/history")),
        s.post(&u("/messages"), &json!({"prompt": "hello?"})),
        s.post(&u("/note"), &json!({"note": "hello?"})),
        s.post(&u("/answer"), &json!({"answer": "hello?"})),
        s.post(&u("/interrupt"), &json!({})),
        s.patch(&u(""), &json!({"title": "ghost"})),
        s.put(&u("/archive"), &json!({"archived": true})),
        s.put(&u("/read"), &json!({"seq": 1})),
        s.post(&u("/sessions"), &json!({"prompt": "orphan"})),
    ] {
        assert_not_found(status, &v);
    }
    assert_eq!(s.sse(&doomed, None, None).status, 404);
    assert_eq!(list_ids(&s, ""), [survivor.as_str()]);
    assert_eq!(total_sessions(&s), 1);

    // The other session's timeline is untouched and continues without gaps (invariant 2).
    assert_eq!(history(&s, &survivor), survivor_history);
    message(&s, &survivor, json!({"prompt": "still here"}));
    let p = wait_event(&s, &survivor, &["prompt_submitted"], survivor_last);
    assert_eq!(seq(&p), survivor_last + 1);
    wait_terminal(&s, &survivor, survivor_last);

    // Deleting a session with a running turn stops it; the server keeps working.
    let busy = create_id(&s, "/slow 30000\n/reply never");
    wait_event(&s, &busy, &["turn_started"], 0);
    let (status, v) = s.delete(&s.sessions_url(&format!("/{busy}")));
    assert_eq!(status, 200, "{v}");
    assert_not_found(
        s.get(&s.sessions_url(&format!("/{busy}"))).0,
        &s.get(&s.sessions_url(&format!("/{busy}"))).1,
    );
    let fresh = create_id(&s, "after the delete");
    settle(&s, &fresh, "complete");
}

// ---------------------------------------------------------------------------------------------
// Activity (S13)

#[test]
fn activity_orders_asking_running_scheduled_done_and_truncates_s13() {
    let s = Server::start();
    let done_old = create_id(&s, "done one");
    settle(&s, &done_old, "complete");
    let done_new = create_id(&s, "done two");
    settle(&s, &done_new, "complete");
    let asking = create_id(&s, "/ask Which? | x | y");
    let running = create_id(&s, "/slow 30000\n/reply x");
    let scheduled = create_id(&s, "/sleep 60000");
    settle(&s, &asking, "ask");
    settle(&s, &scheduled, "sleep");
    wait_event(&s, &running, &["turn_started"], 0);
    let agent = detail_checked(&s, &asking)["agent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let owner = |v: &Value| -> Value {
        v["owners"]
            .as_array()
            .expect("owners")
            .iter()
            .find(|o| o["agentId"] == agent.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("no owner for agent {agent}: {v:#}"))
    };

    let v = activity(&s, "");
    let o = owner(&v);
    assert_eq!(
        ids_of(&o),
        [
            asking.clone(),
            running.clone(),
            scheduled.clone(),
            done_new.clone(),
            done_old.clone()
        ]
    );
    let buckets: Vec<&str> = o["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bucket"].as_str().unwrap())
        .collect();
    assert_eq!(buckets, ["asking", "running", "scheduled", "done", "done"]);
    assert_eq!(o["truncated"], false);

    let o = owner(&activity(&s, "limitPerAgent=2"));
    assert_eq!(ids_of(&o), [asking.clone(), running.clone()]);
    assert_eq!(o["truncated"], true);
    let o = owner(&activity(&s, "limitPerAgent=5"));
    assert_eq!(ids_of(&o).len(), 5);
    assert_eq!(o["truncated"], false, "exactly the limit is not truncated");
    activity(&s, "limitPerAgent=100");

    for q in [
        "limitPerAgent=0",
        "limitPerAgent=101",
        "limitPerAgent=abc",
        "limitPerAgent=-1",
    ] {
        let (status, v) = s.get(&s.sessions_url(&format!("/activity?{q}")));
        assert_invalid(status, &v);
    }
}

// ---------------------------------------------------------------------------------------------
// Images (R17, S16)

#[test]
fn images_are_stored_and_served_byte_exact_r17_s16() {
    let s = Server::start();
    let bytes = png(b"tiny test image payload \x00\x01\x02\xff");
    let v = create_checked(
        &s,
        json!({
            "prompt": "look at this",
            "images": [{"data": B64.encode(&bytes), "mimeType": "image/png"}],
        }),
    );
    let id = id_of(&v);
    let img = &v["history"]["events"][1]["event"]["images"][0];
    assert_eq!(img["mimeType"], "image/png");
    assert_eq!(img["bytes"].as_u64(), Some(bytes.len() as u64));
    let storage_id = img["storageId"].as_str().expect("storageId").to_owned();
    assert!(!storage_id.is_empty());

    let (status, headers, body) =
        s.get_bytes(&s.sessions_url(&format!("/{id}/images/{storage_id}")));
    assert_eq!(status, 200);
    assert_eq!(body, bytes, "exact bytes");
    assert_eq!(headers["content-type"], "image/png");
    assert_eq!(headers["x-content-type-options"], "nosniff");

    // Unknown storage id, or another session's: 404.
    let (status, v) = s.get(&s.sessions_url(&format!("/{id}/images/img_doesnotexist")));
    assert_not_found(status, &v);
    let other = create_id(&s, "another session");
    let (status, v) = s.get(&s.sessions_url(&format!("/{other}/images/{storage_id}")));
    assert_not_found(status, &v);

    // Images on a message and a note are stored the same way.
    settle(&s, &id, "complete");
    let before = last_seq(&s, &id);
    let msg_bytes = png(b"second picture");
    message(
        &s,
        &id,
        json!({"prompt": "and this", "images": [{"data": B64.encode(&msg_bytes), "mimeType": "image/png"}]}),
    );
    let p = wait_event(&s, &id, &["prompt_submitted"], before);
    let sid = p["event"]["images"][0]["storageId"].as_str().unwrap();
    let (status, _, body) = s.get_bytes(&s.sessions_url(&format!("/{id}/images/{sid}")));
    assert_eq!(status, 200);
    assert_eq!(body, msg_bytes);
    let n = note(
        &s,
        &id,
        json!({"note": "with picture", "images": [png_image(b"note pic")]}),
    );
    let e = history(&s, &id).into_iter().find(|e| seq(e) == n).unwrap();
    assert_eq!(e["event"]["images"][0]["mimeType"], "image/png");
}

#[test]
fn invalid_images_are_refused_and_write_nothing_r17() {
    let s = Server::start();
    let jpeg = B64.encode([0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, b'J', b'F', b'I', b'F']);
    let five: Vec<Value> = (0..5)
        .map(|i| png_image(format!("p{i}").as_bytes()))
        .collect();
    for images in [
        json!(five),
        json!([{"data": "not base64 at all!!", "mimeType": "image/png"}]),
        json!([{"data": jpeg, "mimeType": "image/png"}]),
        json!([{"data": B64.encode(png(b"x")), "mimeType": "image/bmp"}]),
        json!([{"data": "", "mimeType": "image/png"}]),
        json!([{"mimeType": "image/png"}]),
    ] {
        let (status, v) = s.post(
            &s.sessions_url(""),
            &json!({"prompt": "bad images", "images": images}),
        );
        assert_invalid(status, &v);
    }
    assert_eq!(total_sessions(&s), 0);

    // Four is the maximum.
    let four: Vec<Value> = (0..4)
        .map(|i| png_image(format!("q{i}").as_bytes()))
        .collect();
    let v = create_checked(&s, json!({"prompt": "four images", "images": four}));
    assert_eq!(
        v["history"]["events"][1]["event"]["images"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // The same limits apply to messages.
    let id = id_of(&v);
    let last = last_seq(&s, &id);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "five", "images": five}),
    );
    assert_invalid(status, &v);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "jpeg as png", "images": [{"data": jpeg, "mimeType": "image/png"}]}),
    );
    assert_invalid(status, &v);
    let events = history(&s, &id);
    assert!(
        !after(&events, last)
            .iter()
            .any(|e| etype(e) == "prompt_submitted" || etype(e) == "note_submitted"),
        "refused inputs write nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// Child sessions (R52, R53, R54)

#[test]
fn child_sessions_record_parent_and_inherit_tier_r52_r53_r54() {
    let s = Server::start();
    let parent = id_of(&create_checked(
        &s,
        json!({"prompt": "parent", "tier": "balanced"}),
    ));

    let v = create_child_checked(&s, &parent, json!({"prompt": "child inherits"}));
    let child = id_of(&v);
    assert_ne!(child, parent);
    assert_eq!(v["dispatched"], false);
    assert_eq!(v["snapshot"]["createdBySessionId"], parent.as_str());
    assert_eq!(
        v["snapshot"]["tier"], "balanced",
        "R53: omitted tier inherited"
    );
    let events = v["history"]["events"].as_array().unwrap();
    assert_eq!(etype(&events[0]), "session_created");
    assert_eq!(events[1]["event"]["inputKind"], "initial");
    settle(&s, &child, "complete");

    let v = create_child_checked(
        &s,
        &parent,
        json!({"prompt": "child overrides", "tier": "economy"}),
    );
    let child2 = id_of(&v);
    assert_eq!(v["snapshot"]["tier"], "economy", "R53: explicit tier wins");
    assert_eq!(v["snapshot"]["createdBySessionId"], parent.as_str());
    let listed = list(&s, "");
    let item = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == child2.as_str())
        .unwrap();
    assert_eq!(item["createdBySessionId"], parent.as_str());

    // Grandchildren work the same way.
    let grandchild = create_child_checked(&s, &child, json!({"prompt": "grandchild"}));
    assert_eq!(grandchild["snapshot"]["createdBySessionId"], child.as_str());
    assert_eq!(grandchild["snapshot"]["tier"], "balanced");

    // A parent without tier gives none.
    let plain = create_id(&s, "plain parent");
    let v = create_child_checked(&s, &plain, json!({"prompt": "no tier"}));
    assert!(v["snapshot"].get("tier").is_none(), "{}", v["snapshot"]);

    // R54: the link survives deleting the parent.
    let (status, _) = s.delete(&s.sessions_url(&format!("/{parent}")));
    assert_eq!(status, 200);
    assert_eq!(
        detail_checked(&s, &child)["createdBySessionId"],
        parent.as_str()
    );
    assert_eq!(
        detail_checked(&s, &child2)["createdBySessionId"],
        parent.as_str()
    );

    // Unknown (or deleted) parent: 404 and nothing created.
    let count = total_sessions(&s);
    for p in [parent.as_str(), "0190aaaa-0000-7000-8000-000000000000"] {
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{p}/sessions")),
            &json!({"prompt": "orphan"}),
        );
        assert_not_found(status, &v);
    }
    assert_eq!(total_sessions(&s), count);
    // Invalid body on the child route: 400.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{child}/sessions")),
        &json!({"prompt": ""}),
    );
    assert_invalid(status, &v);
}

// ---------------------------------------------------------------------------------------------
// Idempotency (R29, invariant 4)

#[test]
fn create_with_the_same_client_request_id_is_one_session_r29() {
    let s = Server::start();
    let crid = new_uuid();
    let body = json!({"prompt": "exactly once", "tier": "economy", "clientRequestId": crid});
    let first = create_checked(&s, body.clone());
    let id = id_of(&first);
    let second = create_checked(&s, body.clone());
    assert_eq!(id_of(&second), id);
    // Key order and whitespace do not make a different request, and neither does the case of
    // the UUID (the server stores and matches ids case-insensitively).
    for crid_text in [crid.clone(), crid.to_uppercase()] {
        let raw = format!(
            r#"{{ "clientRequestId": "{crid_text}",  "tier": "economy", "prompt": "exactly once" }}"#
        );
        let (status, again) = s.post_raw(&s.sessions_url(""), raw);
        assert_eq!(status, 200, "{crid_text}: {again}");
        assert_schema(CREATE, &again);
        assert_eq!(id_of(&again), id);
    }

    assert_eq!(list_ids(&s, ""), [id.as_str()]);
    settle(&s, &id, "complete");
    let events = history(&s, &id);
    assert_eq!(of_type(&events, "session_created").len(), 1);
    let prompts = of_type(&events, "prompt_submitted");
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0]["event"]["clientRequestId"], crid.as_str());
    assert_eq!(of_type(&events, "turn_started").len(), 1);

    // Same id, different body: 409 and nothing new.
    let (status, v) = s.post(
        &s.sessions_url(""),
        &json!({"prompt": "something else", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    // Same id on another operation: also a conflict.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "exactly once", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/sessions")),
        &json!({"prompt": "exactly once", "tier": "economy", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    assert_eq!(total_sessions(&s), 1);
    assert_eq!(history(&s, &id), events);
}

#[test]
fn message_note_and_answer_are_idempotent_by_client_request_id_r29() {
    let s = Server::start();
    let id = create_id(&s, "target");
    settle(&s, &id, "complete");

    // Message.
    let crid = new_uuid();
    let body = json!({"prompt": "only once", "clientRequestId": crid});
    message(&s, &id, body.clone());
    message(&s, &id, body.clone());
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "different", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    let p = wait_event(&s, &id, &["prompt_submitted"], 2);
    wait_terminal(&s, &id, seq(&p));
    let events = history(&s, &id);
    let same: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"]["clientRequestId"] == crid.as_str())
        .collect();
    assert_eq!(same.len(), 1, "one input for two POSTs");
    assert_eq!(
        of_type(&events, "turn_started").len(),
        2,
        "one turn per input"
    );

    // Note: the retry answers the original seq.
    let crid = new_uuid();
    let body = json!({"note": "noted once", "clientRequestId": crid});
    let a = note(&s, &id, body.clone());
    let b = note(&s, &id, body.clone());
    assert_eq!(a, b);
    assert_eq!(last_seq(&s, &id), a);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "noted twice", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    assert_eq!(last_seq(&s, &id), a);

    // Answer: the retry succeeds even though the session no longer asks.
    let asking = create_id(&s, "/ask Ready? | go");
    settle(&s, &asking, "ask");
    let crid = new_uuid();
    let body = json!({"answer": "go", "clientRequestId": crid});
    let before = last_seq(&s, &asking);
    answer(&s, &asking, body.clone());
    answer(&s, &asking, body.clone());
    wait_terminal(&s, &asking, before);
    answer(&s, &asking, body.clone());
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{asking}/answer")),
        &json!({"answer": "stop", "clientRequestId": crid}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
    let events = history(&s, &asking);
    assert_eq!(of_type(&events, "answer_submitted").len(), 1);
    assert_eq!(of_type(&events, "turn_started").len(), 2);
    assert_eq!(texts(&events), ["answer: go"]);
}

// ---------------------------------------------------------------------------------------------
// Not found (error bodies)

#[test]
fn unknown_session_ids_and_workspaces_answer_404() {
    let s = Server::start();
    let real = create_id(&s, "exists");
    for ghost in ["0190aaaa-0000-7000-8000-000000000000", "no-such-session"] {
        let u = |rest: &str| s.sessions_url(&format!("/{ghost}{rest}"));
        for (status, v) in [
            s.get(&u("")),
            s.get(&u("/history")),
            s.get(&u("/images/img_0")),
            s.post(&u("/messages"), &json!({"prompt": "x"})),
            s.post(&u("/note"), &json!({"note": "x"})),
            s.post(&u("/answer"), &json!({"answer": "x"})),
            s.post(&u("/interrupt"), &json!({})),
            s.post(&u("/sessions"), &json!({"prompt": "x"})),
            s.patch(&u(""), &json!({"title": "x"})),
            s.put(&u("/archive"), &json!({"archived": true})),
            s.put(&u("/read"), &json!({"seq": 1})),
            s.delete(&u("")),
        ] {
            assert_not_found(status, &v);
        }
        assert_eq!(s.sse(ghost, None, None).status, 404);
    }

    // Unknown workspace slug: 404, and a real session id is not reachable through it.
    let other = |rest: &str| s.url(&format!("/v1/ws/nope/agent/sessions{rest}"));
    for (status, v) in [
        s.get(&other("")),
        s.post(&other(""), &json!({"prompt": "x"})),
        s.get(&other("/activity")),
        s.get(&other(&format!("/{real}"))),
        s.get(&other(&format!("/{real}/history"))),
        s.post(
            &other(&format!("/{real}/messages")),
            &json!({"prompt": "x"}),
        ),
        s.delete(&other(&format!("/{real}"))),
    ] {
        assert_not_found(status, &v);
    }
    assert_eq!(total_sessions(&s), 1);
    assert!(last_seq(&s, &real) >= 2);
}

// ---------------------------------------------------------------------------------------------
// Known runner bug (stress reproduction)

/// A message that arrives just after a turn's terminal commits but before the dispatcher has
/// processed that turn's end is answered `accepted` as a steer into the (finished) turn and then
/// never runs: the session stays `running` with an undelivered `prompt_submitted` until a later
/// input or a restart (R64, invariants 3 and 7). This stress test fires messages back to back at
/// sessions whose turns keep ending while other threads keep the writer busy (which widens the
/// window: group commit can put the terminal and the message in one batch).
#[test]

fn back_to_back_messages_are_all_delivered_r64() {
    let s = Server::start();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let stranded = std::sync::Mutex::new(Vec::new());
    let noise = create_id(&s, "noise");
    let (s, stop, noise) = (&s, &stop, noise.as_str());
    std::thread::scope(|scope| {
        // Background write load.
        for _ in 0..2 {
            scope.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    s.post(
                        &s.sessions_url(&format!("/{noise}/note")),
                        &json!({"note": "noise"}),
                    );
                }
            });
        }
        let workers: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    for _ in 0..25 {
                        let (_, v) = s.post(&s.sessions_url(""), &json!({"prompt": "/reply x"}));
                        let id = id_of(&v);
                        for i in 0..10 {
                            let (status, v) = s.post(
                                &s.sessions_url(&format!("/{id}/messages")),
                                &json!({ "prompt": format!("/reply m{i}") }),
                            );
                            assert_eq!(status, 200, "{v}");
                        }
                        let deadline = std::time::Instant::now() + Duration::from_secs(10);
                        loop {
                            let (_, d) = s.get(&s.sessions_url(&format!("/{id}")));
                            let last_prompt = s
                                .history_all(&id)
                                .iter()
                                .filter(|e| etype(e) == "prompt_submitted")
                                .map(seq)
                                .max()
                                .unwrap();
                            if d["turnStatus"] != "running"
                                && d["lastDeliveredInputSeq"].as_u64() == Some(last_prompt)
                            {
                                break;
                            }
                            if std::time::Instant::now() > deadline {
                                let delivered = d["lastDeliveredInputSeq"].as_u64().unwrap();
                                let tail: Vec<String> = s
                                    .history_all(&id)
                                    .iter()
                                    .filter(|e| seq(e) > delivered)
                                    .map(|e| format!("{}:{}", seq(e), etype(e)))
                                    .collect();
                                stranded.lock().unwrap().push(format!(
                                    "{id}: turnStatus {} lastDeliveredInputSeq {delivered} \
                                     last prompt {last_prompt}; after it: {tail:?}",
                                    d["turnStatus"]
                                ));
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let stranded = stranded.into_inner().unwrap();
    assert!(stranded.is_empty(), "inputs never delivered: {stranded:#?}");
}

// ---------------------------------------------------------------------------------------------
// Conformance details of the seed's schemas

/// `FollowUpQueueItem` carries the queued prompt's images (`{data, mimeType}`), in the snapshot
/// and in the `follow_up_queue` event.
#[test]
fn queued_follow_ups_keep_their_images() {
    let s = Server::start();
    // A turn that runs far longer than the test, so the follow-up stays queued.
    let id = create_id(&s, "/slow 500\n/stream 200");
    wait_event(&s, &id, &["turn_started"], 0);
    let image = png_image(b"queued");
    message(
        &s,
        &id,
        json!({"prompt": "look at this", "behavior": "follow_up", "images": [image.clone()]}),
    );
    let d = detail_checked(&s, &id);
    assert_eq!(
        d["followUpQueue"],
        json!([{"message": "look at this", "images": [image.clone()]}]),
        "{d}"
    );
    let events = history(&s, &id);
    let queued = events
        .iter()
        .rev()
        .find(|e| etype(e) == "follow_up_queue")
        .expect("follow_up_queue event");
    assert_eq!(
        queued["event"]["followUpQueue"],
        json!([{"message": "look at this", "images": [image]}])
    );
    interrupt(&s, &id);
}

/// A manual title is any string of 1 to 120 characters, newlines and tabs included.
#[test]
fn titles_may_hold_newlines_and_tabs() {
    let s = Server::start();
    let id = create_id(&s, "hello");
    let title = "first line\nsecond\tcolumn";
    let v = set_title(&s, &id, title);
    assert_eq!(v["title"], title);
    assert_eq!(detail_checked(&s, &id)["title"], title);
}

/// JSON Schema's `integer` includes numbers with a zero fractional part: `2.0` is a seq, `12.0`
/// a byte count; `2.5` is neither.
#[test]
fn integers_spelled_with_a_zero_fraction_are_integers() {
    let s = Server::start();
    let id = create_id(&s, "hello");
    settle(&s, &id, "complete");
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{id}/read")),
        &json!({"seq": 2.0}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["lastReadSeq"], 2);
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{id}/read")),
        &json!({"seq": 2.5}),
    );
    assert_invalid(status, &v);
    std::fs::create_dir_all(s.data_dir.join("drive/default/docs")).unwrap();
    std::fs::write(s.data_dir.join("drive/default/docs/a.txt"), b"twelve bytes").unwrap();
    let attachment = json!({"path": "docs/a.txt", "name": "a.txt", "bytes": 12.0});
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "see attached", "attachments": [attachment]}),
    );
    assert_eq!(status, 200, "{v}");
    let events = history(&s, &id);
    let note = events.last().expect("note");
    assert_eq!(note["event"]["attachments"][0]["bytes"], 12, "{note}");
    let attachment = json!({"path": "docs/a.txt", "name": "a.txt", "bytes": 12.5});
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "x", "attachments": [attachment]}),
    );
    assert_invalid(status, &v);
}
