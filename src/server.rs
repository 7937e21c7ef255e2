//! `sessiond serve`: wires storage, the runner and the HTTP server together, and takes them down
//! in the right order on SIGINT/SIGTERM (streams ended, turns interrupted, writer flushed).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;

use actix_web::{App, HttpServer, middleware, web};

use crate::api::{self, AppState};
use crate::auth::Auth;
use crate::bus::Bus;
use crate::config::Config;
use crate::drive::Drive;
use crate::engine::openai::OpenAiConfig;
use crate::engine::{Engine, EngineConfig, Engines, scripted::ScriptedEngine};
use crate::runner::Runner;
use crate::schedules::{Schedules, scheduler::Scheduler};
use crate::sessions::Sessions;
use crate::store::{DEFAULT_WORKSPACE, Store};

/// Opens the data directory and the store, creating both when missing.
pub fn open_store(cfg: &Config, bus: Arc<Bus>) -> Result<Store, String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", cfg.data_dir.display()))?;
    let store = Store::open(&cfg.db_path(), &cfg.store, bus).map_err(|e| e.to_string())?;
    store
        .write_blocking(|tx| {
            tx.ensure_workspace(DEFAULT_WORKSPACE, "Default")
                .map(|_| ())
        })
        .map_err(|e| e.to_string())?;
    Drive::root_for(&cfg.data_dir, DEFAULT_WORKSPACE)
        .ensure()
        .map_err(|e| e.to_string())?;
    Ok(store)
}

/// Creates the agents the config file declares, or brings their name and anchor up to date.
fn apply_config_agents(cfg: &Config, store: &Store) -> Result<(), String> {
    use crate::agents::{self, AgentSpec};
    for a in &cfg.agents {
        let slug = a.workspace.clone();
        let ws = store
            .read_blocking(|c| crate::store::workspace_by_slug(c, &slug))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("config: agent {}: no workspace {}", a.slug, a.workspace))?;
        let drive = Drive::root_for(&cfg.data_dir, &ws.slug);
        let exists = store
            .read_blocking(|c| crate::store::agent_by_slug(c, &ws.id, &a.slug))
            .map_err(|e| e.to_string())?;
        let spec = AgentSpec {
            slug: Some(a.slug.clone()),
            name: a.name.clone(),
            anchor: a.anchor.clone(),
            engine: a.engine.clone(),
        };
        let result = match exists {
            None => agents::create_blocking(store, &drive, &cfg.policy, &ws.id, spec).map(|_| ()),
            Some(_) => agents::update_blocking(store, &drive, &cfg.policy, &ws.id, &a.slug, spec)
                .map(|_| ()),
        };
        result.map_err(|e| format!("config: agent {}: {e}", a.slug))?;
    }
    Ok(())
}

/// Every open SSE stream holds a socket: lift the soft open-files limit to the hard one so that
/// thousands of idle streams do not run the process out of descriptors.
fn raise_open_files_limit() {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::warn!("could not raise the open-files limit");
            }
        }
    }
}

/// The engine of agents that do not choose one: the configured one (`SESSIOND_ENGINE` or the
/// config file's `[engine]`, already merged into `cfg.engine` and checked), else `openai` when the
/// OpenAI variables are set, else the scripted demo engine that says how to configure a model.
fn default_engine(cfg: &Config) -> Result<Arc<dyn Engine>, String> {
    if let Some(json) = &cfg.engine {
        return match EngineConfig::parse(&json.to_string())
            .map_err(|e| format!("engine: {}", engine_problem(&e)))?
        {
            Some(engine) => engine.build().map_err(|e| format!("engine: {e}")),
            None => Err("engine: give at least its kind".into()),
        };
    }
    if let Some(openai) = OpenAiConfig::from_env() {
        return EngineConfig::Openai(Box::new(openai))
            .build()
            .map_err(|e| format!("engine: {e}"));
    }
    Ok(Arc::new(ScriptedEngine {
        hint: true,
        ..Default::default()
    }))
}

/// An engine configuration's problem, worded for the person who wrote it: without the `engine:`
/// prefix the parser puts on its messages (the caller names where the engine came from) and with
/// serde's "variant" in the words of the `kind` field.
pub fn engine_problem(e: &crate::Error) -> String {
    let msg = e.to_string();
    let msg = msg.strip_prefix("engine: ").unwrap_or(&msg);
    msg.replace("unknown variant", "unknown engine kind")
}

/// Listens on every address `bind` resolves to (`localhost:8090` is 127.0.0.1 and ::1; IPv4
/// first, so that is the printed URL), before anything is written to the data dir, so a port in
/// use is the first and only thing reported. With port 0 the other addresses try the port the
/// first one got and are skipped if it is taken there; an address family the machine lacks (no
/// IPv6) is skipped when another address works.
fn listen(bind: &str) -> Result<Vec<TcpListener>, String> {
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for addr in bind
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve bind address {bind:?}: {e}"))?
    {
        if !addrs.contains(&addr) {
            addrs.push(addr);
        }
    }
    addrs.sort_by_key(SocketAddr::is_ipv6);
    let mut listeners: Vec<TcpListener> = Vec::new();
    let mut skipped = None;
    for mut addr in addrs {
        let any_port = addr.port() == 0;
        if any_port && let Some(first) = listeners.first().and_then(|l| l.local_addr().ok()) {
            addr.set_port(first.port());
        }
        match bind_socket(addr) {
            Ok(l) => listeners.push(l),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrNotAvailable
                    || (any_port && !listeners.is_empty()) =>
            {
                tracing::warn!(%addr, error = %e, "not listening on this address");
                skipped = Some(format!("cannot listen on {addr}: {e}"));
            }
            Err(e) => return Err(format!("cannot listen on {addr}: {e}")),
        }
    }
    if listeners.is_empty() {
        return Err(skipped.unwrap_or_else(|| format!("bind address {bind:?} resolves to nothing")));
    }
    Ok(listeners)
}

/// A listening socket as actix makes one (address reuse, a backlog of 1024), IPv6 sockets for
/// IPv6 only so that `[::]` and `0.0.0.0` can both be bound.
fn bind_socket(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Says at start-up which engine each agent runs on.
fn log_engines(store: &Store, engines: &Engines) {
    let default = engines.default_engine();
    tracing::info!(engine = default.name(), details = %default.describe(), "default engine");
    let agents = store.read_blocking(crate::store::agent_engines);
    for (ws, agent, engine) in agents.unwrap_or_default() {
        let e = engines.for_config(&engine);
        tracing::info!(workspace = %ws, agent = %agent, engine = e.name(), details = %e.describe(), "agent engine");
    }
}

pub fn serve(cfg: Config) -> Result<(), String> {
    api::schema::self_check()?;
    raise_open_files_limit();
    let default = default_engine(&cfg)?;
    // Listen first: a port in use fails before the data dir or the database are touched.
    let listeners = listen(&cfg.bind)?;
    let cfg = Arc::new(cfg);
    let bus = Bus::new(
        cfg.stream.channel_capacity,
        cfg.stream.max_subscribers_per_session,
    );
    let store = open_store(&cfg, Arc::clone(&bus))?;
    apply_config_agents(&cfg, &store)?;

    // Turns run on their own runtime, never on the HTTP workers.
    let runner_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sessiond-runner")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start runner runtime: {e}"))?;
    // Programs a previous sessiond started and could not stop (it was killed) stop now.
    let children = cfg.data_dir.join("run").join("children");
    let orphans = crate::process::stop_orphans(&children);
    if orphans > 0 {
        tracing::warn!(
            groups = orphans,
            "stopped programs a previous sessiond left running"
        );
    }
    crate::process::track_in(children)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let engines = Engines::new(default, cfg.policy.clone());
    log_engines(&store, &engines);
    let runner = Runner::start(
        store.clone(),
        engines,
        cfg.runner.clone(),
        cfg.data_dir.clone(),
        runner_rt.handle(),
    )
    .map_err(|e| format!("cannot start runner: {e}"))?;
    let sessions = Sessions::new(store.clone(), runner.clone(), Arc::clone(&cfg));
    runner.attach_sessions(Arc::new(sessions.clone()));
    let schedules = Schedules::new(sessions.clone());
    let scheduler = Scheduler::start(schedules.clone(), runner_rt.handle());
    let schedules = web::Data::new(schedules);
    let auth = Auth::new(store.clone());
    let setup_token = auth.prepare_setup().map_err(|e| e.to_string())?;
    let state = web::Data::new(AppState::new(sessions, auth));
    let state_for_url = state.clone();

    let system = actix_web::rt::System::new();
    let data_dir = cfg.data_dir.clone();
    let result = system.block_on(async {
        let signalled = shutdown_signal().map_err(|e| format!("cannot watch for signals: {e}"))?;
        let mut server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(schedules.clone())
                .wrap(
                    middleware::DefaultHeaders::new()
                        .add(("X-Content-Type-Options", "nosniff"))
                        .add(("Referrer-Policy", "no-referrer"))
                        .add(("X-Frame-Options", "DENY"))
                        // API responses are data, never documents; the UI's pages set their own.
                        .add(("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")),
                )
                .configure(api::routes_with_ui)
        })
        .disable_signals()
        .shutdown_timeout(10);
        for listener in listeners {
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            server = server
                .listen(listener)
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        }
        let bound = server
            .addrs()
            .first()
            .copied()
            .ok_or("no listening address")?;
        state_for_url.set_base_url(format!("http://{bound}"));
        println!("sessiond listening on http://{bound}");
        for other in server.addrs().iter().skip(1) {
            println!("also listening on http://{other}");
        }
        println!("data dir: {}", data_dir.display());
        if let Some(token) = &setup_token {
            println!(
                "no account yet: open http://{bound}/setup#{token} on this machine to create the owner \
                 (each start prints a new link)"
            );
        }
        let server = server.run();
        let handle = server.handle();
        let bus = Arc::clone(&bus);
        actix_web::rt::spawn(async move {
            signalled.await;
            tracing::info!("shutting down");
            bus.close_all();
            handle.stop(true).await;
        });
        server.await.map_err(|e| format!("server error: {e}"))
    });
    // HTTP is down: stop firing schedules, stop turns (they write their terminals), then flush
    // the writer.
    runner_rt.block_on(scheduler.stop());
    runner_rt.block_on(runner.shutdown());
    store.close();
    runner_rt.shutdown_timeout(std::time::Duration::from_secs(2));
    tracing::info!("stopped");
    result
}

/// Registers for SIGINT and SIGTERM at once, before the start-up lines are printed, so that a
/// signal sent as soon as they appear gets the orderly shutdown rather than the default abrupt
/// exit; resolves on the first of them.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
