//! `sessiond serve`: wires storage, the runner and the HTTP server together, and takes them down
//! in the right order on SIGINT/SIGTERM (streams ended, turns interrupted, writer flushed).

use std::net::SocketAddr;
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

/// The engine of agents that do not choose one: `SESSIOND_ENGINE` (a JSON engine object or just
/// a kind), else the config file's `engine`, else `openai` when the OpenAI variables are set, else
/// the scripted demo engine that says how to configure a model.
fn default_engine(cfg: &Config) -> Result<Arc<dyn Engine>, String> {
    let from_env = std::env::var("SESSIOND_ENGINE")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| {
            let v = v.trim();
            if v.starts_with('{') {
                v.to_owned()
            } else {
                serde_json::json!({ "kind": v }).to_string()
            }
        });
    let chosen = from_env.or_else(|| cfg.engine.as_ref().map(|e| e.to_string()));
    if let Some(json) = chosen {
        return match EngineConfig::parse(&json).map_err(|e| format!("engine: {e}"))? {
            Some(engine) => engine
                .build(&Default::default())
                .map_err(|e| format!("engine: {e}")),
            None => Err("engine: give at least its kind".into()),
        };
    }
    if let Some(openai) = OpenAiConfig::from_env() {
        return EngineConfig::Openai(Box::new(openai))
            .build(&Default::default())
            .map_err(|e| format!("engine: {e}"));
    }
    Ok(Arc::new(ScriptedEngine {
        hint: true,
        ..Default::default()
    }))
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
    let addr: SocketAddr = cfg
        .bind
        .parse()
        .map_err(|_| format!("invalid bind address {:?} (expected ADDR:PORT)", cfg.bind))?;
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
    let engines = Engines::new(default_engine(&cfg)?, cfg.policy.clone());
    log_engines(&store, &engines);
    let acp_slot = engines.acp_platform();
    let agent_keys = crate::agentex::acp::AgentKeys::load_or_create(&cfg.data_dir)?;
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
    let platform = Arc::new(crate::agentex::acp::Platform::new(
        sessions.clone(),
        agent_keys.clone(),
    ));
    let _ = acp_slot.set(platform.clone());
    let platform = web::Data::from(platform);
    let agent_keys = web::Data::new(agent_keys);
    let auth = Auth::new(store.clone());
    let setup_token = auth.prepare_setup().map_err(|e| e.to_string())?;
    let state = web::Data::new(AppState::new(sessions, auth));
    let state_for_url = state.clone();

    let system = actix_web::rt::System::new();
    let result = system.block_on(async {
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .app_data(platform.clone())
                .app_data(agent_keys.clone())
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
        .shutdown_timeout(10)
        // Streamed answers (SSE, NDJSON, an RPC answer written when its turn ends) go out as
        // they are written: without this, Nagle's algorithm holds a stream's last small write
        // until the client's delayed ACK, some 40 ms later.
        .tcp_nodelay(true)
        .bind(addr)
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound = server.addrs().first().copied().unwrap_or(addr);
        state_for_url.set_base_url(format!("http://{bound}"));
        println!("sessiond listening on http://{bound}");
        if let Some(token) = &setup_token {
            println!("no account yet: open http://{bound}/setup#{token} on this machine to create the owner");
        }
        let server = server.run();
        let handle = server.handle();
        let bus = Arc::clone(&bus);
        actix_web::rt::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            bus.close_all();
            handle.stop(true).await;
        });
        server.await.map_err(|e| format!("server error: {e}"))
    });
    // HTTP is down: stop turns (they write their terminals), then flush the writer.
    runner_rt.block_on(runner.shutdown());
    store.close();
    runner_rt.shutdown_timeout(std::time::Duration::from_secs(2));
    tracing::info!("stopped");
    result
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
