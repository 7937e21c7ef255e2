//! The command line: `sessiond serve`, `sessiond backup FILE` and the commands that manage
//! agents, people, workspaces and keys on the store directly, with configuration layered as
//! embedded defaults < `--config` file < environment < flags.
//!
//! The data dir is resolved to an absolute path once, printed when the server starts and named
//! in every error, because it depends on the current directory unless pinned; only `serve`
//! creates it, so a command run from another directory says where it looked instead of
//! quietly starting an empty one.
//!
//! `--database URL` moves the store to PostgreSQL; the data dir keeps the drives. The URL is
//! checked (without connecting) with the rest of the configuration, and every message shows it
//! without its password.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod archives;
mod retention;

use crate::config::{Config, DatabaseUrl, LogFormat};
use crate::database::hide_url_passwords;

#[derive(Debug, Parser)]
#[command(
    name = "sessiond",
    version,
    about = "Hosts durable agent sessions: REST + SSE APIs, a web UI, timelines in SQLite (or PostgreSQL) and a runner pool.",
    after_help = "Run `sessiond serve` and open the printed URL. Configuration keys are documented in config.example.toml."
)]
pub struct Cli {
    /// TOML configuration file (every key optional; see config.example.toml).
    #[arg(long, global = true, env = "SESSIOND_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory holding the SQLite database and the workspace drives [default:
    /// ./sessiond-data, in the current directory]. Only `serve` creates it. With --database it
    /// still holds the drives (uploads included) and the agent keys.
    #[arg(long, global = true, env = "SESSIOND_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// PostgreSQL database to keep sessions, people and keys in, instead of sessiond.db in the
    /// data dir: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE or postgresql://… (libpq's
    /// options, such as ?host=/run/postgresql, too). Shown everywhere without its password.
    #[arg(
        long,
        global = true,
        env = "SESSIOND_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    database: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (APIs, web UI and runner) until SIGINT or SIGTERM.
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080]; a host name (localhost) is resolved,
        /// port 0 picks a free port.
        #[arg(long, env = "SESSIOND_BIND", value_name = "HOST:PORT")]
        bind: Option<String>,
        /// Address of the metrics listener (`GET /metrics`, Prometheus text format) [default:
        /// none]; port 0 picks a free port.
        #[arg(long, env = "SESSIOND_METRICS_BIND", value_name = "ADDR:PORT")]
        metrics_bind: Option<String>,
    },
    /// Write a consistent copy of the SQLite database to FILE while the server keeps running
    /// (a PostgreSQL database is backed up with pg_dump).
    Backup {
        /// Destination file; it must not exist yet.
        file: PathBuf,
    },
    /// Manage agents (works whether or not the server is running).
    Agent {
        #[command(subcommand)]
        action: AgentAction,
    },
    /// Manage people.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
    /// Manage workspaces.
    Workspace {
        #[command(subcommand)]
        action: WorkspaceAction,
    },
    /// Manage API keys.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Manage registered apps.
    App {
        #[command(subcommand)]
        action: AppAction,
    },
    /// Write sessions to a portable archive (a tar file): one session, an agent's or the whole
    /// workspace's (works whether or not the server is running).
    Export {
        /// The workspace the sessions belong to.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// Export this session only.
        #[arg(long, conflicts_with = "agent")]
        session: Option<String>,
        /// Export this agent's sessions only (its slug).
        #[arg(long)]
        agent: Option<String>,
        /// Destination file; it must not exist yet.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// Import a portable archive into a workspace: sessions it holds already are left as they
    /// are; a changed member refuses the whole archive.
    Import {
        /// The workspace to import into.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// The archive (made by `sessiond export` or an export route).
        file: PathBuf,
    },
    /// List the sessions each workspace's retention policy would remove now (the server's
    /// sweeper removes them).
    Retention {
        /// Only this workspace.
        #[arg(long)]
        workspace: Option<String>,
        /// List only (required: removal is the running server's).
        #[arg(long, required = true)]
        dry_run: bool,
    },
}

#[derive(Debug, Subcommand)]
enum UserAction {
    /// Create a person; the password is read from standard input.
    Create {
        /// The person's email address, which they sign in with.
        #[arg(long)]
        email: String,
        /// Read the password from standard input (the only way to give one).
        #[arg(long, required = true)]
        password_stdin: bool,
        /// Workspace to join.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// owner or member [default: owner for the first user, else member].
        #[arg(long, value_parser = ["owner", "member"])]
        role: Option<String>,
    },
    /// End every browser session of a person: their signed-in pages and event streams stop
    /// working on every server of this database within a second.
    SignOut {
        /// The person's email address.
        #[arg(long)]
        email: String,
    },
}

#[derive(Debug, Subcommand)]
enum WorkspaceAction {
    /// Create a workspace (with its root agent and drive folder).
    Create {
        /// The workspace's name in URLs: 1 to 63 characters of a-z, 0-9 and '-'.
        slug: String,
        /// Display name [default: the slug].
        #[arg(long)]
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Create a personal API key; prints only the key (shown once).
    Create {
        /// Email of the person the key acts as.
        #[arg(long)]
        user: String,
        /// Workspace the key works in.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// Capabilities: sessions, sessions:read, files:write (or ws:<slug>:<capability>).
        #[arg(long = "scope", required = true, num_args = 1..)]
        scopes: Vec<String>,
        /// A label to recognise the key by in `token list`.
        #[arg(long, default_value = "cli")]
        name: String,
        /// When the key stops working by itself (RFC 3339, in the future) [default: never].
        #[arg(long, value_name = "TIME")]
        expires: Option<String>,
    },
    /// List API keys (never their secrets).
    List,
    /// Revoke an API key by id.
    Revoke {
        /// The key's id, as `token list` shows it.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum AppAction {
    /// Register an app and print its key (shown once).
    Create {
        /// Workspace the app works in.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// The app's name, shown as the sender of what it submits.
        #[arg(long)]
        name: String,
        /// Capabilities: sessions, sessions:read, files:write (or ws:<slug>:<capability>).
        #[arg(long = "scope", required = true, num_args = 1..)]
        scopes: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum AgentAction {
    /// Create an agent with an anchor folder in the workspace drive.
    Create {
        /// The agent's name in URLs (`root` is reserved).
        slug: String,
        /// Display name [default: the slug].
        #[arg(long)]
        name: Option<String>,
        /// Drive folder its sessions must stay inside [default: agents/<slug>].
        #[arg(long)]
        anchor: Option<String>,
        /// Workspace of the agent.
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// List the agents of a workspace.
    List {
        /// Workspace whose agents to list.
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// Change an agent's name or anchor.
    Update {
        /// The agent to change.
        slug: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// New anchor folder in the workspace drive.
        #[arg(long)]
        anchor: Option<String>,
        /// Workspace of the agent.
        #[arg(long, default_value = "default")]
        workspace: String,
    },
    /// Delete an agent that owns no sessions.
    Delete {
        /// The agent to delete.
        slug: String,
        /// Workspace of the agent.
        #[arg(long, default_value = "default")]
        workspace: String,
    },
}

/// `database_from` is where `cli.database` came from; an empty `SESSIOND_DATABASE_URL` counts as
/// unset. The database URL is checked here, where its source is known (`config` cannot: the check
/// is the PostgreSQL driver's, see `database`), and wherever it came from, like the file's other
/// values, even when a flag overrides it.
fn load_config(cli: &Cli, database_from: DatabaseFrom) -> Result<Config, String> {
    let mut cfg = match &cli.config {
        Some(path) => Config::from_file(path).map_err(|e| hide_url_passwords(&e))?,
        None => Config::default(),
    };
    if let Some(url) = &cfg.database_url {
        url.check().map_err(|e| format!("database_url: {e}"))?;
    }
    if let Some(dir) = &cli.data_dir {
        cfg.data_dir = dir.clone();
    }
    let from_empty_variable =
        |url: &String| url.is_empty() && database_from == DatabaseFrom::Variable;
    if let Some(url) = cli
        .database
        .as_ref()
        .filter(|url| !from_empty_variable(url))
    {
        let url = DatabaseUrl::new(url.clone());
        url.check()
            .map_err(|e| format!("{}: {e}", database_from.name()))?;
        cfg.database_url = Some(url);
    }
    cfg.data_dir = std::path::absolute(&cfg.data_dir)
        .map_err(|e| format!("data dir {}: {e}", cfg.data_dir.display()))?;
    check_engine(&cfg)?;
    if let Command::Serve { bind, metrics_bind } = &cli.command {
        if let Some(bind) = bind {
            cfg.bind = bind.clone();
        }
        if let Some(bind) = metrics_bind {
            cfg.metrics.bind = Some(bind.clone());
        }
        if let Some(engine) = engine_from_env()? {
            cfg.engine = Some(engine);
        }
    }
    cfg.validate()?;
    Ok(cfg)
}

/// The config file's default engine is checked with the rest of the file, before any command
/// runs (`config` knows the settings' shapes, not the engines').
fn check_engine(cfg: &Config) -> Result<(), String> {
    match &cfg.engine {
        Some(engine) => crate::engine::EngineConfig::parse(&engine.to_string())
            .map(|_| ())
            .map_err(|e| format!("engine: {}", crate::server::engine_problem(&e))),
        None => Ok(()),
    }
}

/// `SESSIOND_ENGINE`: an engine JSON object, or just a kind such as `scripted`; checked here so
/// that a bad value is a configuration error that names the variable.
fn engine_from_env() -> Result<Option<serde_json::Value>, String> {
    let Some(raw) = std::env::var("SESSIOND_ENGINE")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(None);
    };
    let raw = raw.trim();
    let value = if raw.starts_with('{') {
        serde_json::from_str(raw).map_err(|e| format!("SESSIOND_ENGINE: not JSON: {e}"))?
    } else {
        serde_json::json!({ "kind": raw })
    };
    match crate::engine::EngineConfig::parse(&value.to_string()) {
        Ok(Some(_)) => Ok(Some(value)),
        Ok(None) => Err("SESSIOND_ENGINE: give at least the engine's kind".into()),
        Err(e) => Err(format!(
            "SESSIOND_ENGINE: {}",
            crate::server::engine_problem(&e)
        )),
    }
}

/// The server logs what it does at `info`; the other commands print their result and log only
/// warnings (no migration chatter). `SESSIOND_LOG` overrides both: a default level and
/// `target=level` directives, comma-separated (`info,sessiond::access=debug`).
fn init_logging(format: LogFormat, default_level: &str) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;

    let from_env = std::env::var("SESSIOND_LOG").ok();
    let (mut filter, refused) = match from_env.as_deref().map(str::parse::<Targets>) {
        Some(Ok(targets)) => (targets, None),
        Some(Err(e)) => (default_targets(default_level), Some(e)),
        None => (default_targets(default_level), None),
    };
    // The HTTP/1 parser logs every malformed request it refuses as an error; those are the
    // client's errors (answered 4xx and counted in `sessiond_http_rejected_total`), so they stay
    // out of the log unless asked for.
    let asked = from_env.is_some_and(|v| v.contains("actix_http"));
    if !asked {
        filter = filter.with_target("actix_http::h1::dispatcher", LevelFilter::OFF);
    }
    // The filter decides alone: the layer below it passes every level it is handed.
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colours_on_stderr());
    let registry = tracing_subscriber::registry().with(filter);
    let _ = match format {
        LogFormat::Text => registry.with(layer).try_init(),
        LogFormat::Json => registry.with(layer.json()).try_init(),
    };
    if let Some(e) = refused {
        tracing::warn!("SESSIOND_LOG is not a log filter ({e}); logging at {default_level}");
    }
}

/// Whether what goes to stderr may be coloured: only for a terminal, and never with `NO_COLOR`
/// set to anything but empty (<https://no-color.org>). A log sent to a file or a pipe (a service
/// manager, `2> log`) holds no escape codes; clap decides the same way for its own messages.
fn colours_on_stderr() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// A filter that lets everything at `level` and above through (`level` is one of ours).
fn default_targets(level: &str) -> tracing_subscriber::filter::Targets {
    let level = level
        .parse()
        .unwrap_or(tracing_subscriber::filter::LevelFilter::INFO);
    tracing_subscriber::filter::Targets::new().with_default(level)
}

/// Whether `command` needs an existing data dir. Commands other than `serve` work on an
/// existing one: one that is not there is most likely the wrong current directory, not a wish
/// for a fresh empty one. With SQLite that is every one of them (the database is in it); with
/// PostgreSQL only those that write a workspace's drive folder (`workspace create`, `agent
/// create` and `agent update`), while the others touch the database alone and create nothing
/// on disk.
fn needs_data_dir(command: &Command, postgres: bool) -> bool {
    match command {
        Command::Serve { .. } => false,
        _ if !postgres => true,
        // The drive holds the files sessions attach.
        Command::Workspace { .. } | Command::Export { .. } | Command::Import { .. } => true,
        Command::Retention { .. } => false,
        Command::Agent { action } => {
            matches!(
                action,
                AgentAction::Create { .. } | AgentAction::Update { .. }
            )
        }
        Command::Backup { .. }
        | Command::User { .. }
        | Command::Token { .. }
        | Command::App { .. } => false,
    }
}

fn require_data_dir(cfg: &Config, command: &Command) -> Result<(), String> {
    if !needs_data_dir(command, cfg.database_url.is_some()) || cfg.data_dir.is_dir() {
        return Ok(());
    }
    Err(format!(
        "no data dir at {}: run `sessiond serve` once to create it, or point --data-dir \
         (or SESSIOND_DATA_DIR, or data_dir in the config file) at an existing one",
        cfg.data_dir.display()
    ))
}

/// Where the `--database` value came from: the flag, or the variable standing in for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DatabaseFrom {
    Flag,
    Variable,
}

impl DatabaseFrom {
    fn of(matches: &clap::ArgMatches) -> DatabaseFrom {
        match matches.value_source("database") {
            Some(ValueSource::EnvVariable) => DatabaseFrom::Variable,
            _ => DatabaseFrom::Flag,
        }
    }

    /// How messages name it.
    fn name(self) -> &'static str {
        match self {
            DatabaseFrom::Flag => "--database",
            DatabaseFrom::Variable => "SESSIOND_DATABASE_URL",
        }
    }
}

pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let cfg = match load_config(&cli, DatabaseFrom::of(&matches)) {
        Ok(cfg) => cfg,
        Err(e) => {
            // The data dir it would have used, when the broken configuration does not decide it.
            let dir = match (&cli.data_dir, &cli.config) {
                (Some(dir), _) => Some(dir.clone()),
                (None, None) => Some(Config::default().data_dir),
                (None, Some(_)) => None,
            };
            match dir.and_then(|d| std::path::absolute(d).ok()) {
                Some(dir) => eprintln!("sessiond: {e} (data dir: {})", dir.display()),
                None => eprintln!("sessiond: {e}"),
            }
            return ExitCode::from(2);
        }
    };
    let serve = matches!(cli.command, Command::Serve { .. });
    init_logging(cfg.log_format, if serve { "info" } else { "warn" });
    let result =
        require_data_dir(&cfg, &cli.command).and_then(|()| run_command(&cfg, &cli.command));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let dir = cfg.data_dir.display().to_string();
            if e.contains(&dir) {
                eprintln!("sessiond: {e}");
            } else {
                eprintln!("sessiond: {e} (data dir: {dir})");
            }
            ExitCode::FAILURE
        }
    }
}

fn run_command(cfg: &Config, command: &Command) -> Result<(), String> {
    match command {
        Command::Serve { .. } => crate::server::serve(cfg.clone()),
        Command::Backup { .. } if cfg.database_url.is_some() => Err(backup_elsewhere(cfg)),
        Command::Backup { file } => crate::store::backup(&cfg.db_path(), file)
            .map(|()| println!("backup written to {}", file.display()))
            .map_err(|e| e.to_string()),
        Command::Agent { action } => agent_command(cfg, action),
        Command::User { action } => identity_command(cfg, IdentityAction::User(action)),
        Command::Workspace { action } => identity_command(cfg, IdentityAction::Workspace(action)),
        Command::Token { action } => identity_command(cfg, IdentityAction::Token(action)),
        Command::App { action } => identity_command(cfg, IdentityAction::App(action)),
        Command::Export {
            workspace,
            session,
            agent,
            output,
        } => archives::export(
            cfg,
            workspace,
            archives::Selection {
                session: session.as_deref(),
                agent: agent.as_deref(),
            },
            output,
        ),
        Command::Import { workspace, file } => archives::import(cfg, workspace, file),
        Command::Retention { workspace, .. } => retention::dry_run(cfg, workspace.as_deref()),
    }
}

/// `sessiond backup` with PostgreSQL: the database is not a file sessiond can copy, and PostgreSQL's
/// own tools back it up while it serves; the command to run is printed (without the password,
/// which pg_dump reads from PGPASSWORD or ~/.pgpass), with the drives that go with it.
fn backup_elsewhere(cfg: &Config) -> String {
    let url = cfg
        .database_url
        .as_ref()
        .map(DatabaseUrl::without_password)
        .unwrap_or_default();
    format!(
        "backup copies the SQLite database, and this store is in PostgreSQL: back it up with \
         PostgreSQL's own tools while sessiond runs, e.g. `pg_dump --format=custom --file=FILE \
         '{url}'` (the password from PGPASSWORD or ~/.pgpass), and copy the drives in {} with it",
        cfg.data_dir.join("drive").display()
    )
}

/// `sessiond agent ...`: opens the store directly (beside a running server, which the database
/// arbitrates with) and calls the same code as the HTTP routes.
fn agent_command(cfg: &Config, action: &AgentAction) -> Result<(), String> {
    use crate::agents::{self, AgentSpec};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let bus = crate::bus::Bus::new(16, 1);
    let store = crate::server::open_store(cfg, bus)?;
    let workspace = match action {
        AgentAction::Create { workspace, .. }
        | AgentAction::List { workspace }
        | AgentAction::Update { workspace, .. }
        | AgentAction::Delete { workspace, .. } => workspace.clone(),
    };
    let result = rt.block_on(async {
        let ws = store
            .directory()
            .workspace_by_slug(&workspace)
            .await?
            .ok_or_else(|| crate::Error::invalid(format!("no workspace {workspace}")))?;
        let drive = crate::drive::Drive::root_for(&cfg.data_dir, &ws.slug);
        match action {
            AgentAction::Create {
                slug, name, anchor, ..
            } => {
                let spec = AgentSpec {
                    slug: Some(slug.clone()),
                    name: name.clone(),
                    anchor: anchor.clone(),
                    engine: None,
                };
                let row = agents::create(&store, &drive, &cfg.policy, &ws.id, spec).await?;
                println!("{}", agents::view(&row));
            }
            AgentAction::List { .. } => {
                for a in agents::list(&store, &ws.id).await? {
                    let anchor = if a.anchor.is_empty() {
                        "."
                    } else {
                        a.anchor.as_str()
                    };
                    println!("{}\t{}\t{}", a.slug, anchor, a.name);
                }
            }
            AgentAction::Update {
                slug, name, anchor, ..
            } => {
                let spec = AgentSpec {
                    slug: None,
                    name: name.clone(),
                    anchor: anchor.clone(),
                    engine: None,
                };
                let row = agents::update(&store, &drive, &cfg.policy, &ws.id, slug, spec).await?;
                println!("{}", agents::view(&row));
            }
            AgentAction::Delete { slug, .. } => {
                agents::delete(&store, &ws.id, slug).await?;
                println!("deleted {slug}");
            }
        }
        Ok::<(), crate::Error>(())
    });
    store.close();
    result.map_err(|e| e.to_string())
}

enum IdentityAction<'a> {
    User(&'a UserAction),
    Workspace(&'a WorkspaceAction),
    Token(&'a TokenAction),
    App(&'a AppAction),
}

fn workspace_id(store: &crate::store::Store, slug: &str) -> Result<String, String> {
    store
        .directory()
        .workspace_by_slug_blocking(slug)
        .map_err(|e| e.to_string())?
        .map(|w| w.id)
        .ok_or_else(|| format!("no workspace {slug}"))
}

fn scopes(list: &[String], workspace: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for s in list
        .iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let cap = crate::auth::parse_scope(s, workspace).map_err(|e| e.to_string())?;
        if !out.contains(&cap) {
            out.push(cap);
        }
    }
    Ok(out)
}

/// `sessiond user|workspace|token|app ...`, on the store directly.
fn identity_command(cfg: &Config, action: IdentityAction<'_>) -> Result<(), String> {
    use crate::store::identity;
    let store = crate::server::open_store(cfg, crate::bus::Bus::new(16, 1))?;
    let result = (|| -> Result<(), String> {
        match action {
            IdentityAction::User(UserAction::Create {
                email,
                workspace,
                role,
                ..
            }) => {
                let mut password = String::new();
                std::io::stdin()
                    .read_line(&mut password)
                    .map_err(|e| e.to_string())?;
                let password = password.trim_end_matches(['\r', '\n']).to_owned();
                crate::auth::password::check_strength(&password).map_err(|e| e.to_string())?;
                let email = email.trim().to_lowercase();
                if !email.contains('@') {
                    return Err("--email: not an email address".into());
                }
                let ws = workspace_id(&store, workspace)?;
                let phc = crate::auth::password::hash(&password).map_err(|e| e.to_string())?;
                let role = match role.as_deref().map(identity::Role::parse) {
                    None => identity::FirstRole::OwnerIfFirst,
                    Some(Some(role)) => identity::FirstRole::Given(role),
                    Some(None) => return Err("--role: owner or member".into()),
                };
                let (id, role) = store
                    .identity()
                    .create_user_blocking(&email, &phc, &ws, role)
                    .map_err(|e| e.to_string())?;
                let (who, role) = (&email, role.name());
                println!("created {who} as {role} of workspace {workspace} (user {id})");
            }
            IdentityAction::User(UserAction::SignOut { email }) => {
                let email = email.trim().to_lowercase();
                let user = store
                    .identity()
                    .user_by_email_blocking(&email)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no user {email}"))?;
                let n = store
                    .logins()
                    .sign_out_user_blocking(&user.id)
                    .map_err(|e| e.to_string())?;
                let s = if n == 1 { "" } else { "s" };
                println!("ended {n} browser session{s} of {email}");
            }
            IdentityAction::Workspace(WorkspaceAction::Create { slug, name }) => {
                let ok = !slug.is_empty()
                    && slug.len() <= 63
                    && slug
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                if !ok {
                    return Err("workspace slug: 1 to 63 characters of a-z, 0-9 and '-'".into());
                }
                let name = name.clone().unwrap_or_else(|| slug.clone());
                store
                    .directory()
                    .ensure_workspace_blocking(slug, &name)
                    .map_err(|e| e.to_string())?;
                crate::drive::Drive::root_for(&cfg.data_dir, slug)
                    .ensure()
                    .map_err(|e| e.to_string())?;
                println!("{slug}");
            }
            IdentityAction::Token(TokenAction::Create {
                user,
                workspace,
                scopes: list,
                name,
                expires,
            }) => {
                let expires_at = expires
                    .as_deref()
                    .map(crate::access::parse_expiry)
                    .transpose()
                    .map_err(|e| format!("--expires: {e}"))?;
                let ws = workspace_id(&store, workspace)?;
                let scopes = scopes(list, workspace)?;
                let email = user.trim().to_lowercase();
                let u = store
                    .identity()
                    .user_by_email_blocking(&email)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no user {email}"))?;
                let member = store
                    .identity()
                    .is_member_blocking(&u.id, &ws)
                    .map_err(|e| e.to_string())?;
                if !member {
                    return Err(format!("{email} is not a member of workspace {workspace}"));
                }
                let (key, row) = crate::auth::mint_key(name, &ws, &scopes, expires_at)
                    .map_err(|e| e.to_string())?;
                store
                    .identity()
                    .insert_user_key_blocking(&u.id, row)
                    .map_err(|e| e.to_string())?;
                println!("{}", key.key);
            }
            IdentityAction::Token(TokenAction::List) => {
                for k in store
                    .identity()
                    .keys_blocking()
                    .map_err(|e| e.to_string())?
                {
                    let owner = k
                        .app_id
                        .as_ref()
                        .map(|a| format!("app:{a}"))
                        .or(k.user_id.as_ref().map(|u| format!("user:{u}")))
                        .unwrap_or_default();
                    let state = if k.revoked {
                        "revoked"
                    } else if k.expired(crate::clock::now_ms()) {
                        "expired"
                    } else {
                        "active"
                    };
                    let last = k
                        .last_used_at
                        .map(crate::clock::rfc3339)
                        .unwrap_or_else(|| "never".into());
                    println!(
                        "{}\t{}\t{}\t{}\t{}\tcreated {}\tlast used {}\t{}",
                        k.id,
                        k.name,
                        owner,
                        k.workspace_slug,
                        k.scopes.join(","),
                        crate::clock::rfc3339(k.created_at),
                        last,
                        state
                    );
                }
            }
            IdentityAction::Token(TokenAction::Revoke { id }) => {
                let done = store
                    .identity()
                    .revoke_key_blocking(id)
                    .map_err(|e| e.to_string())?;
                if !done {
                    return Err(format!("no active key {id}"));
                }
                println!("revoked {id}");
            }
            IdentityAction::App(AppAction::Create {
                workspace,
                name,
                scopes: list,
            }) => {
                let ws = workspace_id(&store, workspace)?;
                let scopes = scopes(list, workspace)?;
                let (key, row) = crate::auth::mint_key(&format!("app {name}"), &ws, &scopes, None)
                    .map_err(|e| e.to_string())?;
                store
                    .identity()
                    .insert_app_with_key_blocking(name, row)
                    .map_err(|e| e.to_string())?;
                println!("{}", key.key);
            }
        }
        Ok(())
    })();
    store.close();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_files_engines_parse_with_every_option_enabled() {
        let text = crate::config::with_everything_enabled(include_str!("../config.example.toml"));
        let cfg: Config = toml::from_str(&text).unwrap();
        check_engine(&cfg).unwrap();
        #[cfg(feature = "postgres")]
        cfg.database_url.as_ref().unwrap().check().unwrap();
        for agent in &cfg.agents {
            let engine = agent.engine.as_ref().unwrap().to_string();
            crate::engine::EngineConfig::parse(&engine).unwrap();
        }
    }
}
