//! Forks on the real server (and on PostgreSQL with `SESSIOND_TEST_BACKEND=postgres`): a fork's
//! timeline is its parent's up to `atSeq`, the conversation its next turn is given is that prefix
//! and nothing after it (the scripted engine's `/recall` replies with exactly what
//! `TurnIo::conversation` hands a model engine), the parent is untouched, the `/v2` record names
//! the lineage, and a bad fork point is a 4xx that writes nothing.

mod common;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/hast.rs"]
mod hast;

use std::time::Duration;

use common::*;
use fake_openai::*;
use hast::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

fn fork_url(s: &Server, id: &str) -> String {
    s.sessions_url(&format!("/{id}/fork"))
}

/// Sends a message and waits for the terminal of the turn it starts; the terminal event.
fn turn(s: &Server, id: &str, prompt: &str) -> Value {
    let from = s.history_all(id).last().map_or(0, seq) + 1;
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": prompt }),
    );
    assert_eq!(status, 200, "{v}");
    s.wait_terminal(id, from)
}

/// The reply text of a `complete` terminal.
fn result(terminal: &Value) -> String {
    assert_eq!(etype(terminal), "complete", "{terminal}");
    terminal["event"]["result"]
        .as_str()
        .expect("result")
        .to_owned()
}

/// Every session id of the workspace's list.
fn session_ids(s: &Server) -> Vec<String> {
    let (status, v) = s.get(&s.sessions_url("?limit=100"));
    assert_eq!(status, 200, "{v}");
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|x| x["id"].as_str().expect("id").to_owned())
        .collect()
}

/// A parent with three finished turns; its id and the seq of each turn's terminal.
fn three_turns(s: &Server) -> (String, Vec<u64>) {
    let id = s.create_prompt("/reply first answer");
    let t1 = seq(&s.wait_terminal(&id, 1));
    let t2 = seq(&turn(s, &id, "second question"));
    let t3 = seq(&turn(s, &id, "third question"));
    (id, vec![t1, t2, t3])
}

/// The Session record schema with sessiond's lineage extension (`parent.kind` `fork`,
/// `parent.at_seq`), as `/openapi.json` documents it.
fn assert_fork_record(s: &Server, r: &Value) {
    let (status, doc) = s.get(&s.url("/openapi.json"));
    assert_eq!(status, 200);
    let schema = &doc["components"]["schemas"]["SessionRecord"];
    assert!(
        schema.to_string().contains("\"fork\""),
        "the document names the fork kind: {}",
        schema["properties"]["parent"]
    );
    assert_eq!(
        schema["properties"]["parent"]["properties"]["at_seq"]["type"],
        "integer"
    );
    let mut seed = r.clone();
    // Everything but the extension is the seed's record.
    seed["parent"]["kind"] = json!("continuation");
    seed["parent"]
        .as_object_mut()
        .expect("parent")
        .remove("at_seq");
    assert_record(&seed);
}

#[test]
fn a_fork_carries_the_timeline_up_to_at_seq_and_its_next_turn_sees_only_that() {
    let s = Server::start();
    let (parent, terminals) = three_turns(&s);
    let before = s.history_all(&parent);
    let at = terminals[1];

    let (status, v) = s.post(
        &fork_url(&s, &parent),
        &json!({"atSeq": at, "prompt": "/recall"}),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["forkedFrom"], json!({"sessionId": parent, "atSeq": at}));
    assert_eq!(v["delivery"], "accepted", "{v}");
    let fork = v["session"]["sessionId"].as_str().expect("id").to_owned();
    assert_ne!(fork, parent);

    // The engine is given the turns up to the fork point, and nothing after it.
    let seen = result(&s.wait_terminal(&fork, at + 2));
    for line in [
        "[user] /reply first answer",
        "[assistant] first answer",
        "[user] second question",
        "[assistant] echo: second question",
    ] {
        assert!(seen.contains(line), "the fork's turn sees {line:?}: {seen}");
    }
    assert!(
        !seen.contains("third question"),
        "nothing after the fork point: {seen}"
    );
    assert!(!seen.contains("/recall"), "only earlier turns: {seen}");

    // Its timeline: its own session_created, the parent's events 2..=at with their seqs, the
    // `forked` notice, then its own turn.
    let events = history_checked(&s, &fork, 50);
    assert_eq!(etype(&events[0]), "session_created");
    assert_eq!(events[0]["event"]["prompt"], before[0]["event"]["prompt"]);
    for (mine, theirs) in events[1..at as usize].iter().zip(&before[1..at as usize]) {
        assert_eq!(mine["seq"], theirs["seq"]);
        assert_eq!(mine["event"], theirs["event"]);
    }
    let notice = &events[at as usize];
    assert_eq!(seq(notice), at + 1);
    assert_eq!(etype(notice), "system");
    assert_eq!(notice["event"]["metadata"]["code"], "forked");
    assert!(
        notice["event"]["message"]
            .as_str()
            .unwrap()
            .contains(&parent)
    );
    assert_eq!(
        etype(&events[at as usize + 1]),
        "prompt_submitted",
        "{events:#?}"
    );

    // The parent is untouched.
    assert_eq!(s.history_all(&parent), before);
    let d = s.detail(&parent);
    assert_eq!(d["lastEventSeq"], json!(before.len()));

    // A later turn of the parent is not the fork's, and a later turn of the fork not the parent's.
    let again = result(&turn(&s, &fork, "/recall"));
    assert!(!again.contains("third question"), "{again}");
    assert!(again.contains("[user] /recall"), "{again}");
    let parent_sees = result(&turn(&s, &parent, "/recall"));
    assert!(parent_sees.contains("third question"), "{parent_sees}");
    assert!(
        !parent_sees.contains("[user] /recall\n[assistant] [user]"),
        "{parent_sees}"
    );
}

#[test]
fn v2_fork_records_its_lineage_and_waits_for_a_message() {
    let s = Server::start();
    let (parent, terminals) = three_turns(&s);
    let at = terminals[0];
    let (status, r) = s.post(&v2(&s, &format!("/{parent}/fork")), &json!({"at_seq": at}));
    assert_eq!(status, 201, "{r}");
    assert_fork_record(&s, &r);
    assert_eq!(
        r["parent"],
        json!({"kind": "fork", "session_id": parent, "replayed_from_session_id": null, "at_seq": at})
    );
    assert_eq!(r["session_state"], "idle", "no turn runs without a message");
    assert_eq!(r["prompting"]["enabled"], true);
    let fork = r["id"].as_str().expect("id").to_owned();
    let (status, again) = s.get(&v2(&s, &format!("/{fork}")));
    assert_eq!(status, 200, "{again}");
    assert_fork_record(&s, &again);
    assert_eq!(again["parent"]["at_seq"], json!(at));

    // Its HAST events show the fork notice as a warning coded `forked`.
    let (status, page) = s.get(&v2(&s, &format!("/{fork}/events?limit=500")));
    assert_eq!(status, 200, "{page}");
    assert!(
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "warning"
                && e["data"]["code"] == "forked"
                && e["data"]["message"].as_str().unwrap().contains(&parent)),
        "{page:#}"
    );

    // The /v2 message family runs the fork's first turn on the copied conversation.
    let (status, v) = s.post(
        &v2(&s, &format!("/{fork}/messages")),
        &json!({"prompt": "/recall"}),
    );
    assert_eq!(status, 200, "{v}");
    let seen = result(&s.wait_terminal(&fork, at + 2));
    assert!(seen.contains("[assistant] first answer"), "{seen}");
    assert!(!seen.contains("second question"), "{seen}");

    // A fork of a fork: lineage names the nearer parent and its own fork point.
    let (status, r2) = s.post(
        &v2(&s, &format!("/{fork}/fork")),
        &json!({"at_seq": at + 1, "prompt": "/recall"}),
    );
    assert_eq!(status, 201, "{r2}");
    assert_eq!(r2["parent"]["session_id"], json!(fork));
    assert_eq!(r2["parent"]["at_seq"], json!(at + 1));
    let id2 = r2["id"].as_str().unwrap().to_owned();
    let seen = result(&s.wait_terminal(&id2, at + 3));
    assert!(seen.contains("[assistant] first answer"), "{seen}");

    // The parent's own record says nothing of forks.
    assert_eq!(record(&s, &parent)["parent"]["kind"], Value::Null);
    // A create cannot claim the fork kind.
    let (status, v) = s.post(
        &v2(&s, ""),
        &json!({"prompt": "x", "parent": {"kind": "fork", "session_id": parent}}),
    );
    assert_eq!(status, 400, "{v}");
}

#[test]
fn a_fork_inside_a_finished_turn_closes_that_turn_in_the_fork() {
    let s = Server::start();
    let parent = s.create_prompt("/reply one\n/tool lookup\n/reply two");
    s.wait_terminal(&parent, 1);
    let events = s.history_all(&parent);
    let tool = events
        .iter()
        .find(|e| etype(e) == "step" && e["event"]["step"]["type"] == "tool_call")
        .map(seq)
        .expect("a tool_call step");
    let (status, v) = s.post(&fork_url(&s, &parent), &json!({"atSeq": tool}));
    assert_eq!(status, 201, "{v}");
    let fork = v["session"]["sessionId"].as_str().unwrap().to_owned();
    let mine = s.history_all(&fork);
    let tail: Vec<&str> = mine[tool as usize..].iter().map(etype).collect();
    assert_eq!(tail, ["system", "interrupted"], "{mine:#?}");
    assert_eq!(v["snapshot"]["turnStatus"], "complete");
    assert!(
        !mine
            .iter()
            .any(|e| etype(e) == "step" && e["event"]["step"]["text"] == "two"),
        "nothing after the fork point: {mine:#?}"
    );
    // Its next turn is given the cut turn's input.
    let seen = result(&turn(&s, &fork, "/recall"));
    assert!(seen.contains("[user] /reply one"), "{seen}");
    assert!(
        !seen.contains("[assistant]"),
        "no reply of the cut turn: {seen}"
    );
}

#[test]
fn bad_fork_points_are_refused_and_write_nothing() {
    let s = Server::start();
    let (parent, _) = three_turns(&s);
    let last = s.history_all(&parent).len() as u64;
    let sessions = session_ids(&s);
    let url = fork_url(&s, &parent);
    for body in [
        json!({"atSeq": last + 1}),
        json!({"atSeq": 0}),
        json!({"atSeq": -3}),
        json!({"atSeq": "4"}),
        json!({"atSeq": 1.5}),
        json!({}),
        json!({"atSeq": 2, "prompt": ""}),
        json!({"atSeq": 2, "extra": true}),
    ] {
        let (status, v) = s.post(&url, &body);
        assert_eq!(status, 400, "{body}: {v}");
        assert_eq!(v["error"], "invalid_request", "{body}: {v}");
    }
    let (status, v) = s.post(&url, &json!({"atSeq": last + 1}));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(&format!("1 to {last}")),
        "{status} {v}"
    );
    for body in [
        json!({"at_seq": last + 1}),
        json!({"at_seq": -1}),
        json!({"atSeq": 2}),
    ] {
        let (status, v) = s.post(&v2(&s, &format!("/{parent}/fork")), &body);
        assert_eq!(status, 400, "{body}: {v}");
    }
    // Unknown sessions, and another workspace's, are not found.
    let (status, _) = s.post(
        &fork_url(&s, "0190a7c2-0000-7000-8000-000000000000"),
        &json!({"atSeq": 1}),
    );
    assert_eq!(status, 404);
    let key = workspace_member_key(&s.data_dir, "elsewhere", "member");
    let res = reqwest::blocking::Client::new()
        .post(v2(&s, &format!("/{parent}/fork")))
        .bearer_auth(&key)
        .json(&json!({"at_seq": 1}))
        .send()
        .expect("POST");
    assert_eq!(res.status().as_u16(), 404);
    // No credential: 401; a read-only one: 403.
    let reader = cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            OWNER_EMAIL,
            "--scope",
            "sessions:read",
        ],
        None,
    );
    for (key, want) in [(None, 401), (Some(reader.trim()), 403)] {
        for (url, body) in [
            (fork_url(&s, &parent), json!({"atSeq": 1})),
            (v2(&s, &format!("/{parent}/fork")), json!({"at_seq": 1})),
        ] {
            let mut req = reqwest::blocking::Client::new().post(url).json(&body);
            if let Some(k) = key {
                req = req.bearer_auth(k);
            }
            assert_eq!(req.send().expect("POST").status().as_u16(), want);
        }
    }
    assert_eq!(session_ids(&s), sessions, "no session was made");
    assert_eq!(s.history_all(&parent).len() as u64, last, "nothing written");
}

#[test]
fn a_fork_inside_the_running_turn_is_busy() {
    let s = Server::start();
    let (parent, terminals) = three_turns(&s);
    // A turn that runs until a steer reaches it.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{parent}/messages")),
        &json!({"prompt": "/reply working\n/await_steer\n/reply done"}),
    );
    assert_eq!(status, 200, "{v}");
    let started = seq(&s.wait_for_event(&parent, &["turn_started"], terminals[2] + 1, WAIT));
    let text = s.wait_for_event(&parent, &["step"], started, WAIT);
    let sessions = session_ids(&s);
    for at in [started, seq(&text)] {
        let (status, v) = s.post(&fork_url(&s, &parent), &json!({"atSeq": at}));
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["error"], "session_busy", "{v}");
        assert!(
            v["message"].as_str().unwrap().contains("running turn"),
            "{v}"
        );
        let (status, v) = s.post(&v2(&s, &format!("/{parent}/fork")), &json!({"at_seq": at}));
        assert_eq!(status, 409, "{v}");
    }
    assert_eq!(session_ids(&s), sessions, "no session was made");
    // Before the running turn is fine, and the fork does not run it.
    let (status, v) = s.post(
        &fork_url(&s, &parent),
        &json!({"atSeq": terminals[2], "prompt": "/recall"}),
    );
    assert_eq!(status, 201, "{v}");
    let fork = v["session"]["sessionId"].as_str().unwrap().to_owned();
    let seen = result(&s.wait_terminal(&fork, terminals[2] + 2));
    assert!(seen.contains("third question"), "{seen}");
    assert!(!seen.contains("working"), "{seen}");
    // The parent's turn goes on.
    let (status, _) = s.post(
        &s.sessions_url(&format!("/{parent}/messages")),
        &json!({"prompt": "go", "behavior": "steer"}),
    );
    assert_eq!(status, 200);
    assert_eq!(etype(&s.wait_terminal(&parent, started)), "complete");
}

#[test]
fn a_model_engine_is_sent_the_forked_conversation_and_nothing_after_it() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "model", "engine": fake.engine(json!({}))}),
    );
    assert_eq!(status, 201, "{v}");
    fake.push(text_reply("answer one", (1, 1, 0)));
    let (status, r) = s.post(
        &v2(&s, ""),
        &json!({"prompt": "question one", "harness": "openai"}),
    );
    assert_eq!(status, 201, "{r}");
    let parent = r["id"].as_str().unwrap().to_owned();
    s.wait_terminal(&parent, 1);
    fake.push(text_reply("answer two", (1, 1, 0)));
    let at = seq(&turn(&s, &parent, "question two"));
    fake.push(text_reply("answer three", (1, 1, 0)));
    turn(&s, &parent, "question three");

    fake.push(text_reply("answer four", (1, 1, 0)));
    let (status, v) = s.post(
        &fork_url(&s, &parent),
        &json!({"atSeq": at, "prompt": "question four"}),
    );
    assert_eq!(status, 201, "{v}");
    let fork = v["session"]["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(result(&s.wait_terminal(&fork, at + 2)), "answer four");

    let chats = fake.chat_requests();
    let sent = chats.last().expect("the fork's model call");
    let said: Vec<(String, String)> =
        roles_and_contents(sent.body["messages"].as_array().expect("messages"))
            .into_iter()
            .filter(|(role, _)| role == "user" || role == "assistant")
            .collect();
    let pair = |r: &str, c: &str| (r.to_owned(), c.to_owned());
    assert_eq!(
        said,
        [
            pair("user", "question one"),
            pair("assistant", "answer one"),
            pair("user", "question two"),
            pair("assistant", "answer two"),
            pair("user", "question four"),
        ],
        "{}",
        sent.body
    );
}

#[test]
fn a_fork_at_a_question_takes_a_message_not_an_answer() {
    let s = Server::start();
    let parent = s.create_prompt("/ask Which one? | left | right");
    let asked = s.wait_terminal(&parent, 1);
    assert_eq!(etype(&asked), "ask");
    let (status, v) = s.post(&fork_url(&s, &parent), &json!({"atSeq": seq(&asked)}));
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["snapshot"]["turnStatus"], "complete");
    let fork = v["session"]["sessionId"].as_str().unwrap().to_owned();
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{fork}/answer")),
        &json!({"answer": "left"}),
    );
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "not_asking");
    let seen = result(&turn(&s, &fork, "/recall"));
    assert!(seen.contains("[user] /ask Which one?"), "{seen}");
    // The parent still asks.
    assert_eq!(s.detail(&parent)["turnStatus"], "ask");
}
