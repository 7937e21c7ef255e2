//! Schedule figures for sessiond: how fast due ticks become sessions, how late they fire, and
//! what the scheduler's lookup of the next tick costs as schedules pile up.
//!
//! ```text
//! cargo run --release --example bench_schedules              # 5,000 schedules (~1 min on 2 cores)
//! cargo run --release --example bench_schedules -- --quick   # 500 schedules
//! ```
//!
//! This is a measuring command, not a test: it prints figures next to a baseline measured in the
//! same run and asserts nothing about timing (it does check that every tick made its session).
//! Everything runs in this process over the library, with a fresh data dir and the scripted
//! engine (`/reply ok`), as `sessiond serve` wires it (store, runner, sessions, scheduler):
//!
//! 1. Baseline: N sessions of one agent created one after another through `Sessions::create` —
//!    the work a tick does, without its schedule bookkeeping.
//! 2. N interval schedules, all due at the same instant T0, fired by the scheduler: ticks per
//!    second against the baseline (ratio), and each tick's lateness (its commit minus T0).
//! 3. The scheduler's one query per wake-up (`min(next_due_at)`) with 100 and with N schedules:
//!    it must not grow with the number of schedules.

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
use sessiond::store::schedules as rows;
use sessiond::timeline::{Behavior, Sender};

#[path = "support/report.rs"]
mod report;
use report::{Lat, loadavg, quick_flag, thousands};

/// Target: a tick costs at most this much more than creating its session directly.
const TARGET_RATIO: f64 = 0.8;
const WS: &str = "default";

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_schedules: {what}: {e}");
    std::process::exit(1);
}

fn main() {
    let quick = quick_flag("bench_schedules", "500 schedules instead of 5,000");
    let n: usize = if quick { 500 } else { 5_000 };
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
        .write_blocking(|tx| {
            let ws = sessiond::store::workspace_by_slug(tx.conn(), WS)?
                .ok_or(sessiond::Error::NotFound)?;
            let user = tx.insert_user("bench@local", "unused")?;
            tx.add_membership(&user, &ws.id, "owner")?;
            let a = tx.insert_agent(&ws.id, "baseline", "baseline", "agents/baseline", "{}")?;
            let b = tx.insert_agent(&ws.id, "scheduled", "scheduled", "agents/scheduled", "{}")?;
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
    runner.attach_sessions(sessions.clone());
    let schedules = Schedules::new(sessions.clone());

    println!(
        "bench_schedules: {} schedules; load average {}",
        thousands(n as u64),
        loadavg()
    );
    println!("   figures are wall-clock on a possibly shared machine; nothing here is asserted.");
    println!();

    // 1. Baseline.
    let started = Instant::now();
    rt.block_on(async {
        for _ in 0..n {
            let input = CreateIn {
                prompt: "/reply ok".into(),
                agent_id: Some(baseline_agent.clone()),
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
    let baseline = n as f64 / started.elapsed().as_secs_f64();
    println!("== 1. Baseline: sessions created one after another through Sessions::create ==");
    println!("   {baseline:>8.0} sessions/s");

    // 3a. The next-tick lookup with few schedules (measured before the rest exist).
    let create = |i: usize, start_at: i64| NewSchedule {
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
        start_at: Some(clock::rfc3339(start_at)),
        end_at: None,
        paused: None,
        task_params: None,
        task_metadata: None,
    };
    // Far enough ahead that every schedule exists before the first is due.
    let t0 = clock::now_ms() + 3_600_000;
    let mut ids = Vec::with_capacity(n);
    let started = Instant::now();
    rt.block_on(async {
        for i in 0..100.min(n) {
            let s = schedules
                .create(&actor, &scheduled_agent, create(i, t0))
                .await
                .unwrap_or_else(|e| die("create schedule", e));
            ids.push(s.row.id);
        }
    });
    let lookup_small = lookup_cost(&store);
    rt.block_on(async {
        for i in ids.len()..n {
            let s = schedules
                .create(&actor, &scheduled_agent, create(i, t0))
                .await
                .unwrap_or_else(|e| die("create schedule", e));
            ids.push(s.row.id);
        }
    });
    let create_rate = n as f64 / started.elapsed().as_secs_f64();
    let lookup_large = lookup_cost(&store);

    // 2. Move every schedule's tick to T0 = now + 2 s, then let the scheduler fire them.
    let t0 = clock::now_ms() + 2_000;
    let moved = ids.clone();
    store
        .write_blocking(move |tx| {
            for id in &moved {
                let mut row =
                    rows::schedule_by_id(tx.conn(), id)?.ok_or(sessiond::Error::NotFound)?;
                row.start_at = Some(t0);
                row.anchor_at = t0;
                row.next_due_at = Some(t0);
                tx.update_schedule(&row)?;
            }
            Ok(())
        })
        .unwrap_or_else(|e| die("move ticks", e));
    let scheduler = Scheduler::start(schedules.clone(), rt.handle());
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let next = store
            .read_blocking(rows::next_schedule_due)
            .unwrap_or_else(|e| die("next due", e));
        if next.is_some_and(|t| t > t0) {
            break;
        }
        if Instant::now() > deadline {
            die("ticks", "not all fired within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut lateness = Vec::with_capacity(n);
    let mut last = t0;
    for id in &ids {
        let key = id.clone();
        let row = store
            .read_blocking(|c| rows::schedule_by_id(c, &key))
            .unwrap_or_else(|e| die("read schedule", e))
            .unwrap_or_else(|| die("read schedule", "missing"));
        let fired = row
            .last_action_at
            .unwrap_or_else(|| die("tick", format!("{id} did not fire")));
        if row.num_actions != 1 {
            die("tick", format!("{id} fired {} times", row.num_actions));
        }
        lateness.push((fired - t0) as f64);
        last = last.max(fired);
    }
    let fired_in = (last - t0).max(1) as f64 / 1000.0;
    let tick_rate = n as f64 / fired_in;
    let lat = Lat::of(lateness);
    println!();
    println!(
        "== 2. {} interval schedules due at the same instant, fired by the scheduler ==",
        thousands(n as u64)
    );
    println!("   schedules created at {create_rate:.0}/s");
    println!(
        "   {tick_rate:>8.0} ticks/s (all fired in {fired_in:.2} s); ratio to the baseline {:.2} (target ≥ {TARGET_RATIO})",
        tick_rate / baseline
    );
    println!("   lateness (commit − due): {}", lat.line());
    println!();
    println!("== 3. The scheduler's next-tick lookup (min(next_due_at), partial index) ==");
    println!(
        "   {:.1} µs with 100 schedules, {:.1} µs with {} (ratio {:.2})",
        lookup_small,
        lookup_large,
        thousands(n as u64),
        lookup_large / lookup_small
    );
    rt.block_on(scheduler.stop());
    rt.block_on(runner.shutdown());
    store.close();
}

/// Mean time of the scheduler's wake-up query, in µs.
fn lookup_cost(store: &sessiond::store::Store) -> f64 {
    const ROUNDS: u32 = 2_000;
    let started = Instant::now();
    store
        .read_blocking(|c| {
            for _ in 0..ROUNDS {
                std::hint::black_box(rows::next_schedule_due(c)?);
            }
            Ok(())
        })
        .unwrap_or_else(|e| die("lookup", e));
    started.elapsed().as_secs_f64() * 1e6 / f64::from(ROUNDS)
}
