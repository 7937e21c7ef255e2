//! Identity rows: users, memberships, apps, API keys, browser sessions and upload grants.

use std::collections::HashSet;

use super::sql::{Db, OptionalExtension, params};

use super::Tx;
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub password_hash: String,
}

pub fn user_count(conn: &Db) -> Result<i64> {
    Ok(conn.query_row("SELECT count(*) FROM users", [], |r| r.get(0))?)
}

fn user_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<UserRow> {
    Ok(UserRow {
        id: r.get(0)?,
        email: r.get(1)?,
        password_hash: r.get(2)?,
    })
}

pub fn user_by_email(conn: &Db, email: &str) -> Result<Option<UserRow>> {
    Ok(conn
        .prepare_cached("SELECT id, email, password_hash FROM users WHERE email = ?1")?
        .query_row([email], user_from_row)
        .optional()?)
}

pub fn user_by_id(conn: &Db, id: &str) -> Result<Option<UserRow>> {
    Ok(conn
        .prepare_cached("SELECT id, email, password_hash FROM users WHERE id = ?1")?
        .query_row([id], user_from_row)
        .optional()?)
}

/// `(workspace id, slug, role)` of every workspace a user belongs to.
pub fn memberships(conn: &Db, user_id: &str) -> Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT w.id, w.slug, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
         WHERE m.user_id = ?1 ORDER BY w.slug",
    )?;
    let rows = stmt.query_map([user_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// The workspace a browser session acts in on routes without one in the path, when the request
/// names none: the oldest workspace the user owns, else the oldest they belong to.
pub fn default_workspace_slug(conn: &Db, user_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT w.slug FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
             WHERE m.user_id = ?1
             ORDER BY m.role = 'owner' DESC, w.created_at, w.slug LIMIT 1",
        )?
        .query_row([user_id], |r| r.get(0))
        .optional()?)
}

/// `(user id, email, role)` of every member of a workspace, by email.
pub fn members(conn: &Db, workspace_id: &str) -> Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT u.id, u.email, m.role FROM memberships m JOIN users u ON u.id = m.user_id
         WHERE m.workspace_id = ?1 ORDER BY u.email",
    )?;
    let rows = stmt.query_map([workspace_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

pub fn is_member(conn: &Db, user_id: &str, workspace_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM memberships WHERE user_id = ?1 AND workspace_id = ?2")?
        .exists([user_id, workspace_id])?)
}

/// An API key as verification needs it.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub id: String,
    pub secret_hash: String,
    pub name: String,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub workspace_id: String,
    pub workspace_slug: String,
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: bool,
    /// For a user key: whether the user is still a member of the key's workspace.
    pub member: bool,
    /// When the key stops working by itself (ms since the epoch); `None`: never.
    pub expires_at: Option<i64>,
}

impl KeyRow {
    /// Whether the key has expired at `now` (ms).
    pub fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

const KEY_SELECT: &str =
    "SELECT k.id, k.secret_hash, k.name, k.user_id, k.app_id, k.workspace_id, w.slug,
        k.scopes, k.created_at, k.last_used_at, k.revoked_at IS NOT NULL,
        k.user_id IS NULL OR EXISTS (SELECT 1 FROM memberships m
            WHERE m.user_id = k.user_id AND m.workspace_id = k.workspace_id),
        k.expires_at
    FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id";

fn key_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<KeyRow> {
    let scopes: String = r.get(7)?;
    Ok(KeyRow {
        id: r.get(0)?,
        secret_hash: r.get(1)?,
        name: r.get(2)?,
        user_id: r.get(3)?,
        app_id: r.get(4)?,
        workspace_id: r.get(5)?,
        workspace_slug: r.get(6)?,
        scopes: serde_json::from_str(&scopes).unwrap_or_default(),
        created_at: r.get(8)?,
        last_used_at: r.get(9)?,
        revoked: r.get(10)?,
        member: r.get(11)?,
        expires_at: r.get(12)?,
    })
}

pub fn key_by_id(conn: &Db, id: &str) -> Result<Option<KeyRow>> {
    Ok(conn
        .prepare_cached(&format!("{KEY_SELECT} WHERE k.id = ?1"))?
        .query_row([id], key_from_row)
        .optional()?)
}

/// The ids among `ids` that `sql` (a query whose last parameters are the ids, `?{first}` on,
/// written `{ids}`) selects. The ids go in chunks of one of [`ID_CHUNKS`]' sizes, each padded with
/// its last id, so that only those few statements are ever prepared whatever the number.
fn select_ids(
    conn: &Db,
    sql: &str,
    first: usize,
    fixed: &[&dyn super::sql::ToSql],
    ids: &[String],
) -> Result<HashSet<String>> {
    let mut found = HashSet::new();
    let mut rest = ids;
    while let Some(last) = rest.last() {
        let size = ID_CHUNKS
            .into_iter()
            .find(|&n| n >= rest.len())
            .unwrap_or(ID_CHUNKS[ID_CHUNKS.len() - 1]);
        let (chunk, after) = rest.split_at(size.min(rest.len()));
        let marks: Vec<String> = (first..first + size).map(|i| format!("?{i}")).collect();
        let mut stmt = conn.prepare_cached(&sql.replace("{ids}", &marks.join(", ")))?;
        let padded = chunk.iter().chain(std::iter::repeat(last)).take(size);
        let values = fixed
            .iter()
            .copied()
            .chain(padded.map(|id| id as &dyn super::sql::ToSql));
        let rows = stmt.query_map(super::sql::params_from_iter(values), |r| {
            r.get::<_, String>(0)
        })?;
        for id in rows {
            found.insert(id?);
        }
        rest = after;
    }
    Ok(found)
}

/// Sizes of the chunks [`select_ids`] asks about.
const ID_CHUNKS: [usize; 3] = [8, 64, 512];

/// Which of `keys` (ids) are live keys — not revoked, not expired, and a user key's user still a
/// member of its workspace — and which of `browsers` (cookie hashes) are browser sessions not signed out or
/// expired at `now`.
pub fn valid_credentials(
    conn: &Db,
    keys: &[String],
    browsers: &[String],
    now: i64,
) -> Result<(HashSet<String>, HashSet<String>)> {
    let keys = select_ids(
        conn,
        "SELECT k.id FROM api_keys k
         WHERE k.id IN ({ids}) AND k.revoked_at IS NULL
           AND (k.expires_at IS NULL OR k.expires_at > ?1)
           AND (k.user_id IS NULL OR EXISTS (SELECT 1 FROM memberships m
                WHERE m.user_id = k.user_id AND m.workspace_id = k.workspace_id))",
        2,
        &[&now],
        keys,
    )?;
    let browsers = select_ids(
        conn,
        "SELECT token_hash FROM browser_sessions WHERE expires_at >= ?1 AND token_hash IN ({ids})",
        2,
        &[&now],
        browsers,
    )?;
    Ok((keys, browsers))
}

pub fn keys(conn: &Db) -> Result<Vec<KeyRow>> {
    let mut stmt = conn.prepare(&format!("{KEY_SELECT} ORDER BY k.created_at"))?;
    let rows = stmt.query_map([], key_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// `(user id, expires_at)` of a browser session by the hash of its cookie.
pub fn browser_session(conn: &Db, token_hash: &str) -> Result<Option<(String, i64)>> {
    Ok(conn
        .prepare_cached("SELECT user_id, expires_at FROM browser_sessions WHERE token_hash = ?1")?
        .query_row([token_hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

impl Tx<'_> {
    pub(crate) fn insert_user(&mut self, email: &str, password_hash: &str) -> Result<String> {
        let id = crate::ids::new_id();
        let n = self.conn.execute(
            "INSERT INTO users (id, email, password_hash, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (email) DO NOTHING",
            params![id, email, password_hash, self.now],
        )?;
        if n == 0 {
            return Err(Error::Conflict(
                "user_exists",
                format!("a user with email {email} already exists"),
            ));
        }
        Ok(id)
    }

    pub(crate) fn add_membership(
        &mut self,
        user_id: &str,
        workspace_id: &str,
        role: &str,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO memberships (user_id, workspace_id, role) VALUES (?1, ?2, ?3)
             ON CONFLICT (user_id, workspace_id) DO UPDATE SET role = excluded.role",
            params![user_id, workspace_id, role],
        )?;
        Ok(())
    }

    pub(crate) fn insert_app(
        &mut self,
        workspace_id: &str,
        name: &str,
        scopes: &[String],
    ) -> Result<String> {
        let id = crate::ids::new_id();
        self.conn.execute(
            "INSERT INTO apps (id, workspace_id, name, api_scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, workspace_id, name, serde_json::to_string(scopes).unwrap_or_default(), self.now],
        )?;
        Ok(id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_key(
        &mut self,
        id: &str,
        secret_hash: &str,
        name: &str,
        user_id: Option<&str>,
        app_id: Option<&str>,
        workspace_id: &str,
        scopes: &[String],
        expires_at: Option<i64>,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO api_keys (id, secret_hash, name, user_id, app_id, workspace_id, scopes, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![id, secret_hash, name, user_id, app_id, workspace_id, serde_json::to_string(scopes).unwrap_or_default(), self.now, expires_at],
        )?;
        Ok(())
    }

    pub(crate) fn revoke_key(&mut self, id: &str) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, self.now],
        )?;
        Ok(n == 1)
    }

    pub(crate) fn touch_key(&mut self, id: &str, at: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE id = ?1")?
            .execute(params![id, at])?;
        Ok(())
    }

    pub(crate) fn insert_browser_session(
        &mut self,
        token_hash: &str,
        user_id: &str,
        expires_at: i64,
    ) -> Result<()> {
        self.conn.execute(
            "DELETE FROM browser_sessions WHERE expires_at < ?1",
            [self.now],
        )?;
        self.conn.execute(
            "INSERT INTO browser_sessions (token_hash, user_id, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![token_hash, user_id, self.now, expires_at],
        )?;
        Ok(())
    }

    pub(crate) fn delete_browser_session(&mut self, token_hash: &str) -> Result<()> {
        self.conn.execute(
            "DELETE FROM browser_sessions WHERE token_hash = ?1",
            [token_hash],
        )?;
        Ok(())
    }
}

/// An API key to record: its public id and the hash of its secret (the secret itself is never
/// stored), whom it belongs to and what it may do.
#[derive(Debug, Clone)]
pub struct NewKeyRow {
    pub id: String,
    pub secret_hash: String,
    pub name: String,
    pub workspace_id: String,
    pub scopes: Vec<String>,
    /// When it stops working by itself (ms since the epoch); `None`: never.
    pub expires_at: Option<i64>,
}

/// What a new account is made a member with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstRole {
    /// The given role, whoever came first.
    Given(Role),
    /// The first user of the database becomes its owner, later ones members.
    OwnerIfFirst,
}

/// A membership's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Owner,
    Member,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Member => "member",
        }
    }

    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "owner" => Some(Role::Owner),
            "member" => Some(Role::Member),
            _ => None,
        }
    }
}

/// An upload grant to record: the hash of its token, the folder it opens, until when.
#[derive(Debug, Clone)]
pub struct NewUploadGrant {
    pub id: String,
    pub token_hash: String,
    pub workspace_id: String,
    pub prefix: String,
    pub expires_at: i64,
}

/// What checking an upload token reads at once: the grant it names, the grant the token
/// belongs to (by its hash), and the slug of the grant's workspace.
pub struct UploadCheck {
    pub grant: Option<super::GrantRow>,
    pub grant_of_token: Option<String>,
    pub workspace_slug: Option<String>,
}

/// Identity: users, memberships, apps, API keys, browser sessions and upload grants.
#[derive(Clone, Copy)]
pub struct IdentityStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Users, memberships, keys, login state and upload grants.
    pub fn identity(&self) -> IdentityStore<'_> {
        IdentityStore { store: self }
    }
}

impl IdentityStore<'_> {
    /// How many users there are, outside an async runtime (start-up).
    pub fn user_count_blocking(&self) -> Result<i64> {
        self.store.read_blocking(user_count)
    }

    pub async fn user_by_email(&self, email: &str) -> Result<Option<UserRow>> {
        let email = email.to_owned();
        self.store.read(move |c| user_by_email(c, &email)).await
    }

    pub fn user_by_email_blocking(&self, email: &str) -> Result<Option<UserRow>> {
        self.store.read_blocking(|c| user_by_email(c, email))
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<UserRow>> {
        let id = id.to_owned();
        self.store.read(move |c| user_by_id(c, &id)).await
    }

    /// `(workspace id, slug, role)` of every workspace a user belongs to.
    pub async fn memberships(&self, user_id: &str) -> Result<Vec<(String, String, String)>> {
        let user = user_id.to_owned();
        self.store.read(move |c| memberships(c, &user)).await
    }

    /// The workspace a browser session acts in when the request names none.
    pub async fn default_workspace_slug(&self, user_id: &str) -> Result<Option<String>> {
        let user = user_id.to_owned();
        self.store
            .read(move |c| default_workspace_slug(c, &user))
            .await
    }

    pub fn is_member_blocking(&self, user_id: &str, workspace_id: &str) -> Result<bool> {
        self.store
            .read_blocking(|c| is_member(c, user_id, workspace_id))
    }

    /// The workspace `slug`, if the user belongs to it.
    pub async fn member_workspace(
        &self,
        user_id: &str,
        slug: &str,
    ) -> Result<Option<super::WorkspaceRow>> {
        let (user, slug) = (user_id.to_owned(), slug.to_owned());
        self.store
            .read(move |c| {
                let Some(ws) = super::workspace_by_slug(c, &slug)? else {
                    return Ok(None);
                };
                Ok(is_member(c, &user, &ws.id)?.then_some(ws))
            })
            .await
    }

    /// Creates a user as a member of a workspace; returns the user's id and the role given.
    pub fn create_user_blocking(
        &self,
        email: &str,
        password_hash: &str,
        workspace_id: &str,
        role: FirstRole,
    ) -> Result<(String, Role)> {
        let (email, phc, ws) = (
            email.to_owned(),
            password_hash.to_owned(),
            workspace_id.to_owned(),
        );
        self.store.write_blocking(move |tx| {
            let role = match role {
                FirstRole::Given(role) => role,
                FirstRole::OwnerIfFirst if user_count(tx.conn)? == 0 => Role::Owner,
                FirstRole::OwnerIfFirst => Role::Member,
            };
            let id = tx.insert_user(&email, &phc)?;
            tx.add_membership(&id, &ws, role.name())?;
            Ok((id, role))
        })
    }

    pub async fn key_by_id(&self, id: &str) -> Result<Option<KeyRow>> {
        let id = id.to_owned();
        self.store.read(move |c| key_by_id(c, &id)).await
    }

    /// Which of these API keys (ids) and browser sessions (cookie hashes) are still good at
    /// `now`: `(keys, browser sessions)`.
    pub async fn valid_credentials(
        &self,
        keys: Vec<String>,
        browsers: Vec<String>,
        now: i64,
    ) -> Result<(HashSet<String>, HashSet<String>)> {
        self.store
            .read(move |c| valid_credentials(c, &keys, &browsers, now))
            .await
    }

    /// `(user id, email, role)` of a workspace's members.
    pub async fn members(&self, workspace_id: &str) -> Result<Vec<(String, String, String)>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| members(c, &ws)).await
    }

    /// Every key, oldest first (the HTTP listing filters them by workspace).
    pub async fn keys(&self) -> Result<Vec<KeyRow>> {
        self.store.read(keys).await
    }

    /// [`IdentityStore::insert_user_key_blocking`] from async code.
    pub async fn insert_user_key(&self, user_id: &str, key: NewKeyRow) -> Result<()> {
        let user = user_id.to_owned();
        self.store
            .write(move |tx| {
                tx.insert_key(
                    &key.id,
                    &key.secret_hash,
                    &key.name,
                    Some(&user),
                    None,
                    &key.workspace_id,
                    &key.scopes,
                    key.expires_at,
                )
            })
            .await
    }

    /// [`IdentityStore::revoke_key_blocking`] from async code.
    pub async fn revoke_key(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.store.write(move |tx| tx.revoke_key(&id)).await
    }

    pub fn keys_blocking(&self) -> Result<Vec<KeyRow>> {
        self.store.read_blocking(keys)
    }

    /// Records a user's API key.
    pub fn insert_user_key_blocking(&self, user_id: &str, key: NewKeyRow) -> Result<()> {
        let user = user_id.to_owned();
        self.store.write_blocking(move |tx| {
            tx.insert_key(
                &key.id,
                &key.secret_hash,
                &key.name,
                Some(&user),
                None,
                &key.workspace_id,
                &key.scopes,
                key.expires_at,
            )
        })
    }

    /// Creates an app with its first key, in one transaction.
    pub fn insert_app_with_key_blocking(&self, app_name: &str, key: NewKeyRow) -> Result<()> {
        let name = app_name.to_owned();
        self.store.write_blocking(move |tx| {
            let app = tx.insert_app(&key.workspace_id, &name, &key.scopes)?;
            tx.insert_key(
                &key.id,
                &key.secret_hash,
                &key.name,
                None,
                Some(&app),
                &key.workspace_id,
                &key.scopes,
                key.expires_at,
            )
        })
    }

    /// Revokes a key; false when there is no active key by that id.
    pub fn revoke_key_blocking(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.store.write_blocking(move |tx| tx.revoke_key(&id))
    }

    /// Records a key's last use (never moving it back).
    pub async fn touch_key(&self, id: &str, at: i64) -> Result<()> {
        let id = id.to_owned();
        self.store.write(move |tx| tx.touch_key(&id, at)).await
    }

    /// `(user id, expires_at)` of a browser session by the hash of its cookie.
    pub async fn browser_session(&self, token_hash: &str) -> Result<Option<(String, i64)>> {
        let hash = token_hash.to_owned();
        self.store.read(move |c| browser_session(c, &hash)).await
    }

    pub async fn open_browser_session(
        &self,
        token_hash: &str,
        user_id: &str,
        expires_at: i64,
    ) -> Result<()> {
        let (hash, user) = (token_hash.to_owned(), user_id.to_owned());
        self.store
            .write(move |tx| tx.insert_browser_session(&hash, &user, expires_at))
            .await
    }

    pub async fn close_browser_session(&self, token_hash: &str) -> Result<()> {
        let hash = token_hash.to_owned();
        self.store
            .write(move |tx| tx.delete_browser_session(&hash))
            .await
    }

    pub async fn insert_upload_grant(&self, g: NewUploadGrant) -> Result<()> {
        self.store
            .write(move |tx| {
                tx.insert_upload_grant(
                    &g.id,
                    &g.token_hash,
                    &g.workspace_id,
                    &g.prefix,
                    g.expires_at,
                )
            })
            .await
    }

    /// What checking an upload token against grant `grant_id` needs, read together.
    pub async fn upload_check(&self, grant_id: &str, token_hash: &str) -> Result<UploadCheck> {
        let (gid, hash) = (grant_id.to_owned(), token_hash.to_owned());
        self.store
            .read(move |c| {
                let grant = super::upload_grant(c, &gid)?;
                let grant_of_token = super::upload_grant_by_hash(c, &hash)?;
                let workspace_slug = match &grant {
                    Some(g) => super::workspace_slug(c, &g.workspace_id)?,
                    None => None,
                };
                Ok(UploadCheck {
                    grant,
                    grant_of_token,
                    workspace_slug,
                })
            })
            .await
    }
}

pub struct GrantRow {
    pub token_hash: String,
    pub workspace_id: String,
    pub prefix: String,
    pub expires_at: i64,
}

pub(crate) fn upload_grant(conn: &Db, id: &str) -> Result<Option<GrantRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT token_hash, workspace_id, prefix, expires_at FROM upload_grants WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(GrantRow {
                token_hash: r.get(0)?,
                workspace_id: r.get(1)?,
                prefix: r.get(2)?,
                expires_at: r.get(3)?,
            })
        })
        .optional()?)
}

/// The id of the upload grant a token belongs to, by the token's hash.
pub(crate) fn upload_grant_by_hash(conn: &Db, token_hash: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT id FROM upload_grants WHERE token_hash = ?1")?
        .query_row([token_hash], |r| r.get(0))
        .optional()?)
}

impl Tx<'_> {
    pub(crate) fn insert_upload_grant(
        &mut self,
        id: &str,
        token_hash: &str,
        workspace_id: &str,
        prefix: &str,
        expires_at: i64,
    ) -> Result<()> {
        // Expired grants are of no use to anyone; drop them as new ones are minted.
        self.conn
            .prepare_cached("DELETE FROM upload_grants WHERE expires_at < ?1")?
            .execute([self.now - 24 * 3_600_000])?;
        self.conn
            .prepare_cached(
                "INSERT INTO upload_grants (id, token_hash, workspace_id, prefix, expires_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![id, token_hash, workspace_id, prefix, expires_at, self.now])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;
    use crate::StoreConfig;
    use crate::sink::recorder::Recorder;

    /// Any number of credentials is asked about in a few fixed-size chunks, and only live ones
    /// come back: not revoked, the key's user still a member, the session not expired.
    #[test]
    fn valid_credentials_in_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            &dir.path().join("store.db"),
            &StoreConfig::default(),
            Recorder::new(),
        )
        .unwrap();
        let (live, dead, sessions) = store
            .write_blocking(|tx| {
                let ws = tx.ensure_workspace("w", "W")?;
                let member = tx.insert_user("m@x.test", "phc")?;
                tx.add_membership(&member, &ws, "member")?;
                let outsider = tx.insert_user("o@x.test", "phc")?;
                let (mut live, mut dead) = (Vec::new(), Vec::new());
                for i in 0..600 {
                    let id = format!("{i:024}");
                    let user = if i % 7 == 0 { &outsider } else { &member };
                    tx.insert_key(&id, "h", "k", Some(user), None, &ws, &[], None)?;
                    if i % 5 == 0 {
                        tx.revoke_key(&id)?;
                    }
                    if i % 5 == 0 || i % 7 == 0 {
                        dead.push(id);
                    } else {
                        live.push(id);
                    }
                }
                for (hash, expires) in [("fresh", i64::MAX), ("old", 1)] {
                    tx.insert_browser_session(hash, &member, expires)?;
                }
                Ok((live, dead, vec!["fresh".to_owned(), "old".to_owned()]))
            })
            .unwrap();
        let asked: Vec<String> = live.iter().chain(&dead).cloned().collect();
        let (keys, browsers) = store
            .read_blocking(|c| valid_credentials(c, &asked, &sessions, 1_000))
            .unwrap();
        assert_eq!(keys, live.into_iter().collect::<HashSet<_>>());
        assert_eq!(browsers, HashSet::from(["fresh".to_owned()]));
        let (keys, browsers) = store
            .read_blocking(|c| valid_credentials(c, &[], &[], 1_000))
            .unwrap();
        assert!(keys.is_empty() && browsers.is_empty());
    }
}
