//! What a workspace spent in a window of time, per agent: the sum of its sessions' `usage`
//! events (one per turn) recorded in the window. Sessions not updated since the window began are
//! not read at all, so a short window over a long history reads little.

use std::collections::BTreeMap;

use super::Store;
use super::sql::params;
use crate::error::Result;
use crate::timeline::Event;

/// One agent's spending in a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSpend {
    /// Cents (fractional: a turn may cost less than one).
    pub cents: f64,
    pub tokens_in: f64,
    pub tokens_out: f64,
    /// Turns with a usage event in the window.
    pub turns: u64,
}

impl Store {
    /// Spending of `workspace_id`'s agents between `from` (inclusive) and `to` (exclusive), ms;
    /// agents that spent nothing in it are absent.
    pub async fn spend_by_agent(
        &self,
        workspace_id: &str,
        from: i64,
        to: i64,
    ) -> Result<BTreeMap<String, AgentSpend>> {
        let ws = workspace_id.to_owned();
        self.read(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT s.agent_id, e.body FROM sessions s JOIN events e ON e.session_pk = s.pk
                 WHERE s.workspace_id = ?1 AND s.updated_at >= ?2
                   AND e.type = 'usage' AND e.created_at >= ?2 AND e.created_at < ?3",
            )?;
            let rows = stmt.query_map(params![ws, from, to], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?;
            let mut out: BTreeMap<String, AgentSpend> = BTreeMap::new();
            for row in rows {
                let (agent, body) = row?;
                // A body this binary cannot read counts as nothing rather than failing the sum.
                let Ok(Event::Usage { turn_usage, .. }) = serde_json::from_str::<Event>(&body)
                else {
                    continue;
                };
                let a = out.entry(agent).or_default();
                a.cents += (turn_usage.cost.total * 100.0).max(0.0);
                a.tokens_in += turn_usage.input + turn_usage.cache_read + turn_usage.cache_write;
                a.tokens_out += turn_usage.output;
                a.turns += 1;
            }
            Ok(out)
        })
        .await
    }
}
