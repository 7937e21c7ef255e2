//! Access management: a workspace's API keys, app keys, people and settings, as its owners see
//! them, and the workspaces a person makes.
//!
//! The HTTP routes (`/v1/ws/{ws}/keys`, `/apps`, `/people`, `/v1/workspaces`) and the CLI
//! (`sessiond token|app|user|workspace ...`) both come through here, so that a key is minted,
//! listed and revoked one way whichever door it came in by.

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
        "expiresAt": k.expires_at.map(crate::clock::rfc3339),
        "expired": k.expired(crate::clock::now_ms()),
        "revoked": k.revoked,
    })
}

/// The keys of one workspace, oldest first.
pub async fn list_keys(store: &Store, workspace_id: &str) -> Result<Vec<KeyRow>> {
    let ws = workspace_id.to_owned();
    let all = store.identity().keys().await?;
    Ok(all.into_iter().filter(|k| k.workspace_id == ws).collect())
}

/// Parses a key's expiry as a client gives it (RFC 3339, UTC when it has no offset): ms since the
/// epoch, which must lie in the future.
pub fn parse_expiry(text: &str) -> Result<i64> {
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;
    let parsed = OffsetDateTime::parse(text, &Rfc3339)
        .or_else(|_| OffsetDateTime::parse(&format!("{text}Z"), &Rfc3339))
        .map_err(|_| Error::invalid("expiresAt: an RFC 3339 date-time (2030-01-31T00:00:00Z)"))?;
    let ms = i64::try_from(parsed.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| Error::invalid("expiresAt: out of range"))?;
    if ms <= crate::clock::now_ms() {
        return Err(Error::invalid("expiresAt: must be in the future"));
    }
    Ok(ms)
}

/// A key's name and scopes checked: the name trimmed, the scopes in their short form.
fn key_spec(name: &str, scopes: &[String], workspace_slug: &str) -> Result<(String, Vec<String>)> {
    let name = name.trim();
    if name.is_empty() || name.len() > 200 {
        return Err(Error::invalid("name: 1 to 200 characters"));
    }
    if scopes.is_empty() {
        return Err(Error::invalid("scopes: at least one scope"));
    }
    let mut out = Vec::new();
    for s in scopes {
        let cap = auth::parse_scope(s, workspace_slug)?;
        if !out.contains(&cap) {
            out.push(cap);
        }
    }
    Ok((name.to_owned(), out))
}

/// Mints a personal key for `user_id` in `workspace_id` (`workspace_slug` to check the scopes
/// against), ending by itself at `expires_at` (ms) if given; the key text is returned once and
/// only its hash is stored.
pub async fn create_user_key(
    store: &Store,
    user_id: &str,
    workspace_id: &str,
    workspace_slug: &str,
    name: &str,
    scopes: &[String],
    expires_at: Option<i64>,
) -> Result<auth::NewKey> {
    let (name, scopes) = key_spec(name, scopes, workspace_slug)?;
    let (key, row) = auth::mint_key(&name, workspace_id, &scopes, expires_at)?;
    store.identity().insert_user_key(user_id, row).await?;
    Ok(key)
}

/// Registers an app named `name` in the workspace with its first key (the app's requests author
/// as `{kind:"app"}`); the key text is returned once.
pub async fn create_app_key(
    store: &Store,
    workspace_id: &str,
    workspace_slug: &str,
    name: &str,
    scopes: &[String],
    expires_at: Option<i64>,
) -> Result<auth::NewKey> {
    let (name, scopes) = key_spec(name, scopes, workspace_slug)?;
    let (key, row) = auth::mint_key(&format!("app {name}"), workspace_id, &scopes, expires_at)?;
    store.access().insert_app_with_key(&name, row).await?;
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

/// An email address as accounts keep it (trimmed, lower case), or 400.
pub fn check_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let ok = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(a, d)| !a.is_empty() && d.contains('.'))
        && !email.chars().any(|c| c.is_control() || c.is_whitespace());
    if ok {
        Ok(email)
    } else {
        Err(Error::invalid("email: not an email address"))
    }
}

/// `owner` or `member`, or 400.
pub fn parse_role(role: &str) -> Result<Role> {
    Role::parse(role).ok_or_else(|| Error::invalid("role: owner or member"))
}

/// Makes `email` a member of the workspace; a person without an account gets one without a
/// password (they choose it through a reset link). The person as listed, with `created`.
pub async fn add_person(
    store: &Store,
    workspace_id: &str,
    email: &str,
    role: &str,
) -> Result<Value> {
    let email = check_email(email)?;
    let role = parse_role(role)?;
    let (id, created) = store
        .access()
        .add_member(workspace_id, &email, role)
        .await?;
    Ok(json!({ "userId": id, "email": email, "role": role.name(), "created": created }))
}

/// Changes a member's role (404 for someone who is not one; 409 `last_owner`).
pub async fn set_role(store: &Store, workspace_id: &str, user_id: &str, role: &str) -> Result<()> {
    let role = parse_role(role)?;
    Ok(store.access().set_role(workspace_id, user_id, role).await?)
}

/// Removes a member: their keys of the workspace are revoked and refused at once, their browser
/// requests to it answer 404 from the next one on (409 `last_owner` for the last owner).
pub async fn remove_person(
    store: &Store,
    auth: &Auth,
    workspace_id: &str,
    user_id: &str,
) -> Result<()> {
    for key in store.access().remove_member(workspace_id, user_id).await? {
        auth.forget_key(&key);
    }
    Ok(())
}

/// How long a password-reset link works.
pub const RESET_LINK_MS: i64 = 24 * 60 * 60 * 1000;

/// Makes a one-time link for a member of `workspace_id` to choose a new password: the token
/// (returned once, only its hash kept) and when it expires. An owner may hand one only to a
/// person whose every workspace they own, so that no owner takes over an account that reaches
/// further than their own workspaces.
pub async fn password_reset(store: &Store, actor: &Actor, user_id: &str) -> Result<(String, i64)> {
    let mine = store.identity().memberships(&actor.user_id).await?;
    let theirs = store.identity().memberships(user_id).await?;
    if !theirs.iter().any(|(ws, _, _)| *ws == actor.workspace_id) {
        return Err(Error::NotFound);
    }
    let owned = |ws: &str| {
        mine.iter()
            .any(|(w, _, role)| w == ws && Role::parse(role) == Some(Role::Owner))
    };
    if let Some((_, slug, _)) = theirs.iter().find(|(ws, _, _)| !owned(ws)) {
        return Err(Error::Forbidden(format!(
            "this person also belongs to workspace {slug}, which you do not own"
        )));
    }
    let token = crate::secret::random_token(32)?;
    let expires = crate::clock::now_ms().saturating_add(RESET_LINK_MS);
    store
        .access()
        .add_password_reset(
            &crate::secret::token_hash(&token),
            user_id,
            &actor.user_id,
            expires,
        )
        .await?;
    Ok((token, expires))
}

/// Sets a password with a reset link's token; 403 when the link is unknown, used or expired.
/// The person's browser sessions end, and every other link of theirs is used up.
pub async fn complete_password_reset(store: &Store, token: &str, password: &str) -> Result<()> {
    auth::password::check_strength(password)?;
    let hash = crate::secret::token_hash(token);
    let pw = password.to_owned();
    // Hashing takes a while by design: off the async workers.
    let phc = tokio::task::spawn_blocking(move || auth::password::hash(&pw))
        .await
        .map_err(|e| Error::Internal(format!("password hashing stopped: {e}")))??;
    match store.access().use_password_reset(&hash, &phc).await? {
        Some(_) => Ok(()),
        None => Err(Error::Forbidden(
            "this password link is not valid: it was used already or has expired; ask an owner \
             for a new one"
                .into(),
        )),
    }
}

/// A workspace slug as URLs carry it: 1 to 63 characters of a-z, 0-9 and '-'.
pub fn check_slug(slug: &str) -> Result<()> {
    let ok = !slug.is_empty()
        && slug.len() <= 63
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "slug: 1 to 63 characters of a-z, 0-9 and '-'",
        ))
    }
}

/// A workspace's display name: 1 to 200 characters once trimmed.
pub fn check_workspace_name(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || name.chars().any(char::is_control) {
        return Err(Error::invalid("name: 1 to 200 characters"));
    }
    Ok(name.to_owned())
}

/// Creates a workspace with its drive folder and makes `user_id` its owner. Only a person who
/// owns a workspace already may (members 403), so that joining one does not let anyone make more.
pub async fn create_workspace(
    store: &Store,
    data_dir: &std::path::Path,
    user_id: &str,
    slug: &str,
    name: Option<&str>,
) -> Result<Value> {
    let owns_one = store
        .identity()
        .memberships(user_id)
        .await?
        .iter()
        .any(|(_, _, role)| Role::parse(role) == Some(Role::Owner));
    if !owns_one {
        return Err(Error::Forbidden(
            "only an owner of a workspace creates workspaces".into(),
        ));
    }
    check_slug(slug)?;
    let name = check_workspace_name(name.unwrap_or(slug))?;
    crate::drive::Drive::root_for(data_dir, slug).ensure()?;
    store
        .access()
        .create_workspace(slug, &name, user_id)
        .await?;
    Ok(json!({ "slug": slug, "name": name, "role": Role::Owner.name() }))
}

/// A workspace as its settings show it, with the caller's role there.
pub async fn workspace_view(store: &Store, actor: &Actor) -> Result<Value> {
    let ws = store
        .access()
        .workspace(&actor.workspace_id)
        .await?
        .ok_or(Error::NotFound)?;
    let role = match &actor.sender {
        Sender::User { user_id } => store
            .identity()
            .memberships(user_id)
            .await?
            .into_iter()
            .find(|(id, _, _)| *id == ws.id)
            .map(|(_, _, role)| role)
            .unwrap_or_else(|| "member".into()),
        _ => "app".into(),
    };
    Ok(json!({
        "slug": ws.slug,
        "name": ws.name,
        "createdAt": crate::clock::rfc3339(ws.created_at),
        "role": role,
    }))
}
