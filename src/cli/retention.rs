//! `sessiond retention --dry-run`: what each workspace's retention policy would remove now, read
//! from the store directly. Removal itself is the server's sweeper's (it ends the sessions'
//! streams and tells its runner), so the command only lists.

use crate::config::Config;
use crate::store::retention::RetentionPolicy;

/// Lists, per workspace with a policy (only `workspace` when given), the sessions its policy
/// removes now: one tab-separated line each (workspace, session id, agent, last change, title),
/// then a count.
pub fn dry_run(cfg: &Config, workspace: Option<&str>) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store = crate::server::open_store(cfg, crate::bus::Bus::new(16, 1))?;
    let result = rt.block_on(async {
        let mut policies: Vec<(String, String, RetentionPolicy)> = store
            .retention()
            .policies()
            .await?
            .into_iter()
            .map(|p| (p.workspace_id, p.workspace_slug, p.policy))
            .collect();
        if let Some(slug) = workspace {
            let ws = store
                .directory()
                .workspace_by_slug(slug)
                .await?
                .ok_or_else(|| crate::Error::invalid(format!("no workspace {slug}")))?;
            policies.retain(|(id, _, _)| *id == ws.id);
            if policies.is_empty() {
                println!("workspace {slug} has no retention policy");
                return Ok(());
            }
        }
        let mut total = 0;
        for (id, slug, policy) in &policies {
            let found =
                crate::retention::preview(&store, id, policy, crate::retention::PREVIEW_MAX)
                    .await?;
            for c in &found {
                println!(
                    "{slug}\t{}\t{}\t{}\t{}",
                    c.id,
                    c.agent_slug,
                    crate::clock::rfc3339(c.updated_at),
                    c.title
                );
            }
            total += found.len();
        }
        println!(
            "{total} session(s) would be removed ({})",
            if policies
                .iter()
                .any(|(_, _, p)| p.action.name() == "archive")
            {
                "archived, then deleted, where the policy archives"
            } else {
                "deleted"
            }
        );
        Ok::<(), crate::Error>(())
    });
    store.close();
    result.map_err(|e| e.to_string())
}
