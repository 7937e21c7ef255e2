//! `sessiond export` and `sessiond import`: portable archives made and read on the store and the
//! drives directly, with the same code as the HTTP routes (`crate::archives`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::archives::{Archives, Workspace};
use crate::config::Config;
use crate::engine::Engines;
use crate::store::Store;

/// Which sessions an export holds: one, an agent's, or (neither given) the workspace's.
pub struct Selection<'a> {
    pub session: Option<&'a str>,
    pub agent: Option<&'a str>,
}

/// Runs `f` with the store, the archives and the workspace `slug` on a runtime of its own.
fn with_archives<T>(
    cfg: &Config,
    slug: &str,
    f: impl AsyncFnOnce(&Archives, &Workspace) -> crate::Result<T>,
) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store: Store = crate::server::open_store(cfg, crate::bus::Bus::new(16, 1))?;
    // Records name each agent's engine as the server would (its default from this config).
    let engines = Arc::new(Engines::new(
        crate::server::default_engine(cfg)?,
        cfg.policy.clone(),
    ));
    let archives = Archives::new(
        store.clone(),
        cfg.data_dir.clone(),
        Arc::new(move |engine: &str| engines.harness(engine)),
    );
    let result = rt.block_on(async {
        let ws = store
            .directory()
            .workspace_by_slug(slug)
            .await?
            .ok_or_else(|| crate::Error::invalid(format!("no workspace {slug}")))?;
        let ws = Workspace {
            id: ws.id,
            slug: ws.slug,
            user_id: String::new(),
        };
        f(&archives, &ws).await
    });
    store.close();
    result.map_err(|e| e.to_string())
}

/// `sessiond export`: writes the archive to `output` (a new file), then prints what it holds.
pub fn export(cfg: &Config, slug: &str, what: Selection<'_>, output: &Path) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(output)
        .map_err(|e| format!("cannot create {}: {e}", output.display()))?;
    let written = with_archives(cfg, slug, async |archives, ws| {
        let (ids, single) = match what.session {
            Some(id) => (vec![id.to_owned()], true),
            None => (archives.session_ids(ws, what.agent).await?, false),
        };
        let mut export = archives.export(ws, ids, single).await?;
        let mut bytes = 0usize;
        while let Some(chunk) = export.next_chunk().await? {
            file.write_all(&chunk)
                .map_err(|e| crate::Error::from_io("cannot write the archive", &e))?;
            bytes += chunk.len();
        }
        file.sync_all()
            .map_err(|e| crate::Error::from_io("cannot write the archive", &e))?;
        Ok((export.manifest().clone(), bytes))
    });
    let (manifest, bytes) = match written {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(output);
            return Err(e);
        }
    };
    println!(
        "exported {} session(s), {} file(s), {bytes} bytes to {}",
        manifest.sessions.len(),
        manifest.files.len(),
        output.display()
    );
    for s in &manifest.skipped {
        println!("skipped {}: {}", s.id, s.reason);
    }
    Ok(())
}

/// `sessiond import`: reads the archive whole (every checksum is checked before anything is
/// written), imports it and prints what it did.
pub fn import(cfg: &Config, slug: &str, file: &Path) -> Result<(), String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let report = with_archives(cfg, slug, async |archives, ws| {
        archives.import(ws, &bytes).await
    })?;
    for id in &report.imported {
        println!("imported {id}");
    }
    for id in &report.unchanged {
        println!("unchanged {id}");
    }
    for path in &report.files_written {
        println!("file written {path}");
    }
    for path in &report.files_present {
        println!("file present {path}");
    }
    Ok(())
}
