//! The request context: which workspace, and who is acting.
//!
//! Every Sessions API handler takes an [`Actor`]; the extractor below is the single place where a
//! request becomes a principal. Until accounts exist, requests from loopback act as the local
//! user of the workspace named in the path; anything else is refused.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, RwLock};

use actix_web::{FromRequest, HttpRequest, dev::Payload, web};

use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store;
use crate::timeline::Sender;

/// The user every loopback request acts as until accounts exist.
pub const LOCAL_USER: &str = "local";

/// Shared state of the HTTP layer.
pub struct AppState {
    pub sessions: Sessions,
    workspaces: RwLock<HashMap<String, Arc<str>>>,
    base_url: OnceLock<String>,
}

impl AppState {
    pub fn new(sessions: Sessions) -> AppState {
        AppState {
            sessions,
            workspaces: RwLock::new(HashMap::new()),
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

    /// Workspace id by slug; cached, since slugs never move.
    async fn workspace_id(&self, slug: &str) -> Result<Arc<str>> {
        if let Some(id) = self
            .workspaces
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(slug)
        {
            return Ok(Arc::clone(id));
        }
        if slug.len() > 64 {
            return Err(Error::NotFound);
        }
        let s = slug.to_owned();
        let row = self
            .sessions
            .store()
            .read(move |c| store::workspace_by_slug(c, &s))
            .await?
            .ok_or(Error::NotFound)?;
        let id: Arc<str> = Arc::from(row.id);
        self.workspaces
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(row.slug, Arc::clone(&id));
        Ok(id)
    }
}

impl FromRequest for Actor {
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Actor>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let state = req
                .app_data::<web::Data<AppState>>()
                .ok_or_else(|| Error::Internal("app state missing".into()))?
                .clone();
            let loopback = req
                .peer_addr()
                .map(|a| a.ip().is_loopback())
                .unwrap_or(false);
            if !loopback {
                return Err(Error::Unauthorized);
            }
            let slug = req.match_info().get("workspaceSlug").unwrap_or_default();
            let workspace_id = state.workspace_id(slug).await?;
            Ok(Actor {
                workspace_id: workspace_id.to_string(),
                workspace_slug: slug.to_owned(),
                user_id: LOCAL_USER.to_owned(),
                sender: Sender::User {
                    user_id: LOCAL_USER.to_owned(),
                },
            })
        })
    }
}
