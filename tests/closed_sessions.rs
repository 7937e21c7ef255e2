//! A session that takes no more input refuses it on every family. Every way a session stops
//! taking input (a final task status set on `/agentex`, a `/v2` handoff, a spent `/v2` budget,
//! deletion) is tried against every input route of the three API families, on the real server
//! (and on PostgreSQL with `SESSIOND_TEST_BACKEND=postgres`): each family answers in its own
//! shape with the one code that names the reason, nothing is written, no turn runs, and the
//! `/v2` record says why prompting is off.

mod common;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/hast.rs"]
mod hast;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use fake_openai::*;
use hast::*;
use serde_json::{Value, json};

const AGENT: &str = "priced";
const WAIT: Duration = Duration::from_secs(30);

/// How a session was made to stop taking input.
#[derive(Debug, Clone, Copy)]
enum Condition {
    /// `POST /agentex/tasks/{id}/<verb>`, and the status it sets.
    Final(&'static str, &'static str),
    /// `POST /v2/sessions` with `parent.kind: handoff`.
    Handoff,
    /// `PATCH /v2/sessions/{id}` to a budget below what the session spent.
    Budget,
    /// `DELETE /v1/…/sessions/{id}`.
    Deleted,
}

impl Condition {
    const ALL: [Condition; 8] = [
        Condition::Final("cancel", "CANCELED"),
        Condition::Final("complete", "COMPLETED"),
        Condition::Final("fail", "FAILED"),
        Condition::Final("terminate", "TERMINATED"),
        Condition::Final("timeout", "TIMED_OUT"),
        Condition::Handoff,
        Condition::Budget,
        Condition::Deleted,
    ];

    /// The code every family refuses an input with.
    fn code(self) -> &'static str {
        match self {
            Condition::Final(..) => "task_closed",
            Condition::Handoff => "session_closed",
            Condition::Budget => "budget_hit",
            Condition::Deleted => "not_found",
        }
    }
}

/// How a family answers a refused input.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// `4xx {"error": code, "message"}` (the Sessions API, the Task events API, `/agentex` REST).
    Http,
    /// HTTP 200 with a JSON-RPC error object whose `data.code` is the code.
    Rpc,
}

/// The task a route is sent to: its id (the session's) and its name.
struct Task {
    id: String,
    name: String,
}

/// One input route.
struct Route {
    name: &'static str,
    shape: Shape,
    /// Finds the session by something other than its id (an alias, a task name): once the
    /// session is deleted, the input opens a new one instead of being refused.
    opens_when_gone: bool,
    send: fn(&Server, &Task) -> (u16, Value),
}

fn agentex(s: &Server, path: &str) -> String {
    s.url(&format!("/agentex{path}"))
}

fn rpc(s: &Server, method: &str, params: Value) -> (u16, Value) {
    s.post(
        &agentex(s, &format!("/agents/name/{AGENT}/rpc")),
        &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
    )
}

fn user_text(text: &str) -> Value {
    json!({"type": "text", "author": "user", "content": text})
}

fn bind_default(s: &Server, id: &str) {
    let (status, v) = s.put(
        &s.url(&format!("/v1/ws/{WS}/agents/{AGENT}/sessions/default")),
        &json!({"sessionId": id}),
    );
    assert_eq!(status, 200, "{v}");
}

/// Every route by which input reaches an existing session.
fn routes() -> Vec<Route> {
    vec![
        Route {
            name: "POST /v1 …/messages",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &s.sessions_url(&format!("/{}/messages", t.id)),
                    &json!({"prompt": "more"}),
                )
            },
        },
        Route {
            name: "POST /v1 …/messages/wait",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &s.sessions_url(&format!("/{}/messages/wait", t.id)),
                    &json!({"prompt": "more", "clientRequestId": new_uuid()}),
                )
            },
        },
        Route {
            name: "POST /v1 …/answer",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &s.sessions_url(&format!("/{}/answer", t.id)),
                    &json!({"answer": "the first"}),
                )
            },
        },
        Route {
            name: "POST /v1 …/answer/wait",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &s.sessions_url(&format!("/{}/answer/wait", t.id)),
                    &json!({"answer": "the first", "clientRequestId": new_uuid()}),
                )
            },
        },
        Route {
            name: "POST /v1 …/note",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &s.sessions_url(&format!("/{}/note", t.id)),
                    &json!({"note": "for later"}),
                )
            },
        },
        Route {
            name: "POST /v1 agents/{slug}/sessions/default/messages",
            shape: Shape::Http,
            opens_when_gone: true,
            send: |s, _| {
                s.post(
                    &s.url(&format!(
                        "/v1/ws/{WS}/agents/{AGENT}/sessions/default/messages"
                    )),
                    &json!({"prompt": "more"}),
                )
            },
        },
        Route {
            name: "POST /v1 agents/{slug}/sessions/default/messages/wait",
            shape: Shape::Http,
            opens_when_gone: true,
            send: |s, _| {
                s.post(
                    &s.url(&format!(
                        "/v1/ws/{WS}/agents/{AGENT}/sessions/default/messages/wait"
                    )),
                    &json!({"prompt": "more", "clientRequestId": new_uuid()}),
                )
            },
        },
        Route {
            name: "POST /v2/sessions/{id}/messages",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &v2(s, &format!("/{}/messages", t.id)),
                    &json!({"prompt": "more"}),
                )
            },
        },
        Route {
            name: "message/send by task_id",
            shape: Shape::Rpc,
            opens_when_gone: false,
            send: |s, t| {
                rpc(
                    s,
                    "message/send",
                    json!({"task_id": t.id, "content": user_text("more")}),
                )
            },
        },
        Route {
            name: "message/send by task_name",
            shape: Shape::Rpc,
            opens_when_gone: true,
            send: |s, t| {
                rpc(
                    s,
                    "message/send",
                    json!({"task_name": t.name, "content": user_text("more")}),
                )
            },
        },
        Route {
            name: "event/send with content",
            shape: Shape::Rpc,
            opens_when_gone: false,
            send: |s, t| {
                rpc(
                    s,
                    "event/send",
                    json!({"task_id": t.id, "content": user_text("more")}),
                )
            },
        },
        Route {
            name: "event/send without content",
            shape: Shape::Rpc,
            opens_when_gone: false,
            send: |s, t| rpc(s, "event/send", json!({"task_id": t.id})),
        },
        Route {
            name: "POST /agentex/messages",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &agentex(s, "/messages"),
                    &json!({"task_id": t.id, "content": user_text("for later")}),
                )
            },
        },
        Route {
            name: "POST /agentex/messages/batch",
            shape: Shape::Http,
            opens_when_gone: false,
            send: |s, t| {
                s.post(
                    &agentex(s, "/messages/batch"),
                    &json!({"task_id": t.id, "contents": [user_text("for later")]}),
                )
            },
        },
    ]
}

/// The route refused the input the way its family does, with the condition's code.
fn assert_refused(route: &Route, cond: Condition, (status, v): (u16, Value)) {
    let what = format!("{} after {cond:?}", route.name);
    match route.shape {
        Shape::Http => {
            let expected = if matches!(cond, Condition::Deleted) {
                404
            } else {
                409
            };
            assert_eq!(status, expected, "{what}: {v}");
            assert_eq!(v["error"], cond.code(), "{what}: {v}");
            assert!(
                v["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {v}"
            );
        }
        Shape::Rpc => {
            assert_eq!(status, 200, "{what}: {v}");
            let expected = if matches!(cond, Condition::Deleted) {
                -32602
            } else {
                -32000
            };
            assert_eq!(v["error"]["code"], expected, "{what}: {v}");
            assert_eq!(v["error"]["data"]["code"], cond.code(), "{what}: {v}");
            assert_eq!(v["result"], Value::Null, "{what}: {v}");
        }
    }
}

/// A task of the priced agent, opened by name, whose agent asked a question in a turn that cost
/// 25 cents: every input route applies to it (an answer too).
fn asking_task(s: &Server, fake: &FakeOpenAi, name: &str) -> Task {
    let (status, v) = rpc(s, "task/create", json!({"name": name}));
    assert_eq!(status, 200, "{v}");
    let id = v["result"]["id"].as_str().expect("task id").to_owned();
    fake.push(tool_reply(&[(
        "q1",
        "ask_user",
        json!({"questions": [{"question": "Which one?"}]}),
    )]));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "pick one"}),
    );
    assert_eq!(status, 200, "{v}");
    poll_until("the agent to ask", WAIT, || {
        (s.detail(&id)["turnStatus"] == "ask").then_some(())
    });
    Task {
        id,
        name: name.to_owned(),
    }
}

/// Makes the session stop taking input.
fn apply(s: &Server, fake: &FakeOpenAi, cond: Condition, t: &Task) {
    match cond {
        Condition::Final(verb, status) => {
            let (code, v) = s.post(&agentex(s, &format!("/tasks/{}/{verb}", t.id)), &json!({}));
            assert_eq!(code, 200, "{v}");
            assert_eq!(v["status"], status, "{v}");
        }
        Condition::Handoff => {
            fake.push(text_reply("taken over", (1, 1, 0)));
            let next = create_v2(
                s,
                json!({"prompt": "take over", "parent": {"kind": "handoff", "session_id": t.id}}),
            );
            let next = next["id"].as_str().expect("id").to_owned();
            poll_until("the successor's turn", WAIT, || {
                (s.detail(&next)["turnStatus"] == "complete").then_some(())
            });
        }
        Condition::Budget => {
            let (code, r) = s.patch(
                &v2(s, &format!("/{}", t.id)),
                &json!({"budget": {"cents": 10}}),
            );
            assert_eq!(code, 200, "{r}");
        }
        Condition::Deleted => {
            let (code, v) = s.delete(&s.sessions_url(&format!("/{}", t.id)));
            assert!(code == 200 || code == 204, "{code} {v}");
        }
    }
}

/// What the `/v2` record and the task say about a session that takes no input.
fn assert_closed_views(s: &Server, cond: Condition, t: &Task) {
    let r = record(s, &t.id);
    let p = &r["prompting"];
    assert_eq!(p["enabled"], false, "{cond:?}: {r}");
    assert_eq!(p["code"], cond.code(), "{cond:?}: {r}");
    assert!(
        p["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{cond:?}: {r}"
    );
    let for_good = !matches!(cond, Condition::Budget);
    let (reason, state) = if for_good {
        (json!("closed"), "closed")
    } else {
        (Value::Null, "idle")
    };
    assert_eq!(p["blocked_reason"], reason, "{cond:?}: {r}");
    assert_eq!(r["session_state"], state, "{cond:?}: {r}");
    let (code, task) = s.get(&agentex(s, &format!("/tasks/{}", t.id)));
    assert_eq!(code, 200, "{task}");
    let status = match cond {
        Condition::Final(_, status) => status,
        Condition::Handoff => "COMPLETED",
        // Still open to the platform: the task goes on once the budget is raised.
        _ => "RUNNING",
    };
    assert_eq!(task["status"], status, "{cond:?}: {task}");
}

#[test]
fn every_input_route_of_every_family_refuses_a_session_that_takes_no_input() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    // $10,000 per million tokens: the asking call (25 tokens) costs 25 cents.
    let engine =
        fake.engine(json!({"prices": {"fake-model": {"input": 10000.0, "output": 10000.0}}}));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": AGENT, "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    let routes = routes();

    for (i, cond) in Condition::ALL.into_iter().enumerate() {
        let t = asking_task(&s, &fake, &format!("closing-{i}"));
        // The control: the task took input until now (a control that fails here means the
        // setup, not the rule, is wrong).
        assert_eq!(record(&s, &t.id)["prompting"]["enabled"], true);
        // The agent's default session is this one (a delete unbinds it).
        bind_default(&s, &t.id);
        apply(&s, &fake, cond, &t);
        let before = (!matches!(cond, Condition::Deleted)).then(|| s.history_all(&t.id));
        let chats = fake.chats().len();
        for route in &routes {
            if matches!(cond, Condition::Deleted) && route.opens_when_gone {
                // The alias or the name no longer finds the deleted session: the input opens a
                // new one, and the deleted session stays gone.
                fake.push(text_reply("a new one", (1, 1, 0)));
                let (status, v) = (route.send)(&s, &t);
                assert_eq!(status, 200, "{}: {v}", route.name);
                assert!(
                    v.get("error").is_none_or(Value::is_null),
                    "{}: {v}",
                    route.name
                );
                s.wait_runner_idle();
                continue;
            }
            assert_refused(route, cond, (route.send)(&s, &t));
        }
        s.wait_runner_idle();
        match before {
            Some(before) => {
                assert_eq!(
                    s.history_all(&t.id).len(),
                    before.len(),
                    "{cond:?}: a refused input writes nothing"
                );
                assert_eq!(fake.chats().len(), chats, "{cond:?}: no turn ran");
                assert_closed_views(&s, cond, &t);
            }
            None => {
                let (status, v) = s.get(&s.sessions_url(&format!("/{}", t.id)));
                assert_eq!(status, 404, "{v}");
                let (status, v) = s.get(&v2(&s, &format!("/{}", t.id)));
                assert_eq!(status, 404, "{v}");
            }
        }
    }
}

/// A budget raised again opens the session on every family: the spent budget is the one
/// closing that is not for good.
#[test]
fn raising_the_budget_opens_the_session_again() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    let engine =
        fake.engine(json!({"prices": {"fake-model": {"input": 10000.0, "output": 10000.0}}}));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": AGENT, "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    let t = asking_task(&s, &fake, "budgeted");
    apply(&s, &fake, Condition::Budget, &t);
    let routes = routes();
    let by_name = |n: &str| routes.iter().find(|r| r.name == n).expect("route");
    assert_refused(
        by_name("event/send without content"),
        Condition::Budget,
        (by_name("event/send without content").send)(&s, &t),
    );
    let (status, r) = s.patch(
        &v2(&s, &format!("/{}", t.id)),
        &json!({"budget": {"cents": 1000}}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["prompting"]["enabled"], true, "{r}");
    assert_eq!(r["prompting"]["code"], Value::Null, "{r}");
    let (status, v) = (by_name("event/send without content").send)(&s, &t);
    assert_eq!(status, 200, "{v}");
    assert!(v["result"]["id"].is_string(), "{v}");
    let (status, v) = (by_name("POST /v1 …/note").send)(&s, &t);
    assert_eq!(status, 200, "{v}");
}

/// A cancel and messages sent at the same moment: either a message comes first (and the cancel
/// drops it) or the cancel does (and the message is refused with `task_closed`); never a message
/// accepted after the cancel, and never a turn started after it.
#[test]
fn a_cancel_and_a_message_racing_do_not_both_win() {
    let s = Server::start();
    let (_, root) = s.get(&agentex(&s, "/agents/name/root"));
    let root = root["id"].as_str().expect("root id").to_owned();
    for round in 0..12 {
        let (status, v) = s.post(
            &agentex(&s, &format!("/agents/{root}/rpc")),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create",
                "params": {"name": format!("race-{round}")}}),
        );
        assert_eq!(status, 200, "{v}");
        let id = v["result"]["id"].as_str().expect("id").to_owned();
        let start = Arc::new(Barrier::new(4));
        let senders: Vec<_> = (0..3)
            .map(|n| {
                let (url, start) = (s.sessions_url(&format!("/{id}/messages")), start.clone());
                let http = s.http.clone();
                std::thread::spawn(move || {
                    start.wait();
                    into_json(
                        http.post(url)
                            .json(&json!({"prompt": format!("/reply message {n}"), "behavior": "follow_up"}))
                            .send()
                            .expect("POST"),
                    )
                })
            })
            .collect();
        start.wait();
        let (status, v) = s.post(&agentex(&s, &format!("/tasks/{id}/cancel")), &json!({}));
        assert_eq!(status, 200, "{v}");
        for sender in senders {
            let (status, v) = sender.join().expect("sender");
            assert!(
                status == 200 || (status == 409 && v["error"] == "task_closed"),
                "{status} {v}"
            );
        }
        s.wait_runner_idle();
        let history = s.history_all(&id);
        let cancelled = history
            .iter()
            .position(|e| {
                e["event"]["type"] == "system"
                    && e["event"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("task CANCELED"))
            })
            .unwrap_or_else(|| panic!("no cancel in {history:#?}"));
        let after: Vec<&str> = history[cancelled..]
            .iter()
            .filter_map(|e| e["event"]["type"].as_str())
            .filter(|t| matches!(*t, "prompt_submitted" | "turn_started"))
            .collect();
        assert!(
            after.is_empty(),
            "round {round}: {after:?} after the cancel"
        );
        let d = s.detail(&id);
        assert_ne!(d["bucket"], "running", "{d}");
        assert_ne!(d["bucket"], "scheduled", "{d}");
    }
}

/// A session closed for good starts no more turns of its own: the wake of a session that was
/// asleep when it was handed off does not run.
#[test]
fn a_handed_off_session_does_not_wake() {
    let s = Server::start();
    let parent = create_v2(&s, json!({"prompt": "/sleep 3000\n/reply woke up"}))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    poll_until("the session to sleep", WAIT, || {
        (s.detail(&parent)["turnStatus"] == "sleep").then_some(())
    });
    create_v2(
        &s,
        json!({"prompt": "/reply taken over", "parent": {"kind": "handoff", "session_id": parent}}),
    );
    // The wake comes due and is dropped: the session ends interrupted without a turn.
    let d = poll_until("the wake to be handled", WAIT, || {
        let d = s.detail(&parent);
        (d["turnStatus"] != "sleep").then_some(d)
    });
    s.wait_runner_idle();
    assert_eq!(d["turnStatus"], "interrupted", "{d}");
    let history = s.history_all(&parent);
    let turns = history
        .iter()
        .filter(|e| e["event"]["type"] == "turn_started")
        .count();
    assert_eq!(turns, 1, "only the first turn ran: {history:#?}");
    let r = record(&s, &parent);
    assert_eq!(r["session_state"], "closed", "{r}");
    assert_eq!(r["prompting"]["code"], "session_closed", "{r}");
}
