use actix_web::{HttpResponse, web};

use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub async fn by_id(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    super::agent_by_id(&state, &actor, &path).await?;
    Err(crate::Error::NotImplemented("rpc".into()))
}

pub async fn by_name(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    super::agent_by_name(&state, &actor, &path).await?;
    Err(crate::Error::NotImplemented("rpc".into()))
}
