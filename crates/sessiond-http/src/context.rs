//! The request context: which workspace, and who is acting.
//!
//! Every workspace-scoped handler takes an [`Actor`]; the extractor below is the single place
//! where a request becomes a principal, is checked for the capability its route needs, and is
//! bound to a workspace: the one in the path (`/v1/ws/{workspaceSlug}/…`), or, on routes without
//! one (`/v2`, `/agentex`), the credential's own. An API key belongs to one workspace; a browser
//! session may name one of its workspaces in [`WORKSPACE_HEADER`], else acts in its default
//! (`store.identity().default_workspace_slug`).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use actix_web::http::{Method, header};
use actix_web::{FromRequest, HttpRequest, dev::Payload, web};

use crate::error::HttpError;
use sessiond_core::auth::{self, Auth, Capability, Principal};

use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::{Actor, Sessions};

/// Names the workspace a request acts in on routes without one in the path. An API key may send
/// only its own workspace's slug (any other answers 404, like a foreign workspace in a path).
pub const WORKSPACE_HEADER: &str = "x-sessiond-workspace";

/// Shared state of the HTTP layer.
pub struct AppState {
    pub sessions: Sessions,
    pub auth: Auth,
    /// The MCP sessions of this process (`/mcp`).
    pub mcp: sessiond_core::mcp::Registry,
    base_url: OnceLock<String>,
}

impl AppState {
    pub fn new(sessions: Sessions, auth: Auth) -> AppState {
        AppState {
            sessions,
            auth,
            mcp: sessiond_core::mcp::Registry::default(),
            base_url: OnceLock::new(),
        }
    }

    /// Records the address the server is reachable at (once it is bound).
    pub fn set_base_url(&self, url: String) {
        let _ = self.base_url.set(url);
    }

    /// `public_url` from the config, else `http://<bound address>`.
    pub fn base_url(&self) -> String {
        self.sessions
            .config()
            .public_url
            .clone()
            .or_else(|| self.base_url.get().cloned())
            .unwrap_or_else(|| format!("http://{}", self.sessions.config().bind))
    }
}

/// The credential of a request: an API key (`Authorization: Bearer`) or a browser session
/// cookie (whose unsafe requests must come from this server's own pages). 401 otherwise.
pub async fn credential(state: &AppState, req: &HttpRequest) -> Result<Principal> {
    if let Some(value) = req.headers().get(header::AUTHORIZATION) {
        let key = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(Error::Unauthorized)?;
        return Ok(Principal::Key(state.auth.key(key).await?));
    }
    if let Some(cookie) = req.cookie(auth::COOKIE) {
        if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
            check_same_origin(req)?;
        }
        let user_id = state.auth.cookie(cookie.value()).await?;
        return Ok(Principal::Browser { user_id });
    }
    Err(Error::Unauthorized)
}

/// Cross-site request protection for cookie-authenticated unsafe methods: the browser must say
/// the request comes from this server's own origin (`Origin`, else `Referer`) — scheme, host and
/// port. The scheme is `public_url`'s when one is configured (behind a TLS proxy: `https`), else
/// `http`; a page served over plain `http` can thus not act on an `https` deployment's cookie.
pub fn check_same_origin(req: &HttpRequest) -> Result<()> {
    let refuse = || Error::Forbidden("cross-site request refused".into());
    if req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site" || v == "same-site")
    {
        return Err(refuse());
    }
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(refuse)?;
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .or_else(|| req.headers().get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .ok_or_else(refuse)?;
    let (scheme, authority) = origin_of(origin).ok_or_else(refuse)?;
    let public = req
        .app_data::<web::Data<AppState>>()
        .and_then(|s| s.sessions.config().public_url.clone());
    let public = public.as_deref().and_then(origin_of);
    let own_scheme = public.map_or("http", |(scheme, _)| scheme);
    let same =
        |(s, a): (&str, &str)| scheme.eq_ignore_ascii_case(s) && authority.eq_ignore_ascii_case(a);
    if same((own_scheme, host)) || public.is_some_and(same) {
        Ok(())
    } else {
        Err(refuse())
    }
}

/// `(scheme, authority)` of a URL or origin (`https://host:port/path` → `("https", "host:port")`).
fn origin_of(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    (!scheme.is_empty() && !authority.is_empty()).then_some((scheme, authority))
}

/// Reads that the agent platform API sends as POST (their parameters are a JSON body).
const POSTED_READS: [&str; 2] = [
    "/agentex/checkpoints/list",
    "/agentex/checkpoints/get-tuple",
];

/// What a request needs: reads (and the POSTed reads) may use read-only keys; the upload mint
/// and writing a drive file need `files:write`.
fn capability(req: &HttpRequest) -> Capability {
    let path = req.path();
    let drive_write = path.starts_with("/v1/ws/")
        && path.ends_with("/files/content")
        && !matches!(*req.method(), Method::GET | Method::HEAD);
    if path.ends_with("/agent/sessions/attachments/session") || drive_write {
        Capability::FilesWrite
    } else if matches!(*req.method(), Method::GET | Method::HEAD)
        || POSTED_READS.contains(&req.path())
        // A2A's one JSON-RPC route: its writing methods check `sessions` themselves.
        || req.path().starts_with("/a2a/")
    {
        Capability::SessionsRead
    } else {
        Capability::Sessions
    }
}

/// The [`Actor`] of a request as handlers take it (`Caller(actor): Caller`): the core's type,
/// extracted here, where the credential is read and checked against the route's scope.
pub struct Caller(pub Actor);

impl FromRequest for Caller {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = std::result::Result<Caller, HttpError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { actor_of(&req).await.map(Caller).map_err(HttpError) })
    }
}

/// The actor a request acts as: a registered ACP server calling back with the key it was
/// issued, or the credential's principal authorised in the request's workspace.
async fn actor_of(req: &HttpRequest) -> Result<Actor> {
    let state = req
        .app_data::<web::Data<AppState>>()
        .ok_or_else(|| Error::Internal("app state missing".into()))?
        .clone();
    if let Some(actor) = super::agent_key::callback_actor(&state.sessions, req).await {
        return actor;
    }
    let principal = credential(&state, req).await?;
    let slug = workspace_of(&state, req, &principal).await?;
    state
        .auth
        .authorize(&principal, &slug, capability(req))
        .await
}

/// The slug of the workspace a request acts in: the path's, else [`WORKSPACE_HEADER`], else the
/// credential's own (a key's workspace, a browser user's default).
pub(crate) async fn workspace_of(
    state: &AppState,
    req: &HttpRequest,
    principal: &Principal,
) -> Result<String> {
    if let Some(slug) = req.match_info().get("workspaceSlug") {
        return Ok(slug.to_owned());
    }
    if let Some(value) = req.headers().get(WORKSPACE_HEADER) {
        let slug = value
            .to_str()
            .map_err(|_| Error::invalid(format!("{WORKSPACE_HEADER}: not a workspace slug")))?;
        return Ok(slug.trim().to_owned());
    }
    match principal {
        Principal::Key(k) => Ok(k.workspace_slug.clone()),
        Principal::Browser { user_id } => state
            .auth
            .store()
            .identity()
            .default_workspace_slug(user_id)
            .await?
            .ok_or(Error::NotFound),
    }
}
