//! Schedule figures for sessiond: how fast due ticks become sessions, how precisely the
//! scheduler wakes for a tick, and what its lookup of the next tick costs as schedules pile up.
//!
//! ```text
//! cargo run --release --example bench_schedules              # 6,000 schedules (~1 min on 2 cores)
//! cargo run --release --example bench_schedules -- --quick   # 1,500
//! ```
//!
//! This is a measuring command, not a test: it prints figures next to a baseline measured in the
//! same run and asserts nothing about timing (it does check that every tick made its session).
//! Everything runs in this process over the library, with a fresh data dir and the scripted
//! engine (`/reply ok`), wired as `sessiond serve` wires it (store, runner, sessions, scheduler):
//!
//! 1. Throughput, in three rounds (so that a noisy neighbour hits both sides alike): M sessions
//!    of one agent created one after another through `Sessions::create` by a task on the runner's
//!    runtime — a tick's work without its schedule bookkeeping, where the scheduler runs — then M
//!    interval schedules due at the same instant, fired by the scheduler. Ticks per second against sessions per second (ratio; the median round counts).
//! 2. Wake-up precision: 50 schedules due 100 ms apart; each tick's lateness (its commit minus
//!    its due time) when nothing else is queued.
//! 3. The scheduler's one query per wake-up (the first `next_due_at`) with 100 and with all the
//!    schedules: it must not grow with their number.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sessiond::bus::Bus;
use sessiond::clock;
use sessiond::config::Config;
use sessiond::engine::{Engines, scripted::ScriptedEngine};
use sessiond::runner::Runner;
use sessiond::schedules::scheduler::Scheduler;
use sessiond::schedules::{Author, InitialInput, InputType, NewSchedule, Schedules};
use sessiond::sessions::{Actor, Channel, CreateIn, InputCommon, Sessions};
use sessiond::store::directory::NewAgent;
use sessiond::store::identity::{FirstRole, Role};
use sessiond::timeline::{Behavior, Sender};

#[path = "support/report.rs"]
mod report;
use report::{Lat, loadavg, quick_flag, thousands};

/// Target: ticks fire at least this fast relative to creating their sessions directly.
const TARGET_RATIO: f64 = 0.8;
/// Target: a lone tick commits within this many ms of its due time (p99).
const TARGET_WAKE_P99_MS: f64 = 50.0;
const WS: &str = "default";
const ROUNDS: usize = 3;

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_schedules: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let quick = quick_flag("bench_schedules", "1,500 schedules instead of 6,000");
    let per_round: usize = if quick { 500 } else { 2_000 };
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let mut cfg = Config {
        data_dir: tmp.path().join("data"),
        ..Default::default()
    };
    cfg.schedules.max_per_agent = 10_000;
    let bus = Bus::new(
        cfg.stream.channel_capacity,
        cfg.stream.max_subscribers_per_session,
    );
    let store =
        sessiond::server::open_store(&cfg, Arc::clone(&bus)).unwrap_or_else(|e| die("store", e));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-runner")
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("runtime", e));
    let runner = Runner::start(
        store.clone(),
        Engines::new(Arc::new(ScriptedEngine::default()), Default::default()),
        cfg.runner.clone(),
        cfg.data_dir.clone(),
        rt.handle(),
    )
    .unwrap_or_else(|e| die("runner", e));
    let (user_id, ws_id, baseline_agent, scheduled_agent) = store
        .directory()
        .workspace_by_slug_blocking(WS)
        .and_then(|ws| {
            let ws = ws.ok_or(sessiond::store::Error::NotFound)?;
            let (user, _) = store.identity().create_user_blocking(
                "bench@local",
                "unused",
                &ws.id,
                FirstRole::Given(Role::Owner),
            )?;
            let agent = |slug: &str| NewAgent {
                workspace_id: ws.id.clone(),
                slug: slug.to_owned(),
                name: slug.to_owned(),
                anchor: format!("agents/{slug}"),
                engine: "{}".to_owned(),
            };
            let a = store.directory().create_agent_blocking(agent("baseline"))?;
            let b = store
                .directory()
                .create_agent_blocking(agent("scheduled"))?;
            Ok((user, ws.id, a.id, b.id))
        })
        .unwrap_or_else(|e| die("setup", e));
    let actor = Actor {
        workspace_id: ws_id,
        workspace_slug: WS.into(),
        user_id: user_id.clone(),
        sender: Sender::User { user_id },
        channel: Channel::Cli,
    };
    let cfg = Arc::new(cfg);
    let sessions = Sessions::new(store.clone(), runner.clone(), Arc::clone(&cfg));
    runner.attach_sessions(Arc::new(sessions.clone()));
    let schedules = Schedules::new(sessions.clone());
    let scheduler = Scheduler::start(schedules.clone(), rt.handle());
    let bench = Bench {
        rt: &rt,
        store: &store,
        schedules: &schedules,
        actor: &actor,
        agent: &scheduled_agent,
        created: std::cell::Cell::new(0),
    };

    println!(
        "bench_schedules: {ROUNDS} rounds of {} sessions and {} schedules; load average {}",
        thousands(per_round as u64),
        thousands(per_round as u64),
        loadavg()
    );
    println!("   figures are wall-clock on a possibly shared machine; nothing here is asserted.");
    println!();
    println!(
        "== 1. Throughput: sessions created one after another (baseline) vs ticks due at once =="
    );
    let mut ratios = Vec::new();
    let mut lookup_small = f64::NAN;
    for round in 1..=ROUNDS {
        let started = Instant::now();
        // On the runtime's workers, where the scheduler runs too (beside the turns).
        let (sessions, actor, agent) = (sessions.clone(), actor.clone(), baseline_agent.clone());
        let baseline_loop = rt.spawn(async move {
            for _ in 0..per_round {
                let input = CreateIn {
                    prompt: "/reply ok".into(),
                    agent_id: Some(agent.clone()),
                    cwd: None,
                    tier: None,
                    behavior: Behavior::Steer,
                    mode: None,
                    common: InputCommon::default(),
                };
                sessions
                    .create(&actor, input, None)
                    .await
                    .unwrap_or_else(|e| die("baseline create", e));
            }
        });
        rt.block_on(baseline_loop)
            .unwrap_or_else(|e| die("baseline", e));
        let baseline = per_round as f64 / started.elapsed().as_secs_f64();
        let ids = bench.schedules_due_far_ahead(per_round.min(100));
        if round == 1 {
            lookup_small = lookup_cost(&rt, &store);
        }
        let mut ids = ids;
        ids.extend(bench.schedules_due_far_ahead(per_round - ids.len()));
        let t0 = clock::now_ms() + 500;
        bench.move_ticks(&ids, |_| t0);
        let fired = bench.wait_fired(&ids, t0);
        let last = fired.iter().copied().max().unwrap_or(t0);
        let ticks = per_round as f64 / ((last - t0).max(1) as f64 / 1000.0);
        ratios.push(ticks / baseline);
        println!(
            "   round {round}: {baseline:>6.0} sessions/s, {ticks:>6.0} ticks/s: ratio {:.2}",
            ticks / baseline
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "   median ratio {:.2} (target ≥ {TARGET_RATIO})",
        ratios[ratios.len() / 2]
    );

    println!();
    println!("== 2. Wake-up precision: 50 schedules due 100 ms apart ==");
    let ids = bench.schedules_due_far_ahead(50);
    let t0 = clock::now_ms() + 500;
    bench.move_ticks(&ids, |i| t0 + 100 * i as i64);
    let fired = bench.wait_fired(&ids, t0 + 100 * (ids.len() as i64 - 1));
    let lat = Lat::of(
        fired
            .iter()
            .enumerate()
            .map(|(i, at)| (at - (t0 + 100 * i as i64)) as f64)
            .collect(),
    );
    println!("   lateness (commit − due): {}", lat.line());
    println!(
        "   p99 {:.0} ms (target ≤ {TARGET_WAKE_P99_MS:.0} ms)",
        lat.p(99.0)
    );

    println!();
    println!("== 3. The scheduler's next-tick lookup (first next_due_at of a partial index) ==");
    let lookup_large = lookup_cost(&rt, &store);
    println!(
        "   {:.1} µs with 100 schedules, {:.1} µs with {} (ratio {:.2})",
        lookup_small,
        lookup_large,
        thousands(bench.created.get() as u64),
        lookup_large / lookup_small
    );
    rt.block_on(scheduler.stop());
    rt.block_on(runner.shutdown());
    store.close();
}

struct Bench<'a> {
    rt: &'a tokio::runtime::Runtime,
    store: &'a sessiond::store::Store,
    schedules: &'a Schedules,
    actor: &'a Actor,
    agent: &'a str,
    created: std::cell::Cell<usize>,
}

impl Bench<'_> {
    /// `n` new hourly schedules whose first tick is an hour away; returns their ids.
    fn schedules_due_far_ahead(&self, n: usize) -> Vec<String> {
        let start_at = clock::rfc3339(clock::now_ms() + 3_600_000);
        self.rt.block_on(async {
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                let i = self.created.get();
                self.created.set(i + 1);
                let spec = NewSchedule {
                    name: format!("s{i}"),
                    initial_input: InitialInput {
                        content: "/reply ok".into(),
                        author: Author::User,
                        kind: InputType::Text,
                    },
                    description: None,
                    cron_expression: None,
                    interval_seconds: Some(3600),
                    timezone: None,
                    start_at: Some(start_at.clone()),
                    end_at: None,
                    paused: None,
                    task_params: None,
                    task_metadata: None,
                };
                let s = self
                    .schedules
                    .create(self.actor, self.agent, spec)
                    .await
                    .unwrap_or_else(|e| die("create schedule", e));
                ids.push(s.row.id);
            }
            ids
        })
    }

    /// Makes the `i`-th schedule's next tick fall at `due(i)` (the scheduler finds it within
    /// its longest sleep, or at once when it is awake).
    fn move_ticks(&self, ids: &[String], due: impl Fn(usize) -> i64) {
        let moved: Vec<(String, i64)> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), due(i)))
            .collect();
        self.rt.block_on(async {
            let rows = self.store.schedules();
            for (id, at) in moved {
                let expected = rows
                    .by_id(&id)
                    .await
                    .and_then(|r| r.ok_or(sessiond::store::Error::NotFound))
                    .unwrap_or_else(|e| die("move ticks", e));
                let mut row = expected.clone();
                row.start_at = Some(at);
                row.anchor_at = at;
                row.next_due_at = Some(at);
                match rows.replace_if_unchanged(expected, row).await {
                    Ok(true) => {}
                    Ok(false) => die("move ticks", format!("{id} changed meanwhile")),
                    Err(e) => die("move ticks", e),
                }
            }
        });
        // What an API change does: tell the scheduler its next tick moved.
        self.schedules.poke();
    }

    /// Waits until every schedule fired once (no tick is due before `last_due` any more: one
    /// cheap query per poll, so that watching does not slow the scheduler down); returns when
    /// each fired (its commit time, ms).
    fn wait_fired(&self, ids: &[String], last_due: i64) -> Vec<i64> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let next = self
                .rt
                .block_on(self.store.schedules().next_due())
                .unwrap_or_else(|e| die("next due", e));
            if next.is_none_or(|t| t > last_due) {
                break;
            }
            if Instant::now() > deadline {
                die("ticks", "not all fired within 10 minutes");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        ids.iter()
            .map(|id| {
                let row = self
                    .rt
                    .block_on(self.store.schedules().by_id(id))
                    .unwrap_or_else(|e| die("read schedule", e))
                    .unwrap_or_else(|| die("read schedule", "missing"));
                match (row.num_actions, row.last_action_at) {
                    (1, Some(at)) => at,
                    (n, _) => die("tick", format!("{id} fired {n} times")),
                }
            })
            .collect()
    }
}

/// Mean time of the scheduler's wake-up query, as the scheduler calls it, in µs.
fn lookup_cost(rt: &tokio::runtime::Runtime, store: &sessiond::store::Store) -> f64 {
    const CALLS: u32 = 2_000;
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..CALLS {
            let next = store.schedules().next_due().await;
            std::hint::black_box(next.unwrap_or_else(|e| die("lookup", e)));
        }
    });
    started.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS)
}
