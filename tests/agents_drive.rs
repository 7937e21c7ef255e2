//! Integration tests of agents, the workspace drive and everything anchored in it: agent CRUD
//! (sessiond's own extension), session ownership by cwd, cwd validation and moves (R65–R68),
//! child sessions (R52–R54), the default-session alias (R55–R63, R50), `sourceSessionId` (R7) and
//! direct uploads into the drive (R36–R42) with their use as message attachments.
//!
//! Every seed-defined response is validated against its schema in `schemas/sessions/`, every
//! history event against the known seed event variants. Rule ids refer to
//! `spec/sessions-api.md`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const CHILD_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__sessions_wait.response.json";
const DETAIL: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const LIST: &str = "GET_v1_ws__workspaceSlug__agent_sessions.response.json";
const MESSAGES: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.response.json";
const MESSAGES_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.response.json";
const NOTE: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.response.json";
const ANSWER: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.response.json";
const ARCHIVE: &str = "PUT_v1_ws__workspaceSlug__agent_sessions__sessionId__archive.response.json";
const CWD: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__cwd.response.json";
const CWD_ERRORS: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__cwd.errors.json";
const MINT: &str = "POST_v1_ws__workspaceSlug__agent_sessions_attachments_session.response.json";
const DEFAULT_GET: &str =
    "GET_v1_ws__workspaceSlug__agents__agentSlug__sessions_default.response.json";
const DEFAULT_PUT: &str =
    "PUT_v1_ws__workspaceSlug__agents__agentSlug__sessions_default.response.json";
const DEFAULT_HISTORY: &str =
    "GET_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_history.response.json";
const DEFAULT_HISTORY_ERRORS: &str =
    "GET_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_history.errors.json";
const DEFAULT_MESSAGE: &str =
    "POST_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_messages.response.json";
const DEFAULT_MESSAGE_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_messages_wait.response.json";

/// Long enough that nothing in a test races it, short enough that a hung turn fails fast.
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// Helpers

/// R68: 422 with exactly `{error: "invalid_cwd", reason}` (the seed error schema is closed).
fn assert_invalid_cwd(status: u16, body: &Value, reason: &str) {
    assert_eq!(status, 422, "expected invalid_cwd/{reason}; body: {body}");
    assert_eq!(body, &json!({"error": "invalid_cwd", "reason": reason}));
    assert_schema(CWD_ERRORS, body);
}

fn drive(s: &Server) -> PathBuf {
    let d = s.data_dir.join("drive").join(WS);
    std::fs::create_dir_all(&d).expect("create drive");
    d
}

fn agents_url(s: &Server, rest: &str) -> String {
    s.url(&format!("/v1/ws/{WS}/agents{rest}"))
}

fn default_url(s: &Server, agent: &str, rest: &str) -> String {
    agents_url(s, &format!("/{agent}/sessions/default{rest}"))
}

/// `POST …/agents`, asserting 201.
fn create_agent(s: &Server, body: Value) -> Value {
    let (status, v) = s.post(&agents_url(s, ""), &body);
    assert_eq!(status, 201, "create agent {body}: {v}");
    v
}

fn agent_id(s: &Server, slug: &str) -> String {
    let (status, v) = s.get(&agents_url(s, &format!("/{slug}")));
    assert_eq!(status, 200, "agent {slug}: {v}");
    v["id"].as_str().expect("agent id").to_owned()
}

fn check_events(events: &[Value]) {
    assert_known_events(events.iter().map(|e| &e["event"]));
}

/// Every event of a session, validated.
fn history(s: &Server, id: &str) -> Vec<Value> {
    let events = s.history_all(id);
    check_events(&events);
    events
}

/// Waits until the session's current turn is over (no turn running, a terminal recorded).
fn settle(s: &Server, id: &str) {
    wait_terminal(s, id, 0);
    poll_until(&format!("{id} idle"), WAIT, || {
        (detail_checked(s, id)["turnStatus"] != "running").then_some(())
    });
}

/// Every session id in the workspace (archived ones included), through the list route.
fn all_session_ids(s: &Server) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for archived in ["exclude", "only"] {
        out.extend(list_ids(s, &format!("archived={archived}")));
    }
    out
}

/// All ids of one listing (walks every page, validates every page).
fn list_ids(s: &Server, query: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut url = s.sessions_url(&format!("?limit=100&{query}"));
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={}", query_escape(c)));
        }
        let (status, page) = s.get(&url);
        assert_eq!(status, 200, "list {query}: {page}");
        assert_schema(LIST, &page);
        out.extend(
            page["sessions"]
                .as_array()
                .expect("sessions")
                .iter()
                .map(|x| x["id"].as_str().expect("id").to_owned()),
        );
        match page.get("nextCursor") {
            Some(c) => cursor = Some(c.as_str().expect("nextCursor").to_owned()),
            None => return out,
        }
    }
    panic!("listing never ended");
}

/// Every regular file and symlink under `dir` (not following links), relative to `dir`.
fn files_under(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let ft = e.file_type().expect("file type");
            if ft.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(root)
                        .expect("under root")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

fn mkdirs(s: &Server, rel: &str) {
    std::fs::create_dir_all(drive(s).join(rel)).expect("mkdir in drive");
}

fn write_file(s: &Server, rel: &str, bytes: &[u8]) {
    let p = drive(s).join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, bytes).expect("write file in drive");
}

fn symlink(s: &Server, target: &Path, rel: &str) {
    std::os::unix::fs::symlink(target, drive(s).join(rel)).expect("symlink in drive");
}

/// A folder outside the drive (inside the test's temporary directory) holding one file.
fn outside_dir(s: &Server) -> PathBuf {
    let d = s.data_dir.parent().expect("tmp").join("outside");
    std::fs::create_dir_all(&d).expect("mkdir outside");
    std::fs::write(d.join("secret.txt"), b"outside the drive").expect("write outside");
    d
}

// ---------------------------------------------------------------------------------------------
// Agents (sessiond's own extension)

#[test]
fn agents_crud_and_the_reserved_root_agent() {
    let s = Server::start();

    // `root` always exists and owns the whole drive.
    let (status, v) = s.get(&agents_url(&s, ""));
    assert_eq!(status, 200, "{v}");
    let agents = v["agents"].as_array().expect("agents");
    let root = agents
        .iter()
        .find(|a| a["slug"] == "root")
        .unwrap_or_else(|| panic!("no root agent in {v}"));
    assert_eq!(root["anchor"], "");
    let (status, r) = s.get(&agents_url(&s, "/root"));
    assert_eq!(status, 200, "{r}");
    assert_eq!(&r, root);

    // Create with defaults: name = slug, anchor agents/<slug> (created in the drive), engine {}.
    let a = create_agent(&s, json!({"slug": "research"}));
    let keys: BTreeSet<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        BTreeSet::from(["id", "slug", "name", "anchor", "engine", "createdAt"]),
        "{a}"
    );
    assert_eq!(a["slug"], "research");
    assert_eq!(a["name"], "research");
    assert_eq!(a["anchor"], "agents/research");
    assert_eq!(a["engine"], json!({}));
    assert!(a["createdAt"].as_i64().is_some(), "{a}");
    assert!(!a["id"].as_str().unwrap().is_empty());
    assert_ne!(a["id"], root["id"]);
    assert!(drive(&s).join("agents/research").is_dir(), "anchor folder");
    let (status, got) = s.get(&agents_url(&s, "/research"));
    assert_eq!(status, 200);
    assert_eq!(got, a);

    // Explicit name, anchor and engine; the anchor is normalised and created.
    let w = create_agent(
        &s,
        json!({"slug": "writer-2", "name": "Writer Two", "anchor": "teams/./writing/", "engine": {"kind": "scripted"}}),
    );
    assert_eq!(w["name"], "Writer Two");
    assert_eq!(w["anchor"], "teams/writing");
    assert_eq!(w["engine"], json!({"kind": "scripted"}));
    assert!(drive(&s).join("teams/writing").is_dir());

    let (status, v) = s.get(&agents_url(&s, ""));
    assert_eq!(status, 200);
    let slugs: BTreeSet<&str> = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, BTreeSet::from(["root", "research", "writer-2"]));

    // Duplicates and the reserved slug: 409 agent_exists.
    for slug in ["research", "root"] {
        let (status, v) = s.post(&agents_url(&s, ""), &json!({"slug": slug}));
        assert_error(status, &v, 409, "agent_exists");
    }

    // Bad slugs, names, anchors, engines and fields: 400.
    let too_long = "a".repeat(64);
    for body in [
        json!({}),
        json!({"slug": ""}),
        json!({"slug": "Research"}),
        json!({"slug": "-lead"}),
        json!({"slug": "a/b"}),
        json!({"slug": "a_b"}),
        json!({"slug": too_long}),
        json!({"slug": 7}),
        json!({"slug": "ok-name", "name": "   "}),
        json!({"slug": "ok-name", "name": "a\nb"}),
        json!({"slug": "ok-name", "anchor": "../outside"}),
        json!({"slug": "ok-name", "anchor": "/etc"}),
        json!({"slug": "ok-name", "engine": "scripted"}),
        json!({"slug": "ok-name", "engine": {"kind": "warp-drive"}}),
        json!({"slug": "ok-name", "color": "red"}),
    ] {
        let (status, v) = s.post(&agents_url(&s, ""), &body);
        assert_invalid(status, &v);
    }
    let (status, v) = s.post_raw(&agents_url(&s, ""), "{not json");
    assert_invalid(status, &v);
    assert!(!drive(&s).join("outside").exists());
    let (status, v) = s.get(&agents_url(&s, "/ok-name"));
    assert_error(status, &v, 404, "agent_not_found");

    // PATCH: name and anchor change, slug cannot.
    let (status, p) = s.patch(
        &agents_url(&s, "/research"),
        &json!({"name": "Research Lab"}),
    );
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["name"], "Research Lab");
    assert_eq!(p["anchor"], "agents/research");
    assert_eq!(p["id"], a["id"]);
    let (status, p) = s.patch(
        &agents_url(&s, "/research"),
        &json!({"anchor": "labs/research"}),
    );
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["anchor"], "labs/research");
    assert!(drive(&s).join("labs/research").is_dir());
    let (status, v) = s.patch(&agents_url(&s, "/research"), &json!({"slug": "other"}));
    assert_invalid(status, &v);
    let (status, v) = s.patch(&agents_url(&s, "/research"), &json!({"anchor": "../x"}));
    assert_invalid(status, &v);
    let (status, got) = s.get(&agents_url(&s, "/research"));
    assert_eq!(status, 200);
    assert_eq!(got["anchor"], "labs/research");
    assert_eq!(got["name"], "Research Lab");

    // root cannot be re-anchored or deleted.
    let (status, v) = s.patch(&agents_url(&s, "/root"), &json!({"anchor": "agents/root"}));
    assert_invalid(status, &v);
    let (status, v) = s.delete(&agents_url(&s, "/root"));
    assert_eq!(status, 409, "{v}");
    let (status, r2) = s.get(&agents_url(&s, "/root"));
    assert_eq!(status, 200);
    assert_eq!(r2["anchor"], "");

    // Unknown slugs: 404 agent_not_found on every agent route.
    let (status, v) = s.get(&agents_url(&s, "/nobody"));
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.patch(&agents_url(&s, "/nobody"), &json!({"name": "x"}));
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.delete(&agents_url(&s, "/nobody"));
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.get(&default_url(&s, "nobody", ""));
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.get(&default_url(&s, "nobody", "/history"));
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.post(
        &default_url(&s, "nobody", "/messages"),
        &json!({"prompt": "hi"}),
    );
    assert_error(status, &v, 404, "agent_not_found");
    let (status, v) = s.put(&default_url(&s, "nobody", ""), &json!({"sessionId": null}));
    assert_error(status, &v, 404, "agent_not_found");

    // An agent without sessions can be deleted.
    let (status, v) = s.delete(&agents_url(&s, "/writer-2"));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v, json!({"deleted": true}));
    let (status, v) = s.get(&agents_url(&s, "/writer-2"));
    assert_error(status, &v, 404, "agent_not_found");
    // ... and its slug is free again.
    create_agent(&s, json!({"slug": "writer-2"}));
}

#[test]
fn deleting_an_agent_that_owns_sessions_is_refused() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    let v = create_checked(&s, json!({"prompt": "owned", "cwd": "agents/research"}));
    let id = id_of(&v);
    let (status, v) = s.delete(&agents_url(&s, "/research"));
    assert_error(status, &v, 409, "agent_has_sessions");
    let (status, _) = s.get(&agents_url(&s, "/research"));
    assert_eq!(status, 200, "the agent is still there");
    assert_eq!(
        detail_checked(&s, &id)["agent"]["id"],
        agent_id(&s, "research").as_str()
    );

    settle(&s, &id);
    let (status, _) = s.delete(&s.sessions_url(&format!("/{id}")));
    assert_eq!(status, 200);
    let (status, v) = s.delete(&agents_url(&s, "/research"));
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.get(&agents_url(&s, "/research"));
    assert_error(status, &v, 404, "agent_not_found");
}

#[test]
fn sessions_belong_to_the_agent_with_the_longest_anchor_holding_their_cwd() {
    let s = Server::start();
    let team = create_agent(
        &s,
        json!({"slug": "team", "name": "Team", "anchor": "team"}),
    );
    let sub = create_agent(
        &s,
        json!({"slug": "sub", "name": "Sub", "anchor": "team/sub"}),
    );
    let (status, root) = s.get(&agents_url(&s, "/root"));
    assert_eq!(status, 200);
    let root_id = root["id"].as_str().unwrap();
    let root_name = root["name"].as_str().unwrap();
    let team_id = team["id"].as_str().unwrap();
    let sub_id = sub["id"].as_str().unwrap();
    mkdirs(&s, "team/sub/deep");
    mkdirs(&s, "team/other");
    mkdirs(&s, "teammate");
    mkdirs(&s, "elsewhere");

    let cases = [
        (None, root_id, root_name),
        (Some("team"), team_id, "Team"),
        (Some("team/other"), team_id, "Team"),
        (Some("team/sub"), sub_id, "Sub"),
        (Some("team/sub/deep"), sub_id, "Sub"),
        // A sibling that merely shares the prefix is not inside the anchor.
        (Some("teammate"), root_id, root_name),
        (Some("elsewhere"), root_id, root_name),
    ];
    let mut by_agent: Vec<(String, String)> = Vec::new();
    for (cwd, want_id, want_name) in cases {
        let mut body = json!({"prompt": format!("in {cwd:?}")});
        if let Some(c) = cwd {
            body["cwd"] = json!(c);
        }
        let v = create_checked(&s, body);
        let snap = &v["snapshot"];
        assert_eq!(snap["agent"]["id"], want_id, "cwd {cwd:?}: {snap}");
        assert_eq!(snap["agent"]["name"], want_name, "cwd {cwd:?}: {snap}");
        match cwd {
            Some(c) => assert_eq!(snap["cwd"], c),
            None => assert!(snap.get("cwd").is_none(), "{snap}"),
        }
        by_agent.push((want_id.to_string(), id_of(&v)));
    }

    // The list's agentId filter follows the ownership.
    for agent in [root_id, team_id] {
        let mut want: Vec<String> = by_agent
            .iter()
            .filter(|(a, _)| a == agent)
            .map(|(_, id)| id.clone())
            .collect();
        want.reverse();
        assert_eq!(
            list_ids(&s, &format!("agentId={}", query_escape(agent))),
            want
        );
    }

    // Sessions show the agent's current name.
    let (status, _) = s.patch(&agents_url(&s, "/sub"), &json!({"name": "Renamed"}));
    assert_eq!(status, 200);
    let sub_session = &by_agent.iter().find(|(a, _)| a == sub_id).unwrap().1;
    assert_eq!(detail_checked(&s, sub_session)["agent"]["name"], "Renamed");
}

// ---------------------------------------------------------------------------------------------
// Working directory (R65–R68)

/// `projects/release`, `projects/file.txt`, `escape` -> a folder outside the drive, `dangling` ->
/// nowhere, `alias` -> `projects/release` (inside).
fn cwd_fixture(s: &Server) {
    mkdirs(s, "projects/release");
    write_file(s, "projects/file.txt", b"not a folder");
    let out = outside_dir(s);
    symlink(s, &out, "escape");
    symlink(s, Path::new("/nonexistent/sessiond-test"), "dangling");
    symlink(s, &drive(s).join("projects/release"), "alias");
}

const BAD_CWDS: [(&str, &str); 8] = [
    ("nope", "missing"),
    ("projects/nope/deeper", "missing"),
    ("projects/file.txt", "not_a_directory"),
    ("../outside", "outside_drive"),
    ("projects/../../outside", "outside_drive"),
    ("/etc", "outside_drive"),
    ("escape", "outside_drive"),
    ("dangling", "outside_drive"),
];

#[test]
fn cwd_on_create_is_normalised_and_checked_on_the_filesystem_r65_r67_r68() {
    let s = Server::start();
    cwd_fixture(&s);

    // R67: lexical normalisation, then the real directory (links resolved inside the drive).
    for (cwd, want) in [
        ("projects/drafts/../release", "projects/release"),
        ("./projects//release/", "projects/release"),
        ("alias", "projects/release"),
        ("projects", "projects"),
    ] {
        let v = create_checked(&s, json!({"prompt": "where am I", "cwd": cwd}));
        assert_eq!(v["snapshot"]["cwd"], want, "cwd {cwd}");
        assert_eq!(detail_checked(&s, &id_of(&v))["cwd"], want);
    }
    // A cwd set to the drive root is shown as it was set and answered: ".".
    let v = create_checked(&s, json!({"prompt": "root", "cwd": "."}));
    assert_eq!(v["snapshot"]["cwd"], ".", "{}", v["snapshot"]);

    // R68: invalid targets are 422 with the exact seed body, and nothing is created.
    let before = all_session_ids(&s);
    for (cwd, reason) in BAD_CWDS {
        let (status, v) = s.post(&s.sessions_url(""), &json!({"prompt": "x", "cwd": cwd}));
        assert_invalid_cwd(status, &v, reason);
        let (status, v) = s.post(
            &s.sessions_url("/wait"),
            &json!({"prompt": "x", "cwd": cwd, "clientRequestId": new_uuid()}),
        );
        assert_invalid_cwd(status, &v, reason);
    }
    assert_eq!(all_session_ids(&s), before, "nothing was created");
    // A cwd the schema refuses is a 400, not a 422.
    for cwd in [json!(""), json!("a\nb"), json!(5)] {
        let (status, v) = s.post(&s.sessions_url(""), &json!({"prompt": "x", "cwd": cwd}));
        assert_invalid(status, &v);
    }
    assert_eq!(all_session_ids(&s), before);
}

#[test]
fn moving_the_cwd_validates_stores_and_applies_from_the_next_turn_r66_r67_r68() {
    let s = Server::start();
    cwd_fixture(&s);
    let v = create_checked(&s, json!({"prompt": "first turn"}));
    let id = id_of(&v);
    settle(&s, &id);

    let before = last_seq(&s, &id);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "projects/drafts/../release"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(CWD, &v);
    assert_eq!(
        v,
        json!({"session": {"id": id, "cwd": "projects/release"}}),
        "R67"
    );
    assert_eq!(detail_checked(&s, &id)["cwd"], "projects/release");
    // The move is recorded as a system event and starts no turn.
    let events = history(&s, &id);
    let new: Vec<&Value> = events.iter().filter(|e| seq(e) > before).collect();
    assert_eq!(new.len(), 1, "{new:#?}");
    assert_eq!(etype(new[0]), "system", "{new:#?}");
    assert!(
        new[0]["event"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("projects/release"),
        "{new:#?}"
    );
    assert_ne!(detail_checked(&s, &id)["turnStatus"], "running");

    // The next turn runs with it: the wait answer carries the new cwd.
    let (status, w) = s.post(
        &s.sessions_url(&format!("/{id}/messages/wait")),
        &json!({"prompt": "second turn", "clientRequestId": new_uuid()}),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(MESSAGES_WAIT, &w);
    assert_eq!(w["cwd"], "projects/release", "{w}");
    assert_eq!(w["sessionId"], id.as_str());

    // Links inside the drive are resolved to their canonical target.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "projects"}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "alias"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["session"]["cwd"], "projects/release");

    // R68: every invalid target is refused with nothing written.
    let before = last_seq(&s, &id);
    for (cwd, reason) in BAD_CWDS {
        let (status, v) = s.post(&s.sessions_url(&format!("/{id}/cwd")), &json!({"cwd": cwd}));
        assert_invalid_cwd(status, &v, reason);
    }
    for body in [json!({}), json!({"cwd": ""}), json!({"cwd": "a\tb"})] {
        let (status, v) = s.post(&s.sessions_url(&format!("/{id}/cwd")), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(last_seq(&s, &id), before, "nothing was written");
    assert_eq!(detail_checked(&s, &id)["cwd"], "projects/release");

    // The drive root is answered as "." and the snapshot shows what was answered.
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/cwd")), &json!({"cwd": "."}));
    assert_eq!(status, 200, "{v}");
    assert_schema(CWD, &v);
    assert_eq!(v["session"]["cwd"], ".");
    assert_eq!(detail_checked(&s, &id)["cwd"], ".");
    let (status, w) = s.post(
        &s.sessions_url(&format!("/{id}/messages/wait")),
        &json!({"prompt": "third turn", "clientRequestId": new_uuid()}),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(MESSAGES_WAIT, &w);
    assert_eq!(w["cwd"], ".", "{w}");

    // Unknown session: 404.
    let (status, v) = s.post(
        &s.sessions_url("/0190aaaa-0000-7000-8000-000000000000/cwd"),
        &json!({"cwd": "projects"}),
    );
    assert_error(status, &v, 404, "not_found");
}

#[test]
fn an_agents_sessions_cannot_leave_its_anchor_r68() {
    let s = Server::start();
    cwd_fixture(&s);
    create_agent(&s, json!({"slug": "research"}));
    mkdirs(&s, "agents/research/notes");
    mkdirs(&s, "agents/researcher");
    // A link inside the anchor that leads elsewhere in the drive.
    symlink(
        &s,
        &drive(&s).join("projects"),
        "agents/research/projects-link",
    );
    let v = create_checked(
        &s,
        json!({"prompt": "agent work", "cwd": "agents/research"}),
    );
    let id = id_of(&v);
    assert_eq!(
        v["snapshot"]["agent"]["id"],
        agent_id(&s, "research").as_str()
    );

    let before = last_seq(&s, &id);
    for cwd in [
        "projects",
        ".",
        "agents",
        "agents/researcher",
        "agents/research/../researcher",
        "agents/research/projects-link",
    ] {
        let (status, v) = s.post(&s.sessions_url(&format!("/{id}/cwd")), &json!({"cwd": cwd}));
        assert_invalid_cwd(status, &v, "outside_agent_anchor");
    }
    // Filesystem reasons come first.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "agents/research/missing"}),
    );
    assert_invalid_cwd(status, &v, "missing");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "escape"}),
    );
    assert_invalid_cwd(status, &v, "outside_drive");
    assert_eq!(last_seq(&s, &id), before);
    assert_eq!(detail_checked(&s, &id)["cwd"], "agents/research");

    // Inside the anchor is fine.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/cwd")),
        &json!({"cwd": "agents/research/notes/../notes"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["session"]["cwd"], "agents/research/notes");
    assert_eq!(detail_checked(&s, &id)["cwd"], "agents/research/notes");
}

// ---------------------------------------------------------------------------------------------
// Child sessions (R52–R54)

#[test]
fn child_sessions_inherit_cwd_tier_and_agent_with_explicit_overrides_r52_r53_r54() {
    let s = Server::start();
    cwd_fixture(&s);
    create_agent(&s, json!({"slug": "research"}));
    mkdirs(&s, "agents/research/notes");
    let root_agent = agent_id(&s, "root");
    let research = agent_id(&s, "research");

    let parent = id_of(&create_checked(
        &s,
        json!({"prompt": "parent", "cwd": "projects/release", "tier": "balanced"}),
    ));

    // Omitted cwd and tier come from the parent.
    let v = create_child_checked(&s, &parent, json!({"prompt": "child"}));
    let snap = &v["snapshot"];
    assert_eq!(snap["createdBySessionId"], parent.as_str());
    assert_eq!(snap["cwd"], "projects/release");
    assert_eq!(snap["tier"], "balanced");
    assert_eq!(snap["agent"]["id"], root_agent.as_str());
    let child = id_of(&v);
    assert_ne!(child, parent);

    // Explicit values win; the cwd is normalised and checked like any other.
    let v = create_child_checked(
        &s,
        &parent,
        json!({"prompt": "override", "cwd": "projects/drafts/../release/..", "tier": "economy"}),
    );
    assert_eq!(v["snapshot"]["cwd"], "projects");
    assert_eq!(v["snapshot"]["tier"], "economy");
    assert_eq!(v["snapshot"]["createdBySessionId"], parent.as_str());
    // A child stays with its parent's agent even with a cwd in another agent's anchor.
    let v = create_child_checked(
        &s,
        &parent,
        json!({"prompt": "into the agent folder", "cwd": "agents/research"}),
    );
    assert_eq!(v["snapshot"]["agent"]["id"], root_agent.as_str());
    assert_eq!(v["snapshot"]["cwd"], "agents/research");
    // A grandchild inherits from its own parent.
    let g = create_child_checked(&s, &child, json!({"prompt": "grandchild"}));
    assert_eq!(g["snapshot"]["createdBySessionId"], child.as_str());
    assert_eq!(g["snapshot"]["cwd"], "projects/release");

    // Invalid cwd on a child: 422 and nothing created.
    let before = all_session_ids(&s);
    for (cwd, reason) in BAD_CWDS {
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{parent}/sessions")),
            &json!({"prompt": "bad child", "cwd": cwd}),
        );
        assert_invalid_cwd(status, &v, reason);
    }
    assert_eq!(all_session_ids(&s), before);

    // Children of an agent's session belong to that agent and stay inside its anchor.
    let ap = create_checked(
        &s,
        json!({"prompt": "agent parent", "cwd": "agents/research"}),
    );
    let ap = id_of(&ap);
    let v = create_child_checked(&s, &ap, json!({"prompt": "agent child"}));
    assert_eq!(v["snapshot"]["agent"]["id"], research.as_str());
    assert_eq!(v["snapshot"]["cwd"], "agents/research");
    let v = create_child_checked(
        &s,
        &ap,
        json!({"prompt": "agent child deeper", "cwd": "agents/research/notes"}),
    );
    assert_eq!(v["snapshot"]["agent"]["id"], research.as_str());
    assert_eq!(v["snapshot"]["cwd"], "agents/research/notes");
    let before = all_session_ids(&s);
    for cwd in ["projects", ".", "agents/research/.."] {
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{ap}/sessions")),
            &json!({"prompt": "escaping child", "cwd": cwd}),
        );
        assert_invalid_cwd(status, &v, "outside_agent_anchor");
    }
    assert_eq!(all_session_ids(&s), before);

    // The child wait route: 200 with the terminal, the child's id and its inherited cwd.
    let (status, w) = s.post(
        &s.sessions_url(&format!("/{parent}/sessions/wait")),
        &json!({"prompt": "child and wait", "clientRequestId": new_uuid()}),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(CHILD_WAIT, &w);
    assert_known_event(&w["terminal"]["event"]);
    assert_eq!(w["cwd"], "projects/release");
    let wchild = w["sessionId"].as_str().unwrap();
    assert_ne!(wchild, parent);
    let d = detail_checked(&s, wchild);
    assert_eq!(d["createdBySessionId"], parent.as_str());
    assert_eq!(d["tier"], "balanced");
}

// ---------------------------------------------------------------------------------------------
// Default-session alias (R55–R63, R50)

fn get_default(s: &Server, agent: &str) -> Value {
    let (status, v) = s.get(&default_url(s, agent, ""));
    assert_eq!(status, 200, "GET default {agent}: {v}");
    assert_schema(DEFAULT_GET, &v);
    v
}

fn default_id(s: &Server, agent: &str) -> Option<String> {
    get_default(s, agent)["session"]["id"]
        .as_str()
        .map(str::to_owned)
}

/// `POST …/default/messages`, 200 + schema; returns the body.
fn default_message(s: &Server, agent: &str, body: Value) -> Value {
    let (status, v) = s.post(&default_url(s, agent, "/messages"), &body);
    assert_eq!(status, 200, "default message {body}: {v}");
    assert_schema(DEFAULT_MESSAGE, &v);
    v
}

/// Asserts a `CreateSessionResponse` and returns the session id.
fn created_id(v: &Value) -> String {
    assert_schema(CREATE, v);
    assert_schema(DETAIL, &v["snapshot"]);
    check_history_page(&v["history"]);
    id_of(v)
}

/// Asserts a `DefaultMessageAck` and returns its session id.
fn ack_id(v: &Value) -> String {
    let keys: BTreeSet<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["ok", "delivery", "sessionId"]),
        "DefaultMessageAck: {v}"
    );
    assert_eq!(v["ok"], true);
    assert!(matches!(
        v["delivery"].as_str(),
        Some("accepted" | "queued")
    ));
    v["sessionId"].as_str().expect("sessionId").to_owned()
}

fn assert_no_default(s: &Server, agent: &str) {
    assert_eq!(get_default(s, agent), json!({"session": null}), "R56");
    let (status, v) = s.get(&default_url(s, agent, "/history"));
    assert_eq!(status, 404, "{v}");
    assert_eq!(v, json!({"error": "no_default_session"}), "exact body");
    assert_schema(DEFAULT_HISTORY_ERRORS, &v);
}

#[test]
fn default_alias_is_empty_before_the_first_message_r55_r56() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    for agent in ["root", "research"] {
        assert_no_default(&s, agent);
        let (status, v) = s.get(&default_url(&s, agent, "/history?before=10&limit=5"));
        assert_eq!(status, 404, "{v}");
        assert_eq!(v, json!({"error": "no_default_session"}));
    }
    // Ordinary sessions of the owner do not make a default.
    create_checked(&s, json!({"prompt": "plain", "cwd": "agents/research"}));
    assert_no_default(&s, "research");
}

#[test]
fn first_default_message_creates_and_binds_later_ones_continue_r57_r61_r62() {
    let s = Server::start();
    let agent = create_agent(&s, json!({"slug": "research", "name": "Research"}));

    let v = default_message(
        &s,
        "research",
        json!({"prompt": "hello agent", "agentFirstMessage": "Hi! I am the research agent.", "tier": "economy"}),
    );
    let id = created_id(&v);
    let snap = &v["snapshot"];
    assert_eq!(
        snap["agent"],
        json!({"id": agent["id"], "name": "Research"})
    );
    assert_eq!(snap["cwd"], "agents/research", "cwd = agent anchor");
    assert_eq!(snap["tier"], "economy");
    assert!(snap.get("createdBySessionId").is_none());
    assert_eq!(v["session"]["sessionId"], id.as_str(), "R62");
    // agentFirstMessage is recorded before the prompt.
    let first: Vec<&str> = v["history"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(etype)
        .collect();
    assert_eq!(
        &first[..3],
        ["session_created", "agent_message", "prompt_submitted"],
        "{v:#}"
    );
    assert_eq!(
        v["history"]["events"][1]["event"]["message"],
        "Hi! I am the research agent."
    );
    assert_eq!(v["history"]["events"][2]["event"]["prompt"], "hello agent");
    assert_eq!(v["history"]["events"][2]["event"]["inputKind"], "initial");

    // Bound at once; the alias resolves to the real session.
    assert_eq!(default_id(&s, "research").as_deref(), Some(id.as_str()));
    let d = get_default(&s, "research");
    assert_schema(DETAIL, &d["session"]);
    assert_eq!(d["session"]["agent"]["id"], agent["id"]);

    // R61: automatic mode.
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "complete", "{t:#}");
    let events = history(&s, &id);
    let started = of_type(&events, "turn_started");
    assert!(!started.is_empty(), "{events:#?}");
    assert_eq!(started[0]["event"]["state"]["mode"], "auto", "R61");
    settle(&s, &id);

    // Default history answers the same events as the id-addressed history.
    let (status, page) = s.get(&default_url(&s, "research", "/history?limit=500"));
    assert_eq!(status, 200, "{page}");
    assert_schema(DEFAULT_HISTORY, &page);
    check_events(page["events"].as_array().unwrap());
    assert_eq!(page["events"].as_array().unwrap(), &events);
    let (status, page) = s.get(&default_url(&s, "research", "/history?limit=1"));
    assert_eq!(status, 200);
    assert_schema(DEFAULT_HISTORY, &page);
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    assert_eq!(page["nextCursor"], 1);
    let (status, v) = s.get(&default_url(&s, "research", "/history?cursor=1&before=3"));
    assert_invalid(status, &v);

    // A later message continues the same session (DefaultMessageAck); a second
    // agentFirstMessage is not recorded.
    let before = last_seq(&s, &id);
    let v = default_message(
        &s,
        "research",
        json!({"prompt": "second message", "agentFirstMessage": "ignored now"}),
    );
    assert_eq!(ack_id(&v), id, "R62");
    let t = wait_terminal(&s, &id, before);
    assert_eq!(etype(&t), "complete");
    let events = history(&s, &id);
    assert_eq!(of_type(&events, "agent_message").len(), 1, "{events:#?}");
    let prompts: Vec<&Value> = of_type(&events, "prompt_submitted");
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[1]["event"]["prompt"], "second message");
    assert_eq!(prompts[1]["event"]["inputKind"], "message");
    assert_eq!(
        list_ids(
            &s,
            &format!("agentId={}", query_escape(agent["id"].as_str().unwrap()))
        ),
        std::slice::from_ref(&id),
        "still one session"
    );

    // The root owner's default works in the drive root (no cwd).
    let v = default_message(&s, "root", json!({"prompt": "root chat"}));
    let root_default = created_id(&v);
    assert!(v["snapshot"].get("cwd").is_none(), "{}", v["snapshot"]);
    assert_eq!(v["snapshot"]["agent"]["id"], agent_id(&s, "root").as_str());
    assert_ne!(root_default, id);
    assert_eq!(
        default_id(&s, "root").as_deref(),
        Some(root_default.as_str())
    );
    assert_eq!(default_id(&s, "research").as_deref(), Some(id.as_str()));
}

#[test]
fn agent_first_message_is_limited_to_2000_characters_s2() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    let before = all_session_ids(&s);
    let (status, v) = s.post(
        &default_url(&s, "research", "/messages"),
        &json!({"prompt": "hi", "agentFirstMessage": "x".repeat(2001)}),
    );
    assert_invalid(status, &v);
    // Other invalid bodies: empty prompt, bad tier, mistyped agentFirstMessage, empty source.
    for body in [
        json!({"prompt": ""}),
        json!({"prompt": "hi", "tier": "ultra"}),
        json!({"prompt": "hi", "agentFirstMessage": 5}),
        json!({"prompt": "hi", "sourceSessionId": ""}),
    ] {
        let (status, v) = s.post(&default_url(&s, "research", "/messages"), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(all_session_ids(&s), before, "nothing created");
    assert_no_default(&s, "research");

    let text = "é".repeat(2000);
    let v = default_message(
        &s,
        "research",
        json!({"prompt": "hi", "agentFirstMessage": text}),
    );
    let id = created_id(&v);
    let events = history(&s, &id);
    let m = of_type(&events, "agent_message");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["event"]["message"], text.as_str());
}

#[test]
fn concurrent_first_default_messages_create_exactly_one_session_r57() {
    let s = Arc::new(Server::start());
    let agent = create_agent(&s, json!({"slug": "research"}));
    const N: usize = 8;
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let s = Arc::clone(&s);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let (status, v) = s.post(
                    &default_url(&s, "research", "/messages"),
                    &json!({"prompt": format!("racer {i}")}),
                );
                (status, v)
            })
        })
        .collect();
    let mut created = Vec::new();
    let mut continued = Vec::new();
    for h in handles {
        let (status, v) = h.join().expect("thread");
        assert_eq!(status, 200, "{v}");
        assert_schema(DEFAULT_MESSAGE, &v);
        if v.get("snapshot").is_some() {
            created.push(created_id(&v));
        } else {
            continued.push(ack_id(&v));
        }
    }
    assert_eq!(created.len(), 1, "exactly one call created the default");
    let id = created[0].clone();
    assert_eq!(continued.len(), N - 1);
    assert!(continued.iter().all(|c| *c == id), "{continued:?} vs {id}");
    assert_eq!(
        list_ids(
            &s,
            &format!("agentId={}", query_escape(agent["id"].as_str().unwrap()))
        ),
        std::slice::from_ref(&id)
    );
    assert_eq!(default_id(&s, "research").as_deref(), Some(id.as_str()));
    // Every racer's prompt landed in that one session.
    let deadline = Instant::now() + WAIT;
    loop {
        let events = history(&s, &id);
        let prompts = of_type(&events, "prompt_submitted").len();
        if prompts == N {
            break;
        }
        assert!(Instant::now() < deadline, "{prompts} prompts: {events:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn put_default_binds_to_the_owners_sessions_and_null_demotes_r58_r59_r63() {
    let s = Server::start();
    let agent = create_agent(&s, json!({"slug": "research"}));
    let agent_q = format!("agentId={}", query_escape(agent["id"].as_str().unwrap()));

    // S2: another session of the same owner; R: a session of another owner (root).
    let s2 = id_of(&create_checked(
        &s,
        json!({"prompt": "second", "cwd": "agents/research"}),
    ));
    let r = id_of(&create_checked(&s, json!({"prompt": "root one"})));
    // S1: the default, running slowly so that the demotion happens mid-turn.
    let v = default_message(
        &s,
        "research",
        json!({"prompt": "/slow 2000\n/reply still here"}),
    );
    let s1 = created_id(&v);
    let excl = list_ids(&s, "excludeDefault=true");
    assert!(
        !excl.contains(&s1),
        "R63: the default is excluded: {excl:?}"
    );
    assert!(excl.contains(&s2) && excl.contains(&r), "{excl:?}");

    // R59: demote while running; the session keeps running and reappears in the listing.
    assert_eq!(detail_checked(&s, &s1)["turnStatus"], "running");
    let (status, v) = s.put(
        &default_url(&s, "research", ""),
        &json!({"sessionId": null}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(DEFAULT_PUT, &v);
    assert_eq!(v, json!({"session": null}));
    assert_eq!(
        detail_checked(&s, &s1)["turnStatus"],
        "running",
        "untouched"
    );
    assert_no_default(&s, "research");
    let excl = list_ids(&s, "excludeDefault=true");
    assert!(
        excl.contains(&s1),
        "R63: demoted session listed again: {excl:?}"
    );
    let t = wait_terminal(&s, &s1, 0);
    assert_eq!(etype(&t), "complete", "{t:#}");
    let texts: Vec<Value> = history(&s, &s1)
        .into_iter()
        .filter(|e| etype(e) == "step" && e["event"]["step"]["type"] == "text")
        .map(|e| e["event"]["step"]["text"].clone())
        .collect();
    assert_eq!(texts, [json!("still here")], "the turn ran to its end");
    assert!(all_session_ids(&s).contains(&s1), "not deleted");

    // The next message starts a fresh default.
    let v = default_message(&s, "research", json!({"prompt": "fresh start"}));
    let s3 = created_id(&v);
    assert!(s3 != s1 && s3 != s2, "{s3}");
    assert_eq!(default_id(&s, "research").as_deref(), Some(s3.as_str()));

    // PUT binds to any session the owner already has.
    let (status, v) = s.put(&default_url(&s, "research", ""), &json!({"sessionId": s2}));
    assert_eq!(status, 200, "{v}");
    assert_schema(DEFAULT_PUT, &v);
    assert_schema(DETAIL, &v["session"]);
    assert_eq!(v["session"]["id"], s2.as_str());
    assert_eq!(default_id(&s, "research").as_deref(), Some(s2.as_str()));
    // Idempotent.
    let (status, v2) = s.put(&default_url(&s, "research", ""), &json!({"sessionId": s2}));
    assert_eq!(status, 200);
    assert_eq!(v2["session"]["id"], s2.as_str());
    let excl = list_ids(&s, "excludeDefault=true");
    assert!(!excl.contains(&s2) && excl.contains(&s3), "{excl:?}");
    // Messages now go to S2.
    let v = default_message(&s, "research", json!({"prompt": "to s2"}));
    assert_eq!(ack_id(&v), s2);

    // Another owner's session, or an unknown one: 404, binding unchanged.
    for bad in [r.as_str(), "0190aaaa-0000-7000-8000-000000000000"] {
        let (status, v) = s.put(&default_url(&s, "research", ""), &json!({"sessionId": bad}));
        assert_error(status, &v, 404, "not_found");
    }
    let (status, v) = s.put(&default_url(&s, "root", ""), &json!({"sessionId": s2}));
    assert_error(status, &v, 404, "not_found");
    assert_no_default(&s, "root");
    // Invalid bodies: 400.
    for body in [json!({}), json!({"sessionId": ""}), json!({"sessionId": 5})] {
        let (status, v) = s.put(&default_url(&s, "research", ""), &body);
        assert_invalid(status, &v);
    }
    assert_eq!(default_id(&s, "research").as_deref(), Some(s2.as_str()));
    assert_eq!(list_ids(&s, &agent_q).len(), 3);
}

#[test]
fn deleting_the_default_clears_the_binding_archiving_does_not_r58_r60() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    let s1 = created_id(&default_message(&s, "research", json!({"prompt": "one"})));
    settle(&s, &s1);

    // R60: archiving keeps the binding.
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{s1}/archive")),
        &json!({"archived": true}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(ARCHIVE, &v);
    let d = get_default(&s, "research");
    assert_eq!(d["session"]["id"], s1.as_str());
    assert!(d["session"]["archivedAt"].is_number(), "{d}");
    let v = default_message(&s, "research", json!({"prompt": "still you?"}));
    assert_eq!(ack_id(&v), s1);
    settle(&s, &s1);
    let (status, _) = s.put(
        &s.sessions_url(&format!("/{s1}/archive")),
        &json!({"archived": false}),
    );
    assert_eq!(status, 200);
    assert_eq!(default_id(&s, "research").as_deref(), Some(s1.as_str()));

    // R58: permanently deleting the session clears it.
    let (status, v) = s.delete(&s.sessions_url(&format!("/{s1}")));
    assert_eq!(status, 200, "{v}");
    assert_no_default(&s, "research");
    let v = default_message(&s, "research", json!({"prompt": "again"}));
    let s2 = created_id(&v);
    assert_ne!(s2, s1);
    assert_eq!(default_id(&s, "research").as_deref(), Some(s2.as_str()));
}

#[test]
fn default_wait_retry_observes_the_original_session_after_the_binding_moved_r50() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));

    // clientRequestId is required on the wait route.
    let (status, v) = s.post(
        &default_url(&s, "research", "/messages/wait"),
        &json!({"prompt": "no key"}),
    );
    assert_invalid(status, &v);
    assert_no_default(&s, "research");

    let body = json!({"prompt": "wait for me", "clientRequestId": new_uuid()});
    let (status, w) = s.post(&default_url(&s, "research", "/messages/wait"), &body);
    assert_eq!(status, 200, "{w}");
    assert_schema(DEFAULT_MESSAGE_WAIT, &w);
    assert_known_event(&w["terminal"]["event"]);
    assert_eq!(w["terminal"]["event"]["type"], "complete");
    assert_eq!(w["cwd"], "agents/research");
    let s1 = w["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(default_id(&s, "research").as_deref(), Some(s1.as_str()));
    let events = history(&s, &s1);
    let started = of_type(&events, "turn_started");
    assert_eq!(started[0]["event"]["state"]["mode"], "auto", "R61");

    // Move the binding to another session of the owner.
    let s2 = id_of(&create_checked(
        &s,
        json!({"prompt": "other", "cwd": "agents/research"}),
    ));
    settle(&s, &s2);
    let (status, _) = s.put(&default_url(&s, "research", ""), &json!({"sessionId": s2}));
    assert_eq!(status, 200);
    let s2_before = last_seq(&s, &s2);
    let s1_before = last_seq(&s, &s1);

    // The identical retry still observes the original input.
    let (status, again) = s.post(&default_url(&s, "research", "/messages/wait"), &body);
    assert_eq!(status, 200, "{again}");
    assert_schema(DEFAULT_MESSAGE_WAIT, &again);
    assert_eq!(again["sessionId"], s1.as_str(), "R50");
    assert_eq!(again["inputSeq"], w["inputSeq"]);
    assert_eq!(again["terminal"]["seq"], w["terminal"]["seq"]);
    assert_eq!(
        last_seq(&s, &s2),
        s2_before,
        "nothing sent to the new default"
    );
    assert_eq!(last_seq(&s, &s1), s1_before, "nothing written again");

    // The same holds for the non-wait route: the retried creating call is the creation again.
    let (status, _) = s.put(
        &default_url(&s, "research", ""),
        &json!({"sessionId": null}),
    );
    assert_eq!(status, 200);
    let body = json!({"prompt": "create me once", "clientRequestId": new_uuid()});
    let s3 = created_id(&default_message(&s, "research", body.clone()));
    settle(&s, &s3);
    let (status, _) = s.put(&default_url(&s, "research", ""), &json!({"sessionId": s2}));
    assert_eq!(status, 200);
    let v = default_message(&s, "research", body);
    let replay = if v.get("snapshot").is_some() {
        created_id(&v)
    } else {
        ack_id(&v)
    };
    assert_eq!(replay, s3);
    assert_eq!(last_seq(&s, &s2), s2_before);
    assert_eq!(of_type(&history(&s, &s3), "prompt_submitted").len(), 1);
    // The same key with a different body is a conflict.
    let (status, v) = s.post(
        &default_url(&s, "research", "/messages/wait"),
        &json!({"prompt": "different", "clientRequestId": again_key(&w, &s, &s1)}),
    );
    assert_error(status, &v, 409, "idempotency_conflict");
}

/// The clientRequestId recorded on the original input of a wait answer.
fn again_key(w: &Value, s: &Server, session: &str) -> String {
    let seq = w["inputSeq"].as_u64().unwrap();
    history(s, session)
        .into_iter()
        .find(|e| e["seq"].as_u64() == Some(seq))
        .expect("input event")["event"]["clientRequestId"]
        .as_str()
        .expect("clientRequestId")
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// sourceSessionId (R7)

#[test]
fn source_session_id_attributes_message_note_and_answer_r7() {
    let s = Server::start();
    let target = id_of(&create_checked(
        &s,
        json!({"prompt": "/ask Which colour? | red | blue"}),
    ));
    let source = id_of(&create_checked(&s, json!({"prompt": "the sender"})));
    let t = wait_terminal(&s, &target, 0);
    assert_eq!(etype(&t), "ask", "{t:#}");
    settle(&s, &source);
    let unknown = "0190aaaa-0000-7000-8000-000000000000";

    // Unknown sources: 404 and nothing written, the session still asking.
    let before = last_seq(&s, &target);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/answer")),
        &json!({"answer": "red", "sourceSessionId": unknown}),
    );
    assert_error(status, &v, 404, "not_found");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/note")),
        &json!({"note": "fyi", "sourceSessionId": unknown}),
    );
    assert_error(status, &v, 404, "not_found");
    assert_eq!(last_seq(&s, &target), before);
    assert_eq!(detail_checked(&s, &target)["turnStatus"], "ask");

    // answer
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/answer")),
        &json!({"answer": "red", "sourceSessionId": source}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(ANSWER, &v);
    let t = wait_terminal(&s, &target, before);
    assert_eq!(etype(&t), "complete");
    settle(&s, &target);
    // note
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/note")),
        &json!({"note": "context from another session", "sourceSessionId": source}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(NOTE, &v);
    let note_seq = v["seq"].as_u64().unwrap();
    // message (unknown first, then real)
    let before = last_seq(&s, &target);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/messages")),
        &json!({"prompt": "hello", "sourceSessionId": unknown}),
    );
    assert_error(status, &v, 404, "not_found");
    assert_eq!(last_seq(&s, &target), before);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{target}/messages")),
        &json!({"prompt": "hello from a session", "sourceSessionId": source}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(MESSAGES, &v);
    wait_terminal(&s, &target, before);
    // Without sourceSessionId the credential's owner is the sender.
    settle(&s, &target);
    let plain = last_seq(&s, &target);
    let (status, _) = s.post(
        &s.sessions_url(&format!("/{target}/messages")),
        &json!({"prompt": "plain"}),
    );
    assert_eq!(status, 200);

    let events = history(&s, &target);
    let want = json!({"kind": "session", "sessionId": source});
    let answer = of_type(&events, "answer_submitted");
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0]["event"]["sender"], want);
    let note = events.iter().find(|e| seq(e) == note_seq).unwrap();
    assert_eq!(etype(note), "note_submitted");
    assert_eq!(note["event"]["sender"], want);
    let prompts = of_type(&events, "prompt_submitted");
    assert_eq!(prompts.len(), 3, "{prompts:#?}");
    assert_eq!(prompts[0]["event"]["sender"]["kind"], "user");
    assert_eq!(prompts[1]["event"]["prompt"], "hello from a session");
    assert_eq!(prompts[1]["event"]["sender"], want);
    assert!(seq(prompts[2]) > plain);
    assert_eq!(prompts[2]["event"]["sender"]["kind"], "user");

    // The default-alias message routes take it too; an unknown one creates nothing.
    let (status, v) = s.post(
        &default_url(&s, "root", "/messages"),
        &json!({"prompt": "x", "sourceSessionId": unknown}),
    );
    assert_error(status, &v, 404, "not_found");
    assert_no_default(&s, "root");
    let v = default_message(
        &s,
        "root",
        json!({"prompt": "from a session", "sourceSessionId": source}),
    );
    let d = created_id(&v);
    let p = of_type(&history(&s, &d), "prompt_submitted")[0].clone();
    assert_eq!(p["event"]["sender"], want);
    settle(&s, &d);
    let (status, v) = s.post(
        &default_url(&s, "root", "/messages/wait"),
        &json!({"prompt": "x", "clientRequestId": new_uuid(), "sourceSessionId": unknown}),
    );
    assert_error(status, &v, 404, "not_found");
    assert_eq!(of_type(&history(&s, &d), "prompt_submitted").len(), 1);
}

// ---------------------------------------------------------------------------------------------
// Uploads (R36–R42)

/// `POST …/attachments/session`, 200 + schema.
fn mint(s: &Server, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url("/attachments/session"), &body);
    assert_eq!(status, 200, "mint {body}: {v}");
    assert_schema(MINT, &v);
    v
}

fn upload_url(grant: &Value, encoded_name: &str) -> String {
    format!(
        "{}{}/{}",
        grant["vmBaseUrl"].as_str().unwrap(),
        grant["uploadPath"].as_str().unwrap(),
        encoded_name
    )
}

fn token(grant: &Value) -> &str {
    grant["uploadToken"].as_str().unwrap()
}

/// A raw upload PUT of `name` (URL-encoded here) with an optional bearer token.
fn put_file(
    s: &Server,
    grant: &Value,
    name: &str,
    bearer: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    put_encoded(s, grant, &query_escape(name), bearer, body)
}

fn put_encoded(
    s: &Server,
    grant: &Value,
    encoded_name: &str,
    bearer: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut req = s.http.put(upload_url(grant, encoded_name)).body(body);
    if let Some(t) = bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    into_json(req.send().expect("upload PUT"))
}

fn assert_no_partials(s: &Server) {
    let partials: Vec<String> = files_under(&drive(s))
        .into_iter()
        .filter(|f| f.contains(".partial") || f.contains(".upload-"))
        .collect();
    assert!(
        partials.is_empty(),
        "leftover temporary files: {partials:?}"
    );
}

#[test]
fn upload_grants_put_files_into_the_drive_without_overwriting_r36_r42() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    mkdirs(&s, "projects/release");

    // Without cwd: the drive root's uploads folder.
    let g = mint(&s, json!({}));
    assert_eq!(g["prefix"], "uploads");
    assert_eq!(g["vmBaseUrl"], s.base.as_str());
    let path = g["uploadPath"].as_str().unwrap();
    assert!(path.starts_with('/'), "{path}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let expires = g["expiresAt"].as_f64().unwrap();
    assert!(expires > now, "R39: expiresAt {expires} is in the future");
    assert!(!token(&g).is_empty());

    let bytes = b"first upload \x00\x01\xff".to_vec();
    let (status, v) = put_file(&s, &g, "notes.txt", Some(token(&g)), bytes.clone());
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        v,
        json!({"path": "uploads/notes.txt", "name": "notes.txt", "bytes": bytes.len()})
    );
    assert_eq!(
        std::fs::read(drive(&s).join("uploads/notes.txt")).unwrap(),
        bytes
    );

    // R42: the same name again is refused and the original kept.
    let (status, v) = put_file(
        &s,
        &g,
        "notes.txt",
        Some(token(&g)),
        b"replacement".to_vec(),
    );
    assert_error(status, &v, 409, "exists");
    assert_eq!(
        std::fs::read(drive(&s).join("uploads/notes.txt")).unwrap(),
        bytes
    );

    // Names are URL-decoded: spaces, unicode; an empty file is fine.
    let (status, v) = put_file(&s, &g, "my report é.md", Some(token(&g)), Vec::new());
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["path"], "uploads/my report é.md");
    assert_eq!(v["name"], "my report é.md");
    assert_eq!(v["bytes"], 0);
    assert!(drive(&s).join("uploads/my report é.md").is_file());
    // A token is good for several files while the grant lives.
    let (status, v) = put_file(&s, &g, "second.bin", Some(token(&g)), vec![7; 4096]);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["bytes"], 4096);

    // R37/R40: with a cwd, the prefix is the canonical `<cwd>/uploads`.
    let ga = mint(&s, json!({"cwd": "agents/research"}));
    assert_eq!(ga["prefix"], "agents/research/uploads");
    assert_ne!(ga["uploadPath"], g["uploadPath"]);
    assert_ne!(token(&ga), token(&g));
    let (status, v) = put_file(
        &s,
        &ga,
        "data.csv",
        Some(token(&ga)),
        b"a,b\n1,2\n".to_vec(),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["path"], "agents/research/uploads/data.csv");
    assert_eq!(
        std::fs::read(drive(&s).join("agents/research/uploads/data.csv")).unwrap(),
        b"a,b\n1,2\n"
    );
    // Same file name in another folder is no collision.
    let (status, v) = put_file(&s, &ga, "notes.txt", Some(token(&ga)), b"other".to_vec());
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["path"], "agents/research/uploads/notes.txt");
    let gp = mint(&s, json!({"cwd": "projects/drafts/../release/"}));
    assert_eq!(gp["prefix"], "projects/release/uploads");
    assert!(drive(&s).join("projects/release/uploads").is_dir());

    // An invalid cwd is the usual 422; a schema-invalid one a 400.
    let (status, v) = s.post(
        &s.sessions_url("/attachments/session"),
        &json!({"cwd": "nope"}),
    );
    assert_invalid_cwd(status, &v, "missing");
    let (status, v) = s.post(
        &s.sessions_url("/attachments/session"),
        &json!({"cwd": "../x"}),
    );
    assert_invalid_cwd(status, &v, "outside_drive");
    let (status, v) = s.post(&s.sessions_url("/attachments/session"), &json!({"cwd": ""}));
    assert_invalid(status, &v);
    assert!(!drive(&s).join("nope").exists());
    assert_no_partials(&s);
}

#[test]
fn upload_names_with_separators_dot_dot_control_or_invisible_characters_are_refused_r42() {
    let s = Server::start();
    let g = mint(&s, json!({}));
    let before = files_under(&drive(&s));
    for encoded in [
        "a%2Fb.txt",
        "..%2Fescape.txt",
        "..%2F..%2Fescape.txt",
        "a%5Cb.txt",
        "..%5Cescape.txt",
        "..secret",
        "a..b",
        "a%0Ab.txt",
        "tab%09.txt",
        "nul%00.txt",
        "del%7F.txt",
        "%FF%FE.txt",
        // Invisible format characters: a right-to-left override (invoice<RLO>fdp.exe shows as
        // invoiceexe.pdf), an isolate, a zero-width space, a BOM, a tag character.
        "invoice%E2%80%AEfdp.exe",
        "a%E2%81%A6b.txt",
        "zero%E2%80%8Bwidth.txt",
        "%EF%BB%BFbom.txt",
        "tag%F3%A0%80%81.txt",
        "line%E2%80%A8sep.txt",
        // Names that end in a space.
        "trailing.txt%20",
        "trailing%20%20",
    ] {
        let (status, v) = put_encoded(&s, &g, encoded, Some(token(&g)), b"x".to_vec());
        assert_invalid(status, &v);
        assert_eq!(files_under(&drive(&s)), before, "after {encoded}");
    }
    let long = "n".repeat(256);
    let (status, v) = put_file(&s, &g, &long, Some(token(&g)), b"x".to_vec());
    assert_invalid(status, &v);
    assert_eq!(files_under(&drive(&s)), before);
    assert!(!s.data_dir.join("drive").join("escape.txt").exists());
    assert!(!s.data_dir.join("escape.txt").exists());
    // 255 bytes is the longest name.
    let ok = "n".repeat(255);
    let (status, v) = put_file(&s, &g, &ok, Some(token(&g)), b"x".to_vec());
    assert_eq!(status, 201, "{v}");
    // Visible non-ASCII names and inner spaces are fine.
    for name in ["résumé final.pdf", "日本語.txt", "emoji 😀.png"] {
        let (status, v) = put_file(&s, &g, name, Some(token(&g)), b"x".to_vec());
        assert_eq!(status, 201, "{name}: {v}");
    }
}

#[test]
fn upload_tokens_authorise_only_their_own_grant_r38_r41() {
    let s = Server::start();
    mkdirs(&s, "projects");
    let a = mint(&s, json!({}));
    let b = mint(&s, json!({"cwd": "projects"}));
    let before = files_under(&drive(&s));

    // No token, a wrong one, another scheme: 401 with a challenge.
    for bearer in [None, Some("not-a-real-token"), Some("")] {
        let (status, v) = put_file(&s, &a, "x.txt", bearer, b"x".to_vec());
        assert_error(status, &v, 401, "unauthorized");
    }
    let resp = s
        .http
        .put(upload_url(&a, "x.txt"))
        .header("authorization", format!("Basic {}", token(&a)))
        .body("x")
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    // Another grant's valid token on this grant's path: 403.
    let (status, v) = put_file(&s, &a, "x.txt", Some(token(&b)), b"x".to_vec());
    assert_error(status, &v, 403, "forbidden");
    let (status, v) = put_file(&s, &b, "x.txt", Some(token(&a)), b"x".to_vec());
    assert_error(status, &v, 403, "forbidden");
    // An unknown grant id.
    let fake = json!({"vmBaseUrl": a["vmBaseUrl"], "uploadPath": "/files/no-such-grant"});
    let (status, v) = put_file(&s, &fake, "x.txt", Some("not-a-real-token"), b"x".to_vec());
    assert_error(status, &v, 401, "unauthorized");
    // Bad names are not even looked at without a valid token.
    let (status, _) = put_encoded(&s, &a, "..%2Fx", None, b"x".to_vec());
    assert_eq!(status, 401);
    assert_eq!(files_under(&drive(&s)), before, "nothing written");

    // Upload tokens are write-only: the session API does not take them, and the upload path
    // takes no other method.
    let resp = s
        .http
        .get(upload_url(&a, "x.txt"))
        .header("authorization", format!("Bearer {}", token(&a)))
        .send()
        .unwrap();
    assert!(resp.status().is_client_error(), "{}", resp.status());
    // The right token works.
    let (status, v) = put_file(&s, &b, "x.txt", Some(token(&b)), b"x".to_vec());
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["path"], "projects/uploads/x.txt");
}

#[test]
fn expired_upload_grants_are_refused_r39() {
    let s = Server::start_with_config("[limits]\nupload_grant_ttl_ms = 1\n");
    let g = mint(&s, json!({}));
    std::thread::sleep(Duration::from_millis(30));
    let before = files_under(&drive(&s));
    let (status, v) = put_file(&s, &g, "late.txt", Some(token(&g)), b"too late".to_vec());
    assert_error(status, &v, 401, "unauthorized");
    assert_eq!(files_under(&drive(&s)), before);
    assert!(!drive(&s).join("uploads/late.txt").exists());
}

#[test]
fn uploads_over_the_size_limit_are_refused_and_leave_nothing_r41() {
    let s = Server::start_with_config("[limits]\nmax_upload_bytes = 16\n");
    let g = mint(&s, json!({}));
    let before = files_under(&drive(&s));

    // Declared length over the limit.
    let (status, v) = put_file(&s, &g, "big.bin", Some(token(&g)), vec![1; 17]);
    assert_error(status, &v, 413, "payload_too_large");
    assert_eq!(files_under(&drive(&s)), before);
    // Streamed (chunked, no declared length) over the limit.
    let resp = s
        .http
        .put(upload_url(&g, "streamed.bin"))
        .header("authorization", format!("Bearer {}", token(&g)))
        .body(reqwest::blocking::Body::new(std::io::Cursor::new(vec![
            2u8;
            1000
        ])))
        .send()
        .expect("chunked PUT");
    let (status, v) = into_json(resp);
    assert_error(status, &v, 413, "payload_too_large");
    assert_eq!(files_under(&drive(&s)), before);
    assert_no_partials(&s);

    // Exactly the limit is fine, streamed or not.
    let (status, v) = put_file(&s, &g, "fits.bin", Some(token(&g)), vec![3; 16]);
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["bytes"], 16);
    let resp = s
        .http
        .put(upload_url(&g, "fits-streamed.bin"))
        .header("authorization", format!("Bearer {}", token(&g)))
        .body(reqwest::blocking::Body::new(std::io::Cursor::new(vec![
            4u8;
            16
        ])))
        .send()
        .expect("chunked PUT");
    let (status, v) = into_json(resp);
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        std::fs::read(drive(&s).join("uploads/fits-streamed.bin")).unwrap(),
        vec![4u8; 16]
    );
    assert_no_partials(&s);
}

#[test]
fn uploaded_files_are_attached_to_messages_by_canonical_path_r40() {
    let s = Server::start();
    create_agent(&s, json!({"slug": "research"}));
    let out = outside_dir(&s);
    symlink(&s, &out.join("secret.txt"), "leak.txt");
    mkdirs(&s, "folder");

    // mint -> PUT -> message with the attachment.
    let g = mint(&s, json!({"cwd": "agents/research"}));
    let body = b"# Brief\nhello\n".to_vec();
    let (status, up) = put_file(&s, &g, "brief.md", Some(token(&g)), body.clone());
    assert_eq!(status, 201, "{up}");
    let path = up["path"].as_str().unwrap().to_owned();
    assert_eq!(path, format!("{}/brief.md", g["prefix"].as_str().unwrap()));

    let id = id_of(&create_checked(
        &s,
        json!({"prompt": "start", "cwd": "agents/research"}),
    ));
    settle(&s, &id);
    let before = last_seq(&s, &id);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "read the brief", "attachments": [
            {"path": path, "name": up["name"], "bytes": up["bytes"], "mimeType": "text/markdown"}
        ]}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(MESSAGES, &v);
    let p = wait_event(&s, &id, &["prompt_submitted"], before);
    assert_known_event(&p["event"]);
    assert_eq!(
        p["event"]["attachments"],
        json!([{"path": "agents/research/uploads/brief.md", "name": "brief.md", "bytes": body.len(), "mimeType": "text/markdown"}])
    );
    settle(&s, &id);

    // A non-canonical spelling of the same file is stored canonically.
    let before = last_seq(&s, &id);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again", "attachments": [
            {"path": "./agents//research/uploads/brief.md", "name": "brief.md", "bytes": body.len()}
        ]}),
    );
    assert_eq!(status, 200, "{v}");
    let p = wait_event(&s, &id, &["prompt_submitted"], before);
    assert_eq!(
        p["event"]["attachments"][0]["path"],
        "agents/research/uploads/brief.md"
    );
    settle(&s, &id);

    // On create and on the default alias too.
    let v = create_checked(
        &s,
        json!({"prompt": "with file", "attachments": [{"path": path, "name": "brief.md", "bytes": body.len()}]}),
    );
    assert_eq!(
        v["history"]["events"][1]["event"]["attachments"][0]["path"],
        path.as_str()
    );
    let v = default_message(
        &s,
        "research",
        json!({"prompt": "with file", "attachments": [{"path": path, "name": "brief.md", "bytes": body.len()}]}),
    );
    let d = created_id(&v);
    let p = of_type(&history(&s, &d), "prompt_submitted")[0].clone();
    assert_eq!(p["event"]["attachments"][0]["path"], path.as_str());

    // Paths that do not exist, are not files or escape the drive: 400, nothing written.
    let ids = all_session_ids(&s);
    let before = last_seq(&s, &id);
    for bad in [
        "agents/research/uploads/missing.md",
        "../x",
        "agents/../../x",
        "/etc/passwd",
        "leak.txt",
        "folder",
        "C:/Windows/win.ini",
    ] {
        let att = json!([{"path": bad, "name": "x", "bytes": 1}]);
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{id}/messages")),
            &json!({"prompt": "bad", "attachments": att}),
        );
        assert_invalid(status, &v);
        let (status, v) = s.post(
            &s.sessions_url(""),
            &json!({"prompt": "bad", "attachments": att}),
        );
        assert_invalid(status, &v);
        let (status, v) = s.post(
            &default_url(&s, "root", "/messages"),
            &json!({"prompt": "bad", "attachments": att}),
        );
        assert_invalid(status, &v);
    }
    assert_eq!(last_seq(&s, &id), before, "nothing written");
    assert_eq!(all_session_ids(&s), ids, "nothing created");
    assert_no_default(&s, "root");
}

#[test]
fn note_and_answer_attachments_are_checked_like_message_attachments() {
    let s = Server::start();
    write_file(&s, "uploads/real.txt", b"real");
    let out = outside_dir(&s);
    symlink(&s, &out.join("secret.txt"), "leak.txt");
    let id = id_of(&create_checked(
        &s,
        json!({"prompt": "/ask Ready? | yes | no"}),
    ));
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "ask");
    let before = last_seq(&s, &id);

    for bad in ["uploads/missing.txt", "leak.txt", "uploads"] {
        let att = json!([{"path": bad, "name": "x", "bytes": 1}]);
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{id}/note")),
            &json!({"note": "bad", "attachments": att}),
        );
        assert_invalid(status, &v);
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{id}/answer")),
            &json!({"answer": "yes", "attachments": att}),
        );
        assert_invalid(status, &v);
    }
    assert_eq!(last_seq(&s, &id), before, "nothing written");
    assert_eq!(detail_checked(&s, &id)["turnStatus"], "ask");

    // Valid ones are stored canonically.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "see file", "attachments": [{"path": "./uploads//real.txt", "name": "real.txt", "bytes": 4}]}),
    );
    assert_eq!(status, 200, "{v}");
    let n = v["seq"].as_u64().unwrap();
    let e = history(&s, &id).into_iter().find(|e| seq(e) == n).unwrap();
    assert_eq!(e["event"]["attachments"][0]["path"], "uploads/real.txt");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/answer")),
        &json!({"answer": "yes", "attachments": [{"path": "uploads/real.txt", "name": "real.txt", "bytes": 4}]}),
    );
    assert_eq!(status, 200, "{v}");
    let a = wait_event(&s, &id, &["answer_submitted"], n);
    assert_eq!(a["event"]["attachments"][0]["path"], "uploads/real.txt");
}
