//! `sessiond serve`: wires storage, the runner and the HTTP server together, and takes them down
//! in the right order on SIGINT/SIGTERM (streams ended, turns interrupted, writer flushed).

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::{App, middleware, web};

use crate::api::{self, AppState};
use crate::auth::Auth;
use crate::bus::Bus;
use crate::config::Config;
use crate::drive::Drive;
use crate::engine::openai::OpenAiConfig;
use crate::engine::{Engine, EngineConfig, Engines, scripted::ScriptedEngine};
use crate::runner::Runner;
use crate::sessions::Sessions;
use crate::store::Store;

/// The workspace that exists from the first start.
pub const DEFAULT_WORKSPACE: &str = "default";

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

/// Every open connection holds a file descriptor: lifts the soft open-files limit as far as the
/// hard limit allows, then admits connections up to that limit minus a reserve
/// (`api::connection`), so that at the limit new clients get a 503 instead of silence.
fn raise_open_files_limit() -> u64 {
    #[cfg(unix)]
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                lim.rlim_cur = lim.rlim_max;
            } else {
                tracing::warn!(
                    soft = lim.rlim_cur,
                    hard = lim.rlim_max,
                    "could not raise the open-files limit"
                );
            }
        }
        lim.rlim_cur as u64
    }
    #[cfg(not(unix))]
    1024
}

/// The data dir's lock, held while this process serves it: a second `sessiond serve` on the same
/// data dir would recover (end) the first one's running turns. The CLI subcommands do not take
/// it; they work beside a running server as SQLite allows.
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the exclusive lock on `<data dir>/serve.lock` and writes our pid into it, or says which
/// process holds it.
pub fn lock_data_dir(data_dir: &std::path::Path) -> Result<DataDirLock, String> {
    use std::io::{Read, Seek, Write};
    let path = data_dir.join("serve.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EROFS | libc::EACCES | libc::EPERM) => format!(
                "the data dir {} cannot be written ({e}); sessiond needs a writable data dir",
                data_dir.display()
            ),
            _ => format!("cannot open {}: {e}", path.display()),
        })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(format!(
                "another sessiond (pid {}) is serving the data dir {}; stop it first, or give this one another --data-dir",
                if holder.is_empty() { "unknown" } else { holder },
                data_dir.display()
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", path.display()));
        }
    }
    let written = file
        .set_len(0)
        .and_then(|()| file.seek(std::io::SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .and_then(|()| file.flush());
    written.map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(DataDirLock { _file: file })
}

/// A data dir or database that cannot be written is refused at start, not at the first write.
fn check_writable(cfg: &Config, store: &Store) -> Result<(), String> {
    store.check_writable().map_err(|e| {
        format!(
            "the database {} cannot be written ({e}); sessiond needs a writable data dir",
            cfg.db_path().display()
        )
    })?;
    let probe = cfg.data_dir.join("run").join(".writable");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            format!(
                "the data dir {} cannot be written ({e}); sessiond needs a writable data dir",
                cfg.data_dir.display()
            )
        })
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
    let open_files = raise_open_files_limit();
    let connections = api::connection::set_connection_limit(open_files);
    tracing::info!(open_files, connections, "connection limit");
    let addr: SocketAddr = cfg
        .bind
        .parse()
        .map_err(|_| format!("invalid bind address {:?} (expected ADDR:PORT)", cfg.bind))?;
    let metrics_addr: Option<SocketAddr> = cfg
        .metrics
        .bind
        .as_deref()
        .map(|b| {
            b.parse()
                .map_err(|_| format!("invalid metrics bind address {b:?} (expected ADDR:PORT)"))
        })
        .transpose()?;
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", cfg.data_dir.display()))?;
    let _lock = lock_data_dir(&cfg.data_dir)?;
    let cfg = Arc::new(cfg);
    let bus = Bus::new(
        cfg.stream.channel_capacity,
        cfg.stream.max_subscribers_per_session,
    );
    let store = open_store(&cfg, Arc::clone(&bus))?;
    std::fs::create_dir_all(cfg.data_dir.join("run"))
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    check_writable(&cfg, &store)?;
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
    let runner = Runner::start(
        store.clone(),
        engines,
        cfg.runner.clone(),
        cfg.data_dir.clone(),
        runner_rt.handle(),
    )
    .map_err(|e| format!("cannot start runner: {e}"))?;
    let sessions = Sessions::new(store.clone(), runner.clone(), Arc::clone(&cfg));
    runner.attach_sessions(sessions.clone());
    let auth = Auth::new(store.clone());
    let setup_token = auth.prepare_setup().map_err(|e| e.to_string())?;
    let state = web::Data::new(AppState::new(sessions, auth));
    let state_for_url = state.clone();

    let system = actix_web::rt::System::new();
    let result = system.block_on(async {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound = listener.local_addr().unwrap_or(addr);
        let metrics_listener = match metrics_addr {
            Some(a) => Some(
                std::net::TcpListener::bind(a)
                    .map_err(|e| format!("cannot listen on {a} (metrics): {e}"))?,
            ),
            None => None,
        };
        let state_for_app = state.clone();
        let mut builder = actix_server::Server::build()
            .disable_signals()
            .shutdown_timeout(10)
            .listen("sessiond-http", listener, move || {
                http_service(bound, state_for_app.clone(), api::routes_with_ui)
            })
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let mut metrics_bound = None;
        if let Some(l) = metrics_listener {
            let a = l.local_addr().map_err(|e| e.to_string())?;
            metrics_bound = Some(a);
            let state_for_metrics = state.clone();
            builder = builder
                .listen("sessiond-metrics", l, move || {
                    http_service(a, state_for_metrics.clone(), api::metrics_routes)
                })
                .map_err(|e| format!("cannot listen on {a} (metrics): {e}"))?
                .workers(1);
        }
        state_for_url.set_base_url(format!("http://{bound}"));
        if let Some(a) = metrics_bound {
            println!("sessiond metrics on http://{a}/metrics");
        }
        println!("sessiond listening on http://{bound}");
        if let Some(token) = &setup_token {
            println!("no account yet: open http://{bound}/setup#{token} on this machine to create the owner");
        }
        let server = builder.run();
        let watcher = state.clone();
        actix_web::rt::spawn(async move { watcher.auth.watch_revocations().await });
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

/// One listener's HTTP/1 service: each accepted connection is admitted by `api::connection`
/// (reserve, parser errors as JSON, hang-up notice), then served by an actix-web `App` with the
/// request middleware and `routes`.
fn http_service(
    local: SocketAddr,
    state: web::Data<AppState>,
    routes: fn(&mut web::ServiceConfig),
) -> impl actix_service::ServiceFactory<
    actix_web::rt::net::TcpStream,
    Config = (),
    Response = (),
    Error = actix_http::error::DispatchError,
    InitError = (),
> {
    use actix_service::{IntoServiceFactory, ServiceFactoryExt, fn_service, map_config};
    use api::connection::{self, Conn};
    let app = App::new()
        .app_data(state)
        .wrap(
            middleware::DefaultHeaders::new()
                .add(("X-Content-Type-Options", "nosniff"))
                .add(("Referrer-Policy", "no-referrer"))
                .add(("X-Frame-Options", "DENY"))
                // API responses are data, never documents; the UI's pages set their own.
                .add((
                    "Content-Security-Policy",
                    "default-src 'none'; frame-ancestors 'none'",
                )),
        )
        .wrap(middleware::from_fn(api::middleware::observe))
        .configure(routes);
    let app = map_config(
        app.into_factory()
            .map_err(|e: actix_web::Error| e.error_response()),
        |()| actix_web::dev::AppConfig::default(),
    );
    let h1 = actix_http::HttpService::build()
        .keep_alive(actix_http::KeepAlive::Timeout(
            std::time::Duration::from_secs(5),
        ))
        .client_request_timeout(std::time::Duration::from_secs(5))
        .client_disconnect_timeout(std::time::Duration::from_secs(1))
        .local_addr(local)
        .on_connect_ext(|io: &Conn, ext: &mut actix_http::Extensions| {
            ext.insert(io.peer_closed());
        })
        .h1(app);
    fn_service(|io: actix_web::rt::net::TcpStream| async move {
        let conn = connection::admit(io)
            .await
            .map_err(actix_http::error::DispatchError::Io)?;
        let peer = conn.peer_addr();
        Ok((conn, peer))
    })
    .and_then(h1)
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
