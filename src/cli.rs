//! The command line: `sessiond serve`, `sessiond backup FILE`, with configuration layered as
//! embedded defaults < `--config` file < environment < flags.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{Config, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "sessiond",
    version,
    about = "Hosts durable agent sessions on one machine: REST + SSE APIs, a web UI, SQLite timelines and a runner pool.",
    after_help = "Run `sessiond serve` and open the printed URL. Configuration keys are documented in config.example.toml."
)]
pub struct Cli {
    /// TOML configuration file (every key optional; see config.example.toml).
    #[arg(long, global = true, env = "SESSIOND_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory holding the database and the workspace drives [default: ./sessiond-data].
    #[arg(long, global = true, env = "SESSIOND_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server (APIs, web UI and runner) until SIGINT or SIGTERM.
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080]; port 0 picks a free port.
        #[arg(long, env = "SESSIOND_BIND", value_name = "ADDR:PORT")]
        bind: Option<String>,
    },
    /// Write a consistent copy of the database to FILE while the server keeps running.
    Backup {
        /// Destination file; it must not exist yet.
        file: PathBuf,
    },
}

fn load_config(cli: &Cli) -> Result<Config, String> {
    let mut cfg = match &cli.config {
        Some(path) => Config::from_file(path)?,
        None => Config::default(),
    };
    if let Some(dir) = &cli.data_dir {
        cfg.data_dir = dir.clone();
    }
    if let Command::Serve { bind: Some(bind) } = &cli.command {
        cfg.bind = bind.clone();
    }
    cfg.validate()?;
    Ok(cfg)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SESSIOND_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match load_config(&cli) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("sessiond: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(cfg.log_format);
    let result = match &cli.command {
        Command::Serve { .. } => crate::server::serve(cfg),
        Command::Backup { file } => crate::store::backup(&cfg.db_path(), file)
            .map(|()| println!("backup written to {}", file.display()))
            .map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sessiond: {e}");
            ExitCode::FAILURE
        }
    }
}
