//! The activity view (S13) agrees with the sessions themselves after every operation that changes
//! what it shows: a new session, a turn that moves a session between buckets, an answer, archive
//! and unarchive, delete, a rename, and a session made or unmade an agent's default chat. The
//! expectation is built from other reads (the list filtered by agent, each session's detail), so
//! the index the view reads in order cannot drift from the rows without this failing.

mod common;

use common::*;
use serde_json::json;

const ACTIVITY: &str = "GET_v1_ws__workspaceSlug__agent_sessions_activity.response.json";

/// One agent's view: its id, its sessions as `(id, bucket, title)` in order, its chat's id.
type Owner = (String, Vec<(String, String, String)>, Option<String>);

fn rank(bucket: &str) -> u8 {
    match bucket {
        "asking" => 0,
        "running" => 1,
        "scheduled" => 2,
        _ => 3,
    }
}

/// Every agent's activity sessions as `(id, bucket, title)`, and its chat's id.
fn activity(s: &Server) -> Vec<Owner> {
    let (status, v) = s.get(&s.sessions_url("/activity?limitPerAgent=100"));
    assert_eq!(status, 200, "activity: {v}");
    assert_schema(ACTIVITY, &v);
    let mut owners: Vec<_> = v["owners"]
        .as_array()
        .expect("owners")
        .iter()
        .map(|o| {
            assert_eq!(o["truncated"], false, "{o}");
            let sessions = o["sessions"]
                .as_array()
                .expect("sessions")
                .iter()
                .map(|s| {
                    (
                        s["id"].as_str().expect("id").to_owned(),
                        s["bucket"].as_str().expect("bucket").to_owned(),
                        s["title"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
            let chat = o["chat"]["id"].as_str().map(str::to_owned);
            (
                o["agentId"].as_str().expect("agentId").to_owned(),
                sessions,
                chat,
            )
        })
        .collect();
    owners.sort();
    owners
}

/// The same view built from the list (`agentId`, unarchived, without the default chat) and each
/// session's detail, ordered asking > running > scheduled > done, newest first.
fn expected(s: &Server, agents: &[String]) -> Vec<Owner> {
    let mut owners: Vec<_> = agents
        .iter()
        .map(|agent| {
            let (status, page) = s.get(&s.sessions_url(&format!(
                "?limit=100&excludeDefault=true&agentId={}",
                query_escape(agent)
            )));
            assert_eq!(status, 200, "list: {page}");
            assert!(page.get("nextCursor").is_none(), "{page}");
            let mut rows: Vec<(u8, i64, String, String, String)> = page["sessions"]
                .as_array()
                .expect("sessions")
                .iter()
                .map(|row| {
                    let id = row["id"].as_str().expect("id").to_owned();
                    let d = s.detail(&id);
                    let bucket = d["bucket"].as_str().expect("bucket").to_owned();
                    (
                        rank(&bucket),
                        -d["createdAt"].as_i64().expect("createdAt"),
                        id,
                        bucket,
                        d["title"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect();
            // Newest first with the id as the tie-break (descending), as the list orders.
            rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(b.2.cmp(&a.2)));
            let (status, chat) = s.get(&s.url(&format!(
                "/v1/ws/{WS}/agents/{}/sessions/default",
                slug_of(s, agent)
            )));
            let chat = match status {
                200 => chat["session"]["id"]
                    .as_str()
                    .or(chat["id"].as_str())
                    .map(str::to_owned),
                _ => None,
            };
            (
                agent.clone(),
                rows.into_iter().map(|r| (r.2, r.3, r.4)).collect(),
                chat,
            )
        })
        .collect();
    owners.sort();
    owners
}

fn slug_of(s: &Server, agent_id: &str) -> String {
    let (status, v) = s.get(&s.url(&format!("/v1/ws/{WS}/agents")));
    assert_eq!(status, 200, "agents: {v}");
    let list = v["agents"].as_array().or(v.as_array()).expect("agents");
    list.iter()
        .find(|a| a["id"] == agent_id)
        .and_then(|a| a["slug"].as_str())
        .expect("agent slug")
        .to_owned()
}

fn check(s: &Server, agents: &[String], after: &str) {
    let got = activity(s);
    let want = expected(s, agents);
    assert_eq!(got, want, "activity after {after}");
}

fn terminal(s: &Server, id: &str, from: u64, kind: &str) -> u64 {
    let t = s.wait_terminal(id, from);
    assert_eq!(t["event"]["type"], kind, "{t}");
    t["seq"].as_u64().expect("seq")
}

#[test]
fn activity_agrees_with_the_sessions_after_every_change() {
    let s = Server::start();
    let (status, team) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "team", "name": "Team", "anchor": "team"}),
    );
    assert_eq!(status, 201, "{team}");
    std::fs::create_dir_all(s.data_dir.join("drive").join(WS).join("team")).expect("drive dir");
    let (status, root) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/root")));
    assert_eq!(status, 200, "{root}");
    let agents = vec![
        root["id"].as_str().expect("root id").to_owned(),
        team["id"].as_str().expect("team id").to_owned(),
    ];
    check(&s, &agents, "start");

    let create = |prompt: &str, cwd: Option<&str>| -> String {
        let mut body = json!({ "prompt": prompt });
        if let Some(c) = cwd {
            body["cwd"] = json!(c);
        }
        let (status, v) = s.post(&s.sessions_url(""), &body);
        assert_eq!(status, 200, "create: {v}");
        id_of(&v)
    };

    let done = create("/reply finished", None);
    terminal(&s, &done, 0, "complete");
    check(&s, &agents, "a completed session");
    let asking = create("/ask Which? | x | y", Some("team"));
    let ask_seq = terminal(&s, &asking, 0, "ask");
    let sleeping = create("/sleep 600000", None);
    terminal(&s, &sleeping, 0, "sleep");
    let team_done = create("/reply team work", Some("team"));
    terminal(&s, &team_done, 0, "complete");
    check(&s, &agents, "ask, sleep and a second agent");

    // An answer moves the asking session to done.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{asking}/answer")),
        &json!({"answer": "x"}),
    );
    assert_eq!(status, 200, "answer: {v}");
    terminal(&s, &asking, ask_seq + 1, "complete");
    check(&s, &agents, "an answer");

    // A new turn on a done session, then done again.
    let seq = s.detail(&done)["lastEventSeq"].as_u64().expect("seq");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{done}/messages")),
        &json!({"prompt": "/ask Again? | a | b"}),
    );
    assert_eq!(status, 200, "message: {v}");
    terminal(&s, &done, seq + 1, "ask");
    check(&s, &agents, "a turn that asks");

    // Rename, archive, unarchive, delete.
    let (status, v) = s.patch(
        &s.sessions_url(&format!("/{team_done}")),
        &json!({"title": "renamed for the view"}),
    );
    assert_eq!(status, 200, "rename: {v}");
    check(&s, &agents, "a rename");
    let archive = |id: &str, archived: bool| {
        let (status, v) = s.put(
            &s.sessions_url(&format!("/{id}/archive")),
            &json!({ "archived": archived }),
        );
        assert_eq!(status, 200, "archive: {v}");
    };
    archive(&sleeping, true);
    check(&s, &agents, "an archive");
    archive(&sleeping, false);
    check(&s, &agents, "an unarchive");
    let (status, v) = s.delete(&s.sessions_url(&format!("/{team_done}")));
    assert_eq!(status, 200, "delete: {v}");
    check(&s, &agents, "a delete");

    // A session made the root agent's default chat leaves the list for the chat slot, and
    // comes back when the default is cleared.
    let default_url = s.url(&format!("/v1/ws/{WS}/agents/root/sessions/default"));
    let (status, v) = s.put(&default_url, &json!({ "sessionId": done }));
    assert_eq!(status, 200, "set default: {v}");
    let got = activity(&s);
    let root_owner = got.iter().find(|o| o.0 == agents[0]).expect("root owner");
    assert_eq!(root_owner.2.as_deref(), Some(done.as_str()), "{got:?}");
    assert!(root_owner.1.iter().all(|r| r.0 != done), "{got:?}");
    check(&s, &agents, "a default chat");
    let (status, v) = s.put(&default_url, &json!({ "sessionId": null }));
    assert_eq!(status, 200, "clear default: {v}");
    check(&s, &agents, "a cleared default");
}
