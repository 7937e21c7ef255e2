//! Access management: a workspace's API keys and its people, as its owners see them.
//!
//! The HTTP routes (`/v1/ws/{ws}/keys`) and the CLI (`sessiond token ...`) both come through
//! here, so that a key is minted, listed and revoked one way whichever door it came in by.

use serde_json::{Value, json};

use crate::auth::{self, Auth};
use crate::error::{Error, Result};
use crate::sessions::Actor;
use crate::store::Store;
use crate::store::identity::{KeyRow, Role};
use crate::timeline::Sender;

/// Refuses (403) an actor that is not an owner of its workspace: an app's key, or a person
/// whose membership there is `member`.
pub async fn require_owner(store: &Store, actor: &Actor) -> Result<()> {
    let user_id = match &actor.sender {
        Sender::User { user_id } => user_id,
        _ => {
            return Err(Error::Forbidden(
                "only a workspace owner manages access".into(),
            ));
        }
    };
    let owner = store
        .identity()
        .memberships(user_id)
        .await?
        .into_iter()
        .any(|(ws, _, role)| ws == actor.workspace_id && Role::parse(&role) == Some(Role::Owner));
    if owner {
        Ok(())
    } else {
        Err(Error::Forbidden(
            "only a workspace owner manages access".into(),
        ))
    }
}

/// A key as listed: never its secret nor the secret's hash.
pub fn key_view(k: &KeyRow) -> Value {
    json!({
        "id": k.id,
        "name": k.name,
        "kind": if k.app_id.is_some() { "app" } else { "user" },
        "userId": k.user_id,
        "appId": k.app_id,
        "workspaceSlug": k.workspace_slug,
        "scopes": k.scopes,
        "createdAt": crate::clock::rfc3339(k.created_at),
        "lastUsedAt": k.last_used_at.map(crate::clock::rfc3339),
        "revoked": k.revoked,
    })
}

/// The keys of one workspace, oldest first.
pub async fn list_keys(store: &Store, workspace_id: &str) -> Result<Vec<KeyRow>> {
    let ws = workspace_id.to_owned();
    let all = store.identity().keys().await?;
    Ok(all.into_iter().filter(|k| k.workspace_id == ws).collect())
}

/// Mints a personal key for `user_id` in `workspace_id` (`workspace_slug` to check the scopes
/// against); the key text is returned once and only its hash is stored.
pub async fn create_user_key(
    store: &Store,
    user_id: &str,
    workspace_id: &str,
    workspace_slug: &str,
    name: &str,
    scopes: &[String],
) -> Result<auth::NewKey> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(Error::invalid("name: 1 to 200 characters"));
    }
    if scopes.is_empty() {
        return Err(Error::invalid("scopes: at least one scope"));
    }
    let scopes = scopes
        .iter()
        .map(|s| auth::parse_scope(s, workspace_slug))
        .collect::<Result<Vec<_>>>()?;
    let (key, row) = auth::mint_key(name, workspace_id, &scopes)?;
    store.identity().insert_user_key(user_id, row).await?;
    Ok(key)
}

/// Revokes a key of `workspace_id`: refused at once for the next request and for the event
/// streams opened with it. 404 for a key of another workspace or none.
pub async fn revoke_key(store: &Store, auth: &Auth, workspace_id: &str, id: &str) -> Result<()> {
    let key = store
        .identity()
        .key_by_id(id)
        .await?
        .ok_or(Error::NotFound)?;
    if key.workspace_id != workspace_id {
        return Err(Error::NotFound);
    }
    if key.revoked {
        return Err(Error::Conflict(
            "revoked",
            format!("key {id} is already revoked"),
        ));
    }
    store.identity().revoke_key(id).await?;
    auth.forget_key(id);
    Ok(())
}

/// A workspace's people with their roles (never a password hash).
pub async fn list_people(store: &Store, workspace_id: &str) -> Result<Vec<Value>> {
    Ok(store
        .identity()
        .members(workspace_id)
        .await?
        .into_iter()
        .map(|(id, email, role)| json!({ "userId": id, "email": email, "role": role }))
        .collect())
}
