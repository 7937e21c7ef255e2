//! `sessiond serve`: wires storage, the runner and the HTTP server together, and takes them down
//! in the right order on SIGINT/SIGTERM (streams ended, turns interrupted, writer flushed).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
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
use crate::schedules::{Schedules, scheduler::Scheduler};
use crate::sessions::Sessions;
use crate::store::{DEFAULT_WORKSPACE, Store};

/// Opens the store: the PostgreSQL database of `database_url` when there is one, else
/// `sessiond.db` in the data dir (both created when missing). The default workspace's drive
/// folder is made where there is a data dir: with PostgreSQL the commands that touch only the
/// database run without one, and `serve` has made it already.
pub fn open_store(cfg: &Config, bus: Arc<Bus>) -> Result<Store, String> {
    let store = match &cfg.database_url {
        Some(url) => open_postgres(url, cfg, bus)?,
        None => {
            std::fs::create_dir_all(&cfg.data_dir)
                .map_err(|e| format!("cannot create data dir {}: {e}", cfg.data_dir.display()))?;
            Store::open(&cfg.db_path(), &cfg.store, bus).map_err(|e| e.to_string())?
        }
    };
    store
        .directory()
        .ensure_workspace_blocking(DEFAULT_WORKSPACE, "Default")
        .map_err(|e| database_problem(cfg, &e.into()))?;
    if cfg.data_dir.is_dir() {
        Drive::root_for(&cfg.data_dir, DEFAULT_WORKSPACE)
            .ensure()
            .map_err(|e| e.to_string())?;
    }
    Ok(store)
}

fn open_postgres(
    url: &crate::config::DatabaseUrl,
    cfg: &Config,
    bus: Arc<Bus>,
) -> Result<Store, String> {
    Store::open_postgres(url.expose(), &cfg.store, bus).map_err(|e| url.scrub(&e.to_string()))
}

/// A store error's message, without the database URL's password should a driver quote it.
fn database_problem(cfg: &Config, e: &crate::Error) -> String {
    match &cfg.database_url {
        Some(url) => url.scrub(&e.to_string()),
        None => e.to_string(),
    }
}

/// The database the store is in, for the start-up lines and the log: `SQLite <file>` or
/// `PostgreSQL user@host:port/database` (never a password).
pub fn database_target(cfg: &Config) -> String {
    match &cfg.database_url {
        Some(url) => format!("PostgreSQL {}", url.target()),
        None => format!("SQLite {}", cfg.db_path().display()),
    }
}

/// Creates the agents the config file declares, or brings their name and anchor up to date.
fn apply_config_agents(cfg: &Config, store: &Store) -> Result<(), String> {
    use crate::agents::{self, AgentSpec};
    for a in &cfg.agents {
        let ws = store
            .directory()
            .workspace_by_slug_blocking(&a.workspace)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("config: agent {}: no workspace {}", a.slug, a.workspace))?;
        let drive = Drive::root_for(&cfg.data_dir, &ws.slug);
        let exists = store
            .directory()
            .agent_by_slug_blocking(&ws.id, &a.slug)
            .map_err(|e| e.to_string())?;
        let spec = AgentSpec {
            slug: Some(a.slug.clone()),
            name: a.name.clone(),
            anchor: a.anchor.clone(),
            engine: a.engine.clone(),
        };
        let result = match exists {
            None => match agents::create_blocking(store, &drive, &cfg.policy, &ws.id, spec.clone())
            {
                // Another process sharing the database created it first: bring it up to date.
                Err(crate::error::Error::Conflict("agent_exists", _)) => {
                    agents::update_blocking(store, &drive, &cfg.policy, &ws.id, &a.slug, spec)
                        .map(|_| ())
                }
                other => other.map(|_| ()),
            },
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
        lim.rlim_cur
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

/// A data dir or database that cannot be written (read-only, no permission) is refused at start,
/// not at the first write. A full disk is not refused: the server starts degraded (reads work,
/// writes answer 507, `/healthz` and `/readyz` say so) and recovers on its own when space returns.
fn check_writable(cfg: &Config, store: &Store) -> Result<(), String> {
    let db = match store.check_writable() {
        Err(crate::store::Error::StorageFull(e)) => Err(e.to_string()),
        Err(e) if cfg.database_url.is_some() => {
            return Err(format!(
                "the database ({}) cannot be written: {}",
                database_target(cfg),
                database_problem(cfg, &e.into())
            ));
        }
        Err(e) => {
            return Err(format!(
                "the database {} cannot be written ({e}); sessiond needs a writable data dir",
                cfg.db_path().display()
            ));
        }
        Ok(()) => Ok(()),
    };
    let probe = cfg.data_dir.join("run").join(".writable");
    let dir = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe));
    let dir = match dir {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
            Err(e.to_string())
        }
        Err(e) => {
            return Err(format!(
                "the data dir {} cannot be written ({e}); sessiond needs a writable data dir",
                cfg.data_dir.display()
            ));
        }
        Ok(()) => Ok(()),
    };
    if let Some(e) = db.err().or(dir.err()) {
        tracing::error!(
            data_dir = %cfg.data_dir.display(),
            database = %database_target(cfg),
            error = %e,
            "the data dir's disk is full: serving reads; writes answer 507 until space returns"
        );
    }
    Ok(())
}

/// The engine of agents that do not choose one: the configured one (`SESSIOND_ENGINE` or the
/// config file's `[engine]`, already merged into `cfg.engine` and checked), else `openai` when the
/// OpenAI variables are set, else the scripted demo engine that says how to configure a model.
pub(crate) fn default_engine(cfg: &Config) -> Result<Arc<dyn Engine>, String> {
    if let Some(json) = &cfg.engine {
        return match EngineConfig::parse(&json.to_string())
            .map_err(|e| format!("engine: {}", engine_problem(&e)))?
        {
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
    let agents = store.directory().agent_engines_blocking();
    for (ws, agent, engine) in agents.unwrap_or_default() {
        let e = engines.for_config(&engine);
        tracing::info!(workspace = %ws, agent = %agent, engine = e.name(), details = %e.describe(), "agent engine");
    }
}

/// This process's folder when several processes share the data dir (PostgreSQL):
/// `run/<host>/<runner id>/`, locked while the process runs, with the registry of the programs
/// it starts (`children/`). Folders of this host whose lock is free belong to processes that
/// died: their programs are stopped and the folders removed. A process never touches another
/// host's folders (their process ids mean nothing here) nor a live peer's.
fn process_dir(
    data_dir: &std::path::Path,
) -> Result<(PathBuf, std::fs::File, Vec<String>), String> {
    let id = crate::ids::process_id();
    let host = id.rsplitn(3, '-').nth(2).unwrap_or("sessiond");
    let hosts = data_dir.join("run").join(host);
    let mut dead = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&hosts) {
        for entry in entries.flatten() {
            let dir = entry.path();
            let Ok(file) = std::fs::File::open(dir.join("lock")) else {
                continue;
            };
            if file.try_lock().is_ok() {
                let orphans = crate::process::stop_orphans(&dir.join("children"));
                if orphans > 0 {
                    tracing::warn!(
                        groups = orphans,
                        runner = %entry.file_name().to_string_lossy(),
                        "stopped programs a sessiond that died left running"
                    );
                }
                let _ = std::fs::remove_dir_all(&dir);
                dead.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    let own = hosts.join(id);
    std::fs::create_dir_all(&own).map_err(|e| format!("cannot create {}: {e}", own.display()))?;
    let lock = std::fs::File::create(own.join("lock"))
        .map_err(|e| format!("cannot create {}: {e}", own.join("lock").display()))?;
    lock.try_lock()
        .map_err(|e| format!("cannot lock {}: {e}", own.join("lock").display()))?;
    Ok((own.join("children"), lock, dead))
}

pub fn serve(cfg: Config) -> Result<(), String> {
    api::schema::self_check()?;
    let open_files = raise_open_files_limit();
    let connections = api::connection::set_connection_limit(open_files);
    tracing::info!(open_files, connections, "connection limit");
    let default = default_engine(&cfg)?;
    // Listen first: a port in use fails before the data dir or the database are touched.
    let listeners = listen(&cfg.bind)?;
    let metrics_listeners = match &cfg.metrics.bind {
        Some(bind) => listen(bind).map_err(|e| format!("metrics: {e}"))?,
        None => Vec::new(),
    };
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", cfg.data_dir.display()))?;
    // With SQLite the data dir is this process's alone; with PostgreSQL every process of the
    // deployment shares it (the drive, uploads), and each keeps its own folder under `run/`.
    let _lock = match &cfg.database_url {
        None => Some(lock_data_dir(&cfg.data_dir)?),
        Some(_) => None,
    };
    let cfg = Arc::new(cfg);
    let bus = Bus::new(
        cfg.stream.channel_capacity,
        cfg.stream.max_subscribers_per_session,
    );
    let store = open_store(&cfg, Arc::clone(&bus))?;
    tracing::info!(database = %database_target(&cfg), "store open");
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
    let (children, _process_lock, dead) = match &cfg.database_url {
        None => {
            let children = cfg.data_dir.join("run").join("children");
            let orphans = crate::process::stop_orphans(&children);
            if orphans > 0 {
                tracing::warn!(
                    groups = orphans,
                    "stopped programs a previous sessiond left running"
                );
            }
            (children, None, Vec::new())
        }
        Some(_) => {
            let (children, lock, dead) = process_dir(&cfg.data_dir)?;
            (children, Some(lock), dead)
        }
    };
    crate::process::track_in(children)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let engines = Engines::new(default, cfg.policy.clone());
    log_engines(&store, &engines);
    let acp_slot = engines.acp_platform();
    let agent_keys = crate::agentex::acp::AgentKeys::load_or_create(&cfg.data_dir)?;
    let runner = Runner::start_after(
        store.clone(),
        engines,
        cfg.runner.clone(),
        cfg.data_dir.clone(),
        runner_rt.handle(),
        dead,
    )
    .map_err(|e| format!("cannot start runner: {e}"))?;
    let sessions = Sessions::new(store.clone(), runner.clone(), Arc::clone(&cfg));
    runner.attach_sessions(Arc::new(sessions.clone()));
    let schedules = Schedules::new(sessions.clone());
    let scheduler = Scheduler::start(schedules.clone(), runner_rt.handle());
    let deliverer = crate::outbound::deliver::start(
        store.clone(),
        Arc::clone(&cfg),
        agent_keys.sealer(crate::outbound::subscriptions::SEALING_PURPOSE),
        runner_rt.handle(),
    );
    let sweeper = crate::retention::Sweeper::start(
        crate::retention::Retention::new(
            sessions.clone(),
            cfg.data_dir.clone(),
            cfg.retention.clone(),
        ),
        runner_rt.handle(),
    );
    let schedules = web::Data::new(schedules);
    let platform = Arc::new(crate::agentex::acp::Platform::new(
        sessions.clone(),
        agent_keys,
    ));
    let _ = acp_slot.set(platform.clone());
    let platform = web::Data::from(platform);
    let auth = Auth::new(store.clone())
        .with_browser_session_ms(cfg.limits.browser_session_ms)
        .with_login_delay_ms(cfg.limits.login_delay_ms);
    let setup_token = match auth.prepare_setup() {
        Ok(token) => token,
        // A server started on a full disk starts degraded; its setup link comes with a start
        // that can store it.
        Err(e) if e.is_storage_fault() => {
            tracing::warn!("no setup link this start: the database cannot be written ({e})");
            None
        }
        Err(e) => return Err(e.to_string()),
    };
    let state = web::Data::new(AppState::new(sessions, auth));
    let state_for_url = state.clone();

    let system = actix_web::rt::System::new();
    let data_dir = cfg.data_dir.clone();
    let database = database_target(&cfg);
    let result = system.block_on(async {
        let signalled = shutdown_signal().map_err(|e| format!("cannot watch for signals: {e}"))?;
        let bound = listeners
            .first()
            .and_then(|l| l.local_addr().ok())
            .ok_or("no listening address")?;
        let mut builder = actix_server::Server::build()
            .disable_signals()
            .shutdown_timeout(10);
        let mut others = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            if i > 0 {
                others.push(addr);
            }
            let state_for_app = state.clone();
            let schedules_for_app = schedules.clone();
            let platform_for_app = platform.clone();
            builder = builder
                .listen(format!("sessiond-http-{i}"), listener, move || {
                    http_service(
                        addr,
                        state_for_app.clone(),
                        schedules_for_app.clone(),
                        platform_for_app.clone(),
                        api::routes_with_ui,
                    )
                })
                .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        }
        let mut metrics_bound = None;
        for (i, listener) in metrics_listeners.into_iter().enumerate() {
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            metrics_bound.get_or_insert(addr);
            let state_for_metrics = state.clone();
            let schedules_for_metrics = schedules.clone();
            let platform_for_metrics = platform.clone();
            builder = builder
                .listen(format!("sessiond-metrics-{i}"), listener, move || {
                    http_service(
                        addr,
                        state_for_metrics.clone(),
                        schedules_for_metrics.clone(),
                        platform_for_metrics.clone(),
                        api::metrics_routes,
                    )
                })
                .map_err(|e| format!("cannot listen on {addr} (metrics): {e}"))?;
        }
        state_for_url.set_base_url(format!("http://{bound}"));
        if let Some(a) = metrics_bound {
            println!("sessiond metrics on http://{a}/metrics");
        }
        println!("sessiond listening on http://{bound}");
        for other in &others {
            println!("also listening on http://{other}");
        }
        println!("data dir: {}", data_dir.display());
        println!("database: {database}");
        if let Some(token) = &setup_token {
            println!(
                "no account yet: open http://{bound}/setup#{token} on this machine to create the owner \
                 (each start prints a new link; the links printed before stay valid until the owner \
                 is created)"
            );
        }
        let server = builder.run();
        let watcher = state.clone();
        actix_web::rt::spawn(async move { watcher.auth.watch_revocations().await });
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
    // HTTP is down: stop firing schedules and sweeping, stop turns (they write their
    // terminals), then flush the writer.
    runner_rt.block_on(scheduler.stop());
    runner_rt.block_on(deliverer.stop());
    runner_rt.block_on(sweeper.stop());
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
    schedules: web::Data<Schedules>,
    platform: web::Data<crate::agentex::acp::Platform>,
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
        .app_data(schedules)
        .app_data(platform)
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
        // `admit` switches Nagle's algorithm off, so answers go out as they are written.
        let conn = connection::admit(io)
            .await
            .map_err(actix_http::error::DispatchError::Io)?;
        let peer = conn.peer_addr();
        Ok((conn, peer))
    })
    .and_then(h1)
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
