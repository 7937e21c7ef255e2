//! What an issued agent key (`x-agent-api-key`) may call: one row per `/agentex` route.
//!
//! A registered ACP server calls back with the key it was issued. That key acts for one agent:
//! it reaches that agent's own objects (the agent itself, its tasks and their records and
//! LangGraph checkpoints, its schedules to read) and nothing else. Two walls hold it, and both are needed:
//!
//! * this table, consulted before a handler runs: a route marked [`Reach::Forbidden`] answers 403
//!   for an agent key whatever it names (lists across agents, RPC, deployments, management), and
//!   a path outside the table (every other API family) is 403 too;
//! * the domain lookups (`agentex::agents::find`, `agentex::tasks::find`, the records' confinement),
//!   which answer another agent's object exactly as one that does not exist.
//!
//! The README's table "What an agent key may call" lists the same rows with the status each
//! answers for the agent's own object, another agent's and another workspace's; `tests/agent_keys.rs`
//! checks that table against `/openapi.json` (a route without a row fails) and against the server.

use actix_web::http::Method;

/// What an agent key gets on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Its own agent's objects; another agent's answer as missing ones.
    Own,
    /// 403, whatever the route names.
    Forbidden,
}

/// `(method, path under /agentex with {params}, reach)`.
pub const ROUTES: &[(Method, &str, Reach)] = {
    use Reach::{Forbidden, Own};
    &[
        (Method::GET, "/agents", Forbidden),
        (Method::POST, "/agents/register", Own),
        (Method::POST, "/agents/register-build", Forbidden),
        (Method::GET, "/agents/name/{agent_name}", Own),
        (Method::DELETE, "/agents/name/{agent_name}", Forbidden),
        (Method::POST, "/agents/name/{agent_name}/rpc", Forbidden),
        (Method::GET, "/agents/{agent_id}", Own),
        (Method::DELETE, "/agents/{agent_id}", Forbidden),
        (Method::POST, "/agents/{agent_id}/rpc", Forbidden),
        (Method::GET, "/agents/{agent_id}/deployments", Forbidden),
        (Method::POST, "/agents/{agent_id}/deployments", Forbidden),
        (
            Method::GET,
            "/agents/{agent_id}/deployments/{deployment_id}",
            Forbidden,
        ),
        (
            Method::DELETE,
            "/agents/{agent_id}/deployments/{deployment_id}",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/deployments/{deployment_id}/promote",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/deployments/{deployment_id}/rpc",
            Forbidden,
        ),
        (Method::GET, "/agents/{agent_id}/schedules", Own),
        (Method::POST, "/agents/{agent_id}/schedules", Forbidden),
        (
            Method::GET,
            "/agents/{agent_id}/schedules/{schedule_id}",
            Own,
        ),
        (
            Method::PATCH,
            "/agents/{agent_id}/schedules/{schedule_id}",
            Forbidden,
        ),
        (
            Method::DELETE,
            "/agents/{agent_id}/schedules/{schedule_id}",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/{schedule_id}/pause",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/{schedule_id}/resume",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/{schedule_id}/trigger",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/{schedule_id}/skip",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/{schedule_id}/unskip",
            Forbidden,
        ),
        (Method::GET, "/agents/{agent_id}/schedules/name/{name}", Own),
        (
            Method::PATCH,
            "/agents/{agent_id}/schedules/name/{name}",
            Forbidden,
        ),
        (
            Method::DELETE,
            "/agents/{agent_id}/schedules/name/{name}",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/name/{name}/pause",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/name/{name}/resume",
            Forbidden,
        ),
        (
            Method::POST,
            "/agents/{agent_id}/schedules/name/{name}/trigger",
            Forbidden,
        ),
        (Method::POST, "/agent_api_keys/webhook-trigger", Forbidden),
        (Method::POST, "/checkpoints/list", Own),
        (Method::POST, "/checkpoints/get-tuple", Own),
        (Method::POST, "/checkpoints/put", Own),
        (Method::POST, "/checkpoints/put-writes", Own),
        (Method::POST, "/checkpoints/delete-thread", Own),
        (Method::GET, "/deployment-history", Forbidden),
        (
            Method::GET,
            "/deployment-history/{deployment_id}",
            Forbidden,
        ),
        (Method::GET, "/events", Own),
        (Method::GET, "/events/{event_id}", Own),
        (Method::GET, "/messages", Own),
        (Method::POST, "/messages", Own),
        (Method::GET, "/messages/paginated", Own),
        (Method::POST, "/messages/batch", Own),
        (Method::PUT, "/messages/batch", Own),
        (Method::GET, "/messages/{message_id}", Own),
        (Method::PUT, "/messages/{message_id}", Own),
        (Method::GET, "/spans", Own),
        (Method::POST, "/spans", Own),
        (Method::GET, "/spans/{span_id}", Own),
        (Method::PATCH, "/spans/{span_id}", Own),
        (Method::GET, "/states", Own),
        (Method::POST, "/states", Own),
        (Method::GET, "/states/{state_id}", Own),
        (Method::PUT, "/states/{state_id}", Own),
        (Method::DELETE, "/states/{state_id}", Own),
        (Method::GET, "/tasks", Forbidden),
        (Method::GET, "/tasks/name/{task_name}", Own),
        (Method::PUT, "/tasks/name/{task_name}", Own),
        (Method::DELETE, "/tasks/name/{task_name}", Own),
        (Method::GET, "/tasks/name/{task_name}/stream", Own),
        (Method::GET, "/tasks/{task_id}", Own),
        (Method::PUT, "/tasks/{task_id}", Own),
        (Method::DELETE, "/tasks/{task_id}", Own),
        (Method::GET, "/tasks/{task_id}/stream", Own),
        (Method::POST, "/tasks/{task_id}/interrupt", Own),
        (Method::POST, "/tasks/{task_id}/cancel", Own),
        (Method::POST, "/tasks/{task_id}/complete", Own),
        (Method::POST, "/tasks/{task_id}/fail", Own),
        (Method::POST, "/tasks/{task_id}/terminate", Own),
        (Method::POST, "/tasks/{task_id}/timeout", Own),
        (Method::GET, "/tasks/{task_id}/query/{query_name}", Own),
        (Method::GET, "/tracker", Own),
        (Method::GET, "/tracker/{tracker_id}", Own),
        (Method::PUT, "/tracker/{tracker_id}", Own),
    ]
};

/// Whether `path` (the request's, `/agentex/…`) fits `template` (a row's, under `/agentex`):
/// the same segments, a `{param}` standing for any one non-empty segment. A literal segment
/// beats a parameter, so `/agents/name/x` is not `/agents/{agent_id}/…`: rows are tried literal
/// ones first (see [`reach`]).
fn fits(template: &str, path: &str) -> bool {
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return true,
            (Some(ts), Some(ps)) => {
                let param = ts.starts_with('{') && ts.ends_with('}');
                if !(param && !ps.is_empty() || ts == ps) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// How many literal segments a template has: among the rows a path fits, the most literal one
/// is the route actix chose (`/tasks/name/{task_name}` over `/tasks/{task_id}/stream`).
fn literal_segments(template: &str) -> usize {
    template.split('/').filter(|s| !s.starts_with('{')).count()
}

/// The reach of an agent key on a request; a path outside `/agentex` or the table is
/// [`Reach::Forbidden`].
pub fn reach(method: &Method, path: &str) -> Reach {
    let Some(rest) = path.strip_prefix("/agentex") else {
        return Reach::Forbidden;
    };
    ROUTES
        .iter()
        .filter(|(m, t, _)| m == method && fits(t, rest))
        .max_by_key(|(_, t, _)| literal_segments(t))
        .map_or(Reach::Forbidden, |(_, _, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_matched_by_their_segments() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(reach(&post, "/agentex/messages"), Reach::Own);
        assert_eq!(reach(&post, "/agentex/messages/batch"), Reach::Own);
        assert_eq!(reach(&Method::PUT, "/agentex/tracker/t1"), Reach::Own);
        assert_eq!(reach(&get, "/agentex/tasks/t1"), Reach::Own);
        assert_eq!(reach(&get, "/agentex/tasks/name/x"), Reach::Own);
        assert_eq!(reach(&get, "/agentex/agents/a1"), Reach::Own);
        assert_eq!(reach(&post, "/agentex/checkpoints/put"), Reach::Own);
        assert_eq!(reach(&get, "/agentex/checkpoints/put"), Reach::Forbidden);
        assert_eq!(
            reach(&get, "/agentex/tasks/t1/query/get_status"),
            Reach::Own
        );
        assert_eq!(reach(&get, "/agentex/agents/a1/schedules"), Reach::Own);
        assert_eq!(
            reach(&post, "/agentex/agents/a1/schedules"),
            Reach::Forbidden
        );
        assert_eq!(reach(&get, "/agentex/tasks"), Reach::Forbidden);
        assert_eq!(reach(&get, "/agentex/agents"), Reach::Forbidden);
        assert_eq!(reach(&post, "/agentex/agents/a1/rpc"), Reach::Forbidden);
        assert_eq!(reach(&post, "/agentex/agents/name/a/rpc"), Reach::Forbidden);
        assert_eq!(
            reach(&Method::DELETE, "/agentex/agents/a1"),
            Reach::Forbidden
        );
        assert_eq!(
            reach(&get, "/agentex/agents/a1/deployments"),
            Reach::Forbidden
        );
        assert_eq!(reach(&get, "/v1/ws/default/sessions"), Reach::Forbidden);
        assert_eq!(reach(&get, "/agentex/tasks/"), Reach::Forbidden);
        assert_eq!(reach(&get, "/agentex/unknown"), Reach::Forbidden);
        assert_eq!(reach(&get, "/agentexx/tasks/t1"), Reach::Forbidden);
    }

    #[test]
    fn every_row_is_unique() {
        for (i, (m, t, _)) in ROUTES.iter().enumerate() {
            assert!(
                !ROUTES[i + 1..].iter().any(|(m2, t2, _)| m == m2 && t == t2),
                "{m} {t} has two rows"
            );
        }
    }
}
