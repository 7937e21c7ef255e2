//! Several sessiond processes on one PostgreSQL database and one data dir, as a deployment behind
//! a load balancer runs them: what one process writes, streams and runs, the others see, and a
//! process killed mid-turn loses nothing acknowledged and leaves nothing stuck.
//!
//! These run on both passes (they bring their own database in the test cluster); without
//! PostgreSQL they fail when `CI` is set and are skipped with a notice otherwise. Every wait is
//! on a condition (an event, a frame, a field), never on time.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const DETAIL: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const NOTE: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.response.json";
const MESSAGE_WAIT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.response.json";
const INTERRUPT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__interrupt.response.json";

/// Processes sharing one database and one data dir.
struct Deployment {
    servers: Vec<Server>,
    _db: Arc<postgres::Database>,
    _dir: tempfile::TempDir,
}

impl Deployment {
    /// `n` processes, started one after the other, with `args` (or `None` without PostgreSQL).
    fn start(n: usize, args: &[&str]) -> Option<Deployment> {
        let test = std::thread::current()
            .name()
            .unwrap_or("multi")
            .rsplit("::")
            .next()
            .unwrap_or("multi")
            .to_owned();
        let db = Arc::new(postgres::database(&test)?);
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        share_database(&data_dir, &db);
        let servers = (0..n).map(|_| Server::start_in(&data_dir, args)).collect();
        Some(Deployment {
            servers,
            _db: db,
            _dir: dir,
        })
    }
}

impl Deployment {
    /// One more process on the deployment's database and data dir.
    fn add(&mut self, args: &[&str]) -> &Server {
        let server = Server::start_in(&self._dir.path().join("data"), args);
        self.servers.push(server);
        self.servers.last().expect("just added")
    }
}

/// Whether `s` believes itself alone on the database (it then commits without notices).
fn alone(s: &Server) -> bool {
    s.metric("sessiond_fanout_alone") == Some(1.0)
}

/// Closes, from the server's side, the connections whose pids `which` selects, and waits until
/// they are gone; how many there were.
fn terminate(db: &postgres::Database, which: &str) -> usize {
    let pids: Vec<String> = db
        .rows(which)
        .into_iter()
        .filter_map(|r| r.into_iter().next().flatten())
        .collect();
    if pids.is_empty() {
        return 0;
    }
    let list = pids.join(",");
    db.rows(&format!(
        "SELECT pg_terminate_backend(pid) FROM unnest(ARRAY[{list}]) AS pid"
    ));
    until(
        "the closed connections to be gone",
        Duration::from_secs(30),
        || {
            let left = db.rows(&format!(
                "SELECT count(*) FROM pg_stat_activity WHERE pid IN ({list})"
            ));
            (left[0][0].as_deref() == Some("0")).then_some(())
        },
    );
    pids.len()
}

fn create(s: &Server, prompt: &str) -> String {
    let v = s.create(json!({ "prompt": prompt }));
    assert_schema(CREATE, &v);
    v["session"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned()
}

fn runner_id(s: &Server) -> String {
    let (status, h) = s.get(&s.url("/healthz"));
    assert_eq!(status, 200, "{h}");
    h["runner"]["id"].as_str().expect("runner id").to_owned()
}

fn assert_gapless(id: &str, events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            seq(e),
            i as u64 + 1,
            "{id}: seqs {:?}",
            events.iter().map(seq).collect::<Vec<_>>()
        );
    }
}

/// Polls `f` until it returns `Some` (the condition), failing after `within`.
fn until<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_session_created_on_one_process_is_read_on_the_others() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(a, "hello");
    b.wait_terminal(&id, 1);
    for s in [b, c] {
        let detail = s.detail(&id);
        assert_schema(DETAIL, &detail);
        assert_eq!(detail["id"], id.as_str());
    }
    assert_eq!(a.history_all(&id), c.history_all(&id));
    // Every process is a runner of its own.
    let ids: HashSet<String> = d.servers.iter().map(runner_id).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
}

#[test]
fn concurrent_notes_through_three_processes_are_gap_free() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let id = create(&d.servers[0], "hello");
    d.servers[0].wait_terminal(&id, 1);
    let acked: Vec<(u64, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = d
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = id.clone();
                scope.spawn(move || {
                    (0..20)
                        .map(|n| {
                            let text = format!("note {i}-{n}");
                            let (status, v) = s.post(
                                &s.sessions_url(&format!("/{id}/note")),
                                &json!({ "note": text }),
                            );
                            assert_eq!(status, 200, "{v}");
                            assert_schema(NOTE, &v);
                            (v["seq"].as_u64().expect("seq"), text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("notes"))
            .collect()
    });
    let events = d.servers[1].history_all(&id);
    assert_gapless(&id, &events);
    let seqs: HashSet<u64> = acked.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 60, "two notes acknowledged at one seq");
    for (n, text) in &acked {
        let e = &events[*n as usize - 1];
        assert_eq!(etype(e), "note_submitted");
        assert_eq!(e["event"]["note"], text.as_str());
    }
}

/// A stream on A follows a turn that B runs, live: its deltas and its durable events, in order,
/// each seq once; a stream on C resumed from the middle carries on exactly.
#[test]
fn a_stream_on_one_process_sees_a_turn_run_on_another_and_resumes_on_a_third() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "hello");
    b.wait_terminal(&id, 1);
    let sse = a.sse(&id, Some(0), None);
    // The backlog, up to the first turn's terminal.
    sse.until_terminal(Duration::from_secs(20));
    // B runs a streamed turn (B received the message, so B's runner takes it).
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 20\n/stream 20", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let frames = sse.until_terminal(Duration::from_secs(30));
    let deltas = frames
        .iter()
        .filter(|f| f.id.is_none() && f.data["event"]["step"]["type"] == "text_delta")
        .count();
    assert!(deltas >= 1, "no live delta reached A: {frames:#?}");
    let durable: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    let history = c.history_all(&id);
    let first = durable.first().copied().expect("durable frames");
    let expected: Vec<u64> = history.iter().map(seq).filter(|s| *s >= first).collect();
    assert_eq!(durable, expected, "A's stream skipped or repeated a seq");
    for f in &frames {
        if let Some(n) = f.id {
            assert_eq!(f.data["seq"], history[n as usize - 1]["seq"], "frame {n}");
            assert_eq!(
                f.data["event"],
                history[n as usize - 1]["event"],
                "frame {n}"
            );
        }
    }
    // Resume on C from the middle of that turn: exactly the events after it.
    let middle = durable[durable.len() / 2];
    let resumed = c.sse(&id, None, Some(middle));
    let again = resumed.until_terminal(Duration::from_secs(20));
    let again: Vec<u64> = again.iter().filter_map(|f| f.id).collect();
    let expected: Vec<u64> = history.iter().map(seq).filter(|s| *s > middle).collect();
    assert_eq!(again, expected);
}

/// The delta notices `s` has relayed to other processes.
fn relayed(s: &Server) -> f64 {
    s.metric("sessiond_fanout_deltas_relayed_total")
        .expect("the relay's counter")
}

/// The text of the text deltas among `frames`, joined.
fn streamed_text(frames: &[SseFrame]) -> String {
    frames
        .iter()
        .filter(|f| f.id.is_none() && f.data["event"]["step"]["type"] == "text_delta")
        .filter_map(|f| f.data["event"]["step"]["delta"].as_str())
        .collect()
}

/// A turn nobody streams on another process relays no delta; a stream opened on A in the middle
/// of a turn B runs gets what B streamed before it (B's tail) and then the rest: every chunk
/// once, in order, as a stream opened on B would.
#[test]
fn a_stream_opened_mid_turn_on_another_process_gets_the_whole_streamed_text() {
    let Some(d) = Deployment::start(2, &[]) else {
        return;
    };
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "hello");
    b.wait_terminal(&id, 1);
    let before = relayed(b);
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages/wait")),
        &json!({ "prompt": "/stream 5", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        relayed(b),
        before,
        "B relayed deltas nobody elsewhere streams"
    );

    // A slow streamed turn on B; A's stream opens once B's own stream has seen two chunks. Should
    // the machine be so slow that the turn ends first, it is tried again, slower.
    for (attempt, slow) in [400, 1_500, 5_000].into_iter().enumerate() {
        let chunks = 12;
        let whole: String = (1..=chunks).map(|i| format!("chunk {i} ")).collect();
        let last = b.history_all(&id).last().map(seq).expect("events");
        let local = b.sse(&id, Some(last), None);
        let (status, v) = b.post(
            &b.sessions_url(&format!("/{id}/messages")),
            &json!({ "prompt": format!("/slow {slow}\n/stream {chunks}"), "clientRequestId": new_uuid() }),
        );
        assert_eq!(status, 200, "{v}");
        let mut seen = Vec::new();
        while streamed_text(&seen).matches("chunk").count() < 2 {
            let frame = local
                .next_frame(Duration::from_secs(30))
                .expect("B streams its own turn");
            seen.push(frame);
        }
        let remote = a.sse(&id, Some(last), None);
        let frames = remote.until_terminal(Duration::from_secs(90));
        let text = streamed_text(&frames);
        let rest = local.until_terminal(Duration::from_secs(90));
        assert_eq!(
            streamed_text(&[seen, rest].concat()),
            whole,
            "B's own stream"
        );
        if text.is_empty() && attempt < 2 {
            // A's stream opened after the turn had ended: no tail was left to hand over.
            continue;
        }
        assert_eq!(text, whole, "A's stream: {frames:#?}");
        assert!(relayed(b) > before, "B relayed nothing");
        return;
    }
}

/// Deleting a session on A ends its open streams on every process, as on one process: B's and
/// C's streams end as A's does, and the session is gone on all three.
#[test]
fn deleting_a_session_on_one_process_ends_its_streams_on_every_process() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(a, "hello");
    let last = seq(&a.wait_terminal(&id, 1));
    let streams: Vec<Sse> = [a, b, c]
        .iter()
        .map(|s| s.sse(&id, Some(last), None))
        .collect();
    for sse in &streams {
        assert_eq!(sse.status, 200);
    }
    // Each stream is live (subscribed, past its backlog) before the delete: a note reaches all.
    let (status, v) = c.post(
        &c.sessions_url(&format!("/{id}/note")),
        &json!({ "note": "n" }),
    );
    assert_eq!(status, 200, "{v}");
    for sse in &streams {
        let frame = sse
            .next_frame(Duration::from_secs(20))
            .expect("the note's frame");
        assert_eq!(frame.id, Some(last + 1), "{frame:?}");
    }
    let (status, v) = a.delete(&a.sessions_url(&format!("/{id}")));
    assert_eq!(status, 200, "{v}");
    for (name, sse) in ["A", "B", "C"].iter().zip(&streams) {
        assert!(
            sse.ends_within(Duration::from_secs(20)),
            "{name}'s stream of the deleted session is still open"
        );
    }
    for s in [a, b, c] {
        let (status, v) = s.get(&s.sessions_url(&format!("/{id}/events")));
        assert_eq!(status, 404, "{v}");
    }
}

/// `messages/wait` posted to A for a follow-up that B's runner takes when its turn ends; an
/// interrupt posted to C reaches the turn B runs, within a second.
#[test]
fn wait_and_interrupt_across_processes() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "hello");
    let first = b.wait_terminal(&id, 1);
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 100\n/stream 20", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let started = b.wait_for_event(&id, &["turn_started"], seq(&first), Duration::from_secs(20));
    let (status, w) = a.post(
        &a.sessions_url(&format!("/{id}/messages/wait")),
        &json!({ "prompt": "after", "behavior": "follow_up", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(MESSAGE_WAIT_RESPONSE, &w);
    assert_eq!(w["terminal"]["event"]["type"], "complete", "{w}");
    let events = c.history_all(&id);
    let term = seq(&w["terminal"]);
    assert_eq!(&w["terminal"], &events[term as usize - 1]);
    assert!(term > seq(&started));

    // A long turn on B, interrupted through C.
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 200\n/stream 300", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let started = b.wait_for_event(&id, &["turn_started"], term, Duration::from_secs(20));
    let asked = Instant::now();
    let (status, v) = c.post(&c.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "{v}");
    assert_schema(INTERRUPT, &v);
    let ended = a.wait_for_event(
        &id,
        &["interrupted", "complete"],
        seq(&started),
        Duration::from_secs(10),
    );
    assert_eq!(etype(&ended), "interrupted", "{ended}");
    // Within a second of the request, plus the scripted engine's step (200 ms) and the grace.
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}

/// Short leases, so that a dead process's turns end soon (the bound the tests check).
const LEASE_MS: u64 = 2_000;

/// The deployment's config file: leases of [`LEASE_MS`], renewed four times per lease.
fn short_leases(dir: &std::path::Path) -> String {
    let path = dir.join("sessiond.toml");
    std::fs::write(
        &path,
        format!(
            "[runner]\nlease_ms = {LEASE_MS}\nlease_renew_ms = {}\n",
            LEASE_MS / 4
        ),
    )
    .expect("config file");
    path.display().to_string()
}

impl Deployment {
    fn start_with_short_leases(n: usize) -> Option<Deployment> {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = short_leases(dir.path());
        let mut d = Deployment::start(n, &["--config", &config])?;
        d._dir = dir;
        Some(d)
    }
}

/// Under load, B is killed (SIGKILL) mid-turn: every turn it ran reaches a terminal through A
/// or C within the lease bound, every acknowledged input is in the timeline once, no session is
/// left running, and the turns queued behind B's run elsewhere.
#[test]
fn kill9_of_one_process_under_load_loses_nothing_and_leaves_nothing_stuck() {
    let Some(mut d) = Deployment::start_with_short_leases(3) else {
        return;
    };
    // Long turns on B (they are running when B dies), quick ones on A and C meanwhile.
    let on_b: Vec<String> = (0..6)
        .map(|_| create(&d.servers[1], "/slow 100\n/stream 600"))
        .collect();
    for id in &on_b {
        d.servers[1].wait_for_event(id, &["turn_started"], 1, Duration::from_secs(20));
    }
    // Follow-ups queued behind B's turns, acknowledged (through A) before B dies.
    for id in &on_b {
        let a = &d.servers[0];
        let (status, v) = a.post(
            &a.sessions_url(&format!("/{id}/messages")),
            &json!({ "prompt": "after the crash", "behavior": "follow_up", "clientRequestId": new_uuid() }),
        );
        assert_eq!(status, 200, "{v}");
    }
    let on_others: Vec<String> = (0..6)
        .map(|i| create(&d.servers[if i % 2 == 0 { 0 } else { 2 }], "/stream 5"))
        .collect();
    let b_runner = runner_id(&d.servers[1]);
    d.servers[1].kill9();
    let killed = Instant::now();
    let a = &d.servers[0];
    for id in &on_b {
        let ended = until(
            "B's turn ended by another process",
            Duration::from_secs(30),
            || {
                let events = a.history_all(id);
                events
                    .iter()
                    .find(|e| etype(e) == "interrupted")
                    .cloned()
                    .map(|e| (e, events))
            },
        );
        let (interrupted, events) = ended;
        let warning = events
            .iter()
            .find(|e| etype(e) == "system" && seq(e) < seq(&interrupted) && seq(e) > 3)
            .expect("the system notice before the terminal");
        assert_eq!(
            warning["event"]["metadata"]["code"], "runner_exited",
            "{warning}"
        );
    }
    // Within the lease plus one renewal interval of the survivors, and the time to write.
    let bound = Duration::from_millis(LEASE_MS + LEASE_MS / 4) + Duration::from_secs(3);
    assert!(
        killed.elapsed() < bound,
        "{:?} > {bound:?}",
        killed.elapsed()
    );
    // The follow-ups B would have run next: taken by A or C, each answered once.
    for id in &on_b {
        until("the follow-up answered", Duration::from_secs(30), || {
            let events = a.history_all(id);
            events
                .iter()
                .any(|e| e["event"]["step"]["text"] == "echo: after the crash")
                .then_some(())
        });
        until("the session settled", Duration::from_secs(30), || {
            let d = a.detail(id);
            (d["turnStatus"] != "running").then_some(d)
        });
        let events = a.history_all(id);
        assert_gapless(id, &events);
        let prompts = events
            .iter()
            .filter(|e| e["event"]["prompt"] == "after the crash")
            .count();
        assert_eq!(prompts, 1, "{id}");
        let (_, record) = a.get(&a.url(&format!("/v2/sessions/{id}")));
        assert_ne!(record["runner_id"], b_runner.as_str(), "{record}");
    }
    for id in &on_others {
        a.wait_terminal(id, 1);
    }
    // Nothing stuck: no session of the deployment is running any more.
    until("every turn ended", Duration::from_secs(30), || {
        let (status, list) = a.get(&a.sessions_url("?limit=100"));
        assert_eq!(status, 200);
        let running = list["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .filter(|s| s["turnStatus"] == "running")
            .count();
        (running == 0).then_some(())
    });
}

/// A steer posted to A reaches the turn that B runs, at its next step.
#[test]
fn a_steer_posted_to_one_process_reaches_the_turn_another_runs() {
    let Some(d) = Deployment::start(2, &[]) else {
        return;
    };
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "/await_steer\n/reply done");
    b.wait_for_event(&id, &["turn_started"], 1, Duration::from_secs(20));
    let (status, v) = a.post(
        &a.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "this way", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let term = b.wait_terminal(&id, 3);
    let events = b.history_all(&id);
    let turns = events.iter().filter(|e| etype(e) == "turn_started").count();
    assert_eq!(turns, 1, "the steer ran as a turn of its own: {events:#?}");
    assert!(
        events[..seq(&term) as usize]
            .iter()
            .any(|e| e["event"]["step"]["text"] == "steered: this way"),
        "{events:#?}"
    );
}

/// A session that sleeps in one process wakes once, in the other, after the first died; a turn's
/// runner id is visible in its Session record and names the process that ran it. The session is
/// created on B, but whichever process claims its turn owns the sleep: A's sweep for unclaimed
/// due inputs may take it before B's own claim when B is slow, which is that sweep's purpose. So
/// the process killed is the one the record names.
#[test]
fn a_sleep_wakes_once_after_its_process_died() {
    let Some(mut d) = Deployment::start_with_short_leases(2) else {
        return;
    };
    let id = create(&d.servers[1], "/sleep 1500\n/reply woke");
    let slept = d.servers[1].wait_for_event(&id, &["sleep"], 1, Duration::from_secs(20));
    let runners = [runner_id(&d.servers[0]), runner_id(&d.servers[1])];
    let (_, record) = d.servers[1].get(&d.servers[1].url(&format!("/v2/sessions/{id}")));
    let owner = runners
        .iter()
        .position(|r| record["runner_id"] == r.as_str())
        .unwrap_or_else(|| panic!("the record names one of {runners:?}: {record}"));
    d.servers[owner].kill9();
    let survivor = &d.servers[1 - owner];
    survivor.wait_for_event(&id, &["complete"], seq(&slept), Duration::from_secs(30));
    let events = survivor.history_all(&id);
    assert_gapless(&id, &events);
    let wakes = events
        .iter()
        .filter(|e| e["event"]["step"]["text"] == "woke")
        .count();
    assert_eq!(wakes, 1, "{events:#?}");
    let (_, record) = survivor.get(&survivor.url(&format!("/v2/sessions/{id}")));
    assert_eq!(record["runner_id"], runners[1 - owner].as_str(), "{record}");
}

/// Writes that arrive together share one transaction on PostgreSQL; when one of them fails (here
/// a note to a session whose task was cancelled, refused inside its unit of work), the batch is
/// rolled back and each of its writes runs again alone: the refused one is refused and leaves
/// nothing, every other one is stored exactly once. Rounds of concurrent notes go on until the
/// server reports such a batch (`sessiond_store_batch_reruns_total`).
#[test]
fn a_batch_with_a_refused_write_stores_the_others_once() {
    let Some(d) = Deployment::start(1, &[]) else {
        return;
    };
    let s = &d.servers[0];
    let open = create(s, "hello");
    s.wait_terminal(&open, 1);
    let closed = s.cancelled_task("root", "closed");
    s.wait_runner_idle();
    let closed_before = s.history_all(&closed).len();
    let reruns = || {
        s.metric("sessiond_store_batch_reruns_total")
            .expect("the rerun counter")
    };
    let before = reruns();
    let mut sent = Vec::new();
    for round in 0..50 {
        let texts: Vec<String> = (0..24).map(|i| format!("r{round}-{i}")).collect();
        let (to_closed, to_open) = (closed.as_str(), open.as_str());
        std::thread::scope(|scope| {
            let start = Arc::new(std::sync::Barrier::new(texts.len()));
            for (i, text) in texts.iter().enumerate() {
                let start = Arc::clone(&start);
                let refused = i % 3 == 0;
                let target = if refused { to_closed } else { to_open };
                scope.spawn(move || {
                    start.wait();
                    let (status, v) = s.post(
                        &s.url(&format!("/v1/ws/{WS}/agent/sessions/{target}/note")),
                        &json!({ "note": text }),
                    );
                    if refused {
                        assert_eq!(status, 409, "a note to the cancelled task: {v}");
                    } else {
                        assert_eq!(status, 200, "{v}");
                    }
                });
            }
        });
        sent.extend(
            texts
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 3 != 0)
                .map(|(_, t)| t.clone()),
        );
        if reruns() > before {
            break;
        }
    }
    assert!(
        reruns() > before,
        "no batch held a refused write in 50 rounds"
    );
    let stored: Vec<String> = s
        .history_all(&open)
        .iter()
        .filter(|e| etype(e) == "note_submitted")
        .filter_map(|e| e["event"]["note"].as_str().map(str::to_owned))
        .collect();
    let mut counted = std::collections::HashMap::new();
    for note in &stored {
        *counted.entry(note.as_str()).or_insert(0) += 1;
    }
    for note in &sent {
        assert_eq!(counted.get(note.as_str()), Some(&1), "{note} stored once");
    }
    assert_eq!(stored.len(), sent.len(), "nothing but the notes sent");
    assert_gapless(&open, &s.history_all(&open));
    assert_eq!(
        s.history_all(&closed).len(),
        closed_before,
        "the cancelled task's session took nothing"
    );
}

/// A batch waits for a locked row a short while only: notes to a session whose row another
/// transaction holds wait for it, and the notes to another session that were batched with them
/// are not held back — the batch gives up the wait, and its writes run alone.
#[test]
fn writes_batched_with_one_that_waits_for_a_row_are_not_held_back() {
    let Some(d) = Deployment::start(1, &[]) else {
        return;
    };
    let s = &d.servers[0];
    let (held, free) = (create(s, "held"), create(s, "free"));
    s.wait_terminal(&held, 1);
    s.wait_terminal(&free, 1);
    s.wait_runner_idle();
    let mut other = ::postgres::Client::connect(&d._db.url, ::postgres::NoTls).expect("connect");
    let mut tx = other.transaction().expect("begin");
    tx.query_one("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", &[&held])
        .expect("hold the session's row");
    let note = |id: &str, text: String| {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agent/sessions/{id}/note")),
            &json!({ "note": text }),
        );
        assert_eq!(status, 200, "{v}");
    };
    std::thread::scope(|scope| {
        let (held, free) = (held.as_str(), free.as_str());
        let waiting: Vec<_> = (0..6)
            .map(|i| scope.spawn(move || note(held, format!("held {i}"))))
            .collect();
        let free_notes: Vec<_> = (0..24)
            .map(|i| scope.spawn(move || note(free, format!("free {i}"))))
            .collect();
        until(
            "the other session's notes, while the row is held",
            Duration::from_secs(60),
            || free_notes.iter().all(|n| n.is_finished()).then_some(()),
        );
        for n in free_notes {
            n.join().expect("a note to the other session");
        }
        assert!(
            waiting.iter().all(|w| !w.is_finished()),
            "a note to the held session went through"
        );
        tx.commit().expect("release the row");
        for w in waiting {
            w.join().expect("a note to the held session");
        }
    });
    let count = |id: &str| {
        s.history_all(id)
            .iter()
            .filter(|e| etype(e) == "note_submitted")
            .count()
    };
    assert_eq!(count(&held), 6);
    assert_eq!(count(&free), 24);
    assert_gapless(&held, &s.history_all(&held));
    assert_gapless(&free, &s.history_all(&free));
}

/// Pooled connections the server closes while they sit idle (a restart, an administrator, an
/// idle timeout) are noticed when they are next taken and replaced: the writes and reads that
/// follow succeed, and so do the streams of the fan-out, whose connections come back on their own.
#[test]
fn connections_the_server_closed_are_replaced() {
    let Some(d) = Deployment::start(1, &[]) else {
        return;
    };
    let s = &d.servers[0];
    let id = create(s, "hello");
    s.wait_terminal(&id, 1);
    // Several connections in the pool, all idle once these end.
    std::thread::scope(|scope| {
        for i in 0..6 {
            let id = &id;
            scope.spawn(move || {
                let (status, v) = s.post(
                    &s.url(&format!("/v1/ws/{WS}/agent/sessions/{id}/note")),
                    &json!({ "note": format!("n{i}") }),
                );
                assert_eq!(status, 200, "{v}");
            });
        }
    });
    let closed = terminate(
        &d._db,
        "SELECT pid FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'sessiond'",
    );
    assert!(closed >= 2, "the server's connections: {closed}");
    for i in 0..8 {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agent/sessions/{id}/note")),
            &json!({ "note": format!("after {i}") }),
        );
        assert_eq!(status, 200, "note {i} after the connections closed: {v}");
        assert_schema(NOTE, &v);
    }
    let detail = s.detail(&id);
    assert_eq!(detail["id"], id.as_str());
    let notes = s
        .history_all(&id)
        .iter()
        .filter(|e| etype(e) == "note_submitted")
        .count();
    assert_eq!(notes, 14, "every note acknowledged is stored");
}

/// A write that deadlocks with another transaction on the database is rolled back by PostgreSQL
/// and run again by the store in a new transaction: both end committed, the client is answered
/// as if nothing happened, and the retry is counted.
///
/// The other transaction (a connection of the test's own) holds the default session's row; a
/// message to the agent's default session takes the agent's row, then waits for the session's;
/// the other transaction then asks for the agent's row. The store's connection, waiting longest,
/// finds the deadlock and is chosen to roll back (the test's connection waits a minute before it
/// would look).
#[test]
fn a_write_that_loses_a_deadlock_runs_again_and_both_commit() {
    let Some(d) = Deployment::start(1, &[]) else {
        return;
    };
    let s = &d.servers[0];
    let alias = s.url(&format!(
        "/v1/ws/{WS}/agents/root/sessions/default/messages"
    ));
    let (status, first) = s.post(&alias, &json!({"prompt": "/reply first"}));
    assert_eq!(status, 200, "{first}");
    let id = first["session"]["sessionId"]
        .as_str()
        .or(first["sessionId"].as_str())
        .expect("the default session")
        .to_owned();
    s.wait_runner_idle();
    let retries_before = s
        .metric("sessiond_store_write_retries_total")
        .expect("the retry counter");

    let mut other = ::postgres::Client::connect(&d._db.url, ::postgres::NoTls).expect("connect");
    let other_pid: i32 = other
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    other
        .batch_execute("SET deadlock_timeout = '1min'")
        .expect("deadlock_timeout");
    let mut tx = other.transaction().expect("begin");
    let agent_id: String = tx
        .query_one(
            "SELECT agent_id FROM sessions WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .expect("hold the session's row")
        .get(0);
    let (status, second) = std::thread::scope(|scope| {
        let posted = scope.spawn(|| {
            into_json(
                s.http
                    .post(&alias)
                    .json(&json!({"prompt": "/reply second"}))
                    .send()
                    .expect("POST"),
            )
        });
        until(
            "the message to wait for the session's row",
            Duration::from_secs(30),
            || {
                let waiting = d._db.rows(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE {other_pid} = ANY(pg_blocking_pids(pid))"
                ));
                (waiting[0][0].as_deref() != Some("0")).then_some(())
            },
        );
        // The agent's row is the message's: this waits for it, and closes the circle.
        tx.execute("UPDATE agents SET name = name WHERE id = $1", &[&agent_id])
            .expect("the agent's row, once the message's transaction is rolled back");
        tx.execute(
            "UPDATE sessions SET title = 'written by the other transaction' WHERE id = $1",
            &[&id],
        )
        .expect("update the session");
        tx.commit().expect("commit the other transaction");
        posted.join().expect("the message")
    });
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["session"]["sessionId"]
            .as_str()
            .or(second["sessionId"].as_str()),
        Some(id.as_str()),
        "{second}"
    );
    let retries = s
        .metric("sessiond_store_write_retries_total")
        .expect("the retry counter");
    assert!(retries > retries_before, "no write was run again");
    assert_eq!(
        s.detail(&id)["title"],
        "written by the other transaction",
        "the other transaction's write"
    );
    let prompts: Vec<String> = s
        .history_all(&id)
        .iter()
        .filter(|e| etype(e) == "prompt_submitted")
        .map(|e| e["event"]["prompt"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        prompts,
        ["/reply first", "/reply second"],
        "the message, once"
    );
    assert_gapless(&id, &s.history_all(&id));
}

/// Two processes creating a session with the same `clientRequestId` at once make one session:
/// the second writer's `INSERT` of the id fails on its uniqueness rule when its transaction
/// commits (on PostgreSQL a statement whose answer the unit does not read goes with the next
/// request or the `COMMIT`), and that failure must still turn into the retry it is — both
/// answers name the one session that exists, and nothing of the losing write is stored.
#[test]
fn the_same_client_request_id_through_two_processes_at_once_is_one_session() {
    let Some(d) = Deployment::start(2, &[]) else {
        return;
    };
    let url = |s: &Server| s.url(&format!("/v1/ws/{WS}/agent/sessions"));
    let rounds = 20;
    for round in 0..rounds {
        let body = json!({
            "prompt": format!("/reply round {round}"),
            "clientRequestId": format!("00000000-0000-4000-8000-{round:012}"),
        });
        let (a, b) = std::thread::scope(|scope| {
            let start = Arc::new(std::sync::Barrier::new(2));
            let posts: Vec<_> = d
                .servers
                .iter()
                .map(|s| {
                    let (start, body, url) = (Arc::clone(&start), &body, url(s));
                    scope.spawn(move || {
                        start.wait();
                        s.post(&url, body)
                    })
                })
                .collect();
            let mut answers = posts.into_iter().map(|p| p.join().expect("POST"));
            (
                answers.next().expect("first"),
                answers.next().expect("second"),
            )
        });
        for (status, v) in [&a, &b] {
            assert!(
                *status == 200 || *status == 201,
                "round {round}: {status} {v}"
            );
        }
        let id = |v: &Value| v["session"]["sessionId"].as_str().map(str::to_owned);
        assert_eq!(id(&a.1), id(&b.1), "round {round}: {} / {}", a.1, b.1);
    }
    let s = &d.servers[0];
    let (status, list) = s.get(&s.url(&format!("/v1/ws/{WS}/agent/sessions?limit=100")));
    assert_eq!(status, 200, "{list}");
    let sessions = list["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(sessions, rounds, "{list}");
}

/// A process alone on its database sends no commit notices; one that arrives is heard at once:
/// the first stops being alone, a stream the newcomer serves sees every event of the turns the
/// first runs, and when the newcomer dies the first is alone again.
#[test]
fn a_process_alone_is_joined_by_one_that_arrives_and_is_alone_again_when_it_dies() {
    let Some(mut d) = Deployment::start(1, &[]) else {
        return;
    };
    until("A finds itself alone", Duration::from_secs(30), || {
        alone(&d.servers[0]).then_some(())
    });
    let id = create(&d.servers[0], "hello");
    let first = seq(&d.servers[0].wait_terminal(&id, 1));

    d.add(&[]);
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    until("A hears B arrive", Duration::from_secs(30), || {
        (!alone(a)).then_some(())
    });
    assert!(!alone(b), "B is not alone while A listens");
    let sse = b.sse(&id, Some(0), None);
    sse.until_terminal(Duration::from_secs(20));
    // A runs the next turns (A received the messages); B's stream sees every event.
    let mut seen = Vec::new();
    for round in 0..3 {
        let (status, v) = a.post(
            &a.sessions_url(&format!("/{id}/messages")),
            &json!({ "prompt": format!("/stream 5\nround {round}"), "clientRequestId": new_uuid() }),
        );
        assert_eq!(status, 200, "{v}");
        let frames = sse.until_terminal(Duration::from_secs(30));
        seen.extend(frames.iter().filter_map(|f| f.id));
    }
    let history = a.history_all(&id);
    assert_gapless(&id, &history);
    let last = seq(history.last().expect("events"));
    let expected: Vec<u64> = (first + 1..=last).collect();
    assert_eq!(seen, expected, "B's stream skipped or repeated a seq");

    d.servers[1].kill9();
    until(
        "A is alone again once B is gone",
        Duration::from_secs(30),
        || alone(&d.servers[0]).then_some(()),
    );
    // Alone again, A still serves its own streams.
    let a = &d.servers[0];
    let own = a.sse(&id, Some(last), None);
    let (status, v) = a.post(
        &a.sessions_url(&format!("/{id}/note")),
        &json!({ "note": "n" }),
    );
    assert_eq!(status, 200, "{v}");
    let frame = own
        .next_frame(Duration::from_secs(20))
        .expect("the note's frame");
    assert_eq!(frame.id, Some(last + 1), "{frame:?}");
}

/// A stream opened while its process was alone asks for the session's deltas once another
/// process arrives: a turn the newcomer runs streams to it, every chunk once, in order.
#[test]
fn a_stream_opened_while_alone_gets_the_deltas_of_a_process_that_arrives() {
    let Some(mut d) = Deployment::start(1, &[]) else {
        return;
    };
    until("A finds itself alone", Duration::from_secs(30), || {
        alone(&d.servers[0]).then_some(())
    });
    let id = create(&d.servers[0], "hello");
    let last = seq(&d.servers[0].wait_terminal(&id, 1));
    let sse = d.servers[0].sse(&id, Some(last), None);
    d.add(&[]);
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    until("A hears B arrive", Duration::from_secs(30), || {
        (!alone(a)).then_some(())
    });
    until(
        "B hears A ask for the session",
        Duration::from_secs(30),
        || (b.metric("sessiond_fanout_sessions_asked") == Some(1.0)).then_some(()),
    );
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/stream 5", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let frames = sse.until_terminal(Duration::from_secs(30));
    let whole: String = (1..=5).map(|i| format!("chunk {i} ")).collect();
    assert_eq!(streamed_text(&frames), whole, "A's stream: {frames:#?}");
    assert_eq!(
        b.metric("sessiond_fanout_sessions_asked"),
        Some(1.0),
        "B relays for A's one stream"
    );
}

/// A listener whose connection the server closed reads, once it is back, what its live sessions
/// missed meanwhile: a note committed on another process reaches its stream, and a session
/// deleted meanwhile ends its stream, though their notices went to nobody.
#[test]
fn a_listener_back_from_a_lost_connection_reads_what_it_missed() {
    let Some(d) = Deployment::start(2, &[]) else {
        return;
    };
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    let kept = create(a, "kept");
    let kept_last = seq(&a.wait_terminal(&kept, 1));
    let gone = create(a, "gone");
    let gone_last = seq(&a.wait_terminal(&gone, 1));
    let kept_sse = b.sse(&kept, Some(kept_last), None);
    let gone_sse = b.sse(&gone, Some(gone_last), None);
    // Both streams are live on B (past their backlogs) before the listeners go.
    for (id, sse) in [(&kept, &kept_sse), (&gone, &gone_sse)] {
        let (status, v) = a.post(
            &a.sessions_url(&format!("/{id}/note")),
            &json!({ "note": "live" }),
        );
        assert_eq!(status, 200, "{v}");
        sse.next_frame(Duration::from_secs(20))
            .expect("the live note's frame");
    }
    // The listeners' connections are those that hold the presence lock.
    let closed = terminate(
        &d._db,
        "SELECT DISTINCT pid FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND database = (
             SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    assert_eq!(closed, 2, "the listeners' connections");
    let (status, v) = a.post(
        &a.sessions_url(&format!("/{kept}/note")),
        &json!({ "note": "while nobody listened" }),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = a.delete(&a.sessions_url(&format!("/{gone}")));
    assert_eq!(status, 200, "{v}");

    let frame = kept_sse
        .next_frame(Duration::from_secs(30))
        .expect("the note committed while B's listener was away");
    assert_eq!(frame.id, Some(kept_last + 2), "{frame:?}");
    assert_eq!(frame.data["event"]["type"], "note_submitted", "{frame:?}");
    assert!(
        gone_sse.ends_within(Duration::from_secs(30)),
        "B's stream of a session deleted while its listener was away is still open"
    );
}

/// A turn that runs for several leases keeps its process while that process lives: its lease is
/// renewed (each session's in a short transaction of its own on PostgreSQL) while the other
/// process, which ends expired turns, looks on.
#[test]
fn a_turn_longer_than_its_lease_stays_with_the_live_process_that_runs_it() {
    let Some(d) = Deployment::start_with_short_leases(2) else {
        return;
    };
    let [a, b] = &d.servers[..] else {
        unreachable!()
    };
    // About three leases long, with writes on the session meanwhile.
    let ids: Vec<String> = (0..4).map(|_| create(a, "/slow 100\n/stream 60")).collect();
    for id in &ids {
        let terminal = b.wait_terminal(id, 1);
        assert_eq!(etype(&terminal), "complete", "{terminal}");
        let events = b.history_all(id);
        assert!(
            !events.iter().any(|e| etype(e) == "interrupted"),
            "{id}: {:?}",
            event_types(&events)
        );
    }
}
