//! Identity and access: who a request is, and what it may touch.
//!
//! Credentials, each mapped to the sender it authors as (R5, R6):
//! * browser session cookie (after login with email + password) → `{kind:"user"}`;
//! * personal API key (`Authorization: Bearer sk_…`) → `{kind:"user"}`;
//! * app key → `{kind:"app"}`;
//! * the runner's own system principal → `{kind:"system"}`.
//!
//! Authorisation is per workspace and capability: a workspace the credential cannot see answers
//! 404 (never 403, so existence does not leak); a visible workspace without the capability answers
//! 403. API keys are random 256-bit secrets stored as SHA-256 hashes. Verified keys are cached so
//! that checking a key does not dominate a request: the cache is keyed by a digest of the whole
//! key made with a secret chosen at start (two keyed SipHash-1-3 values, 128 bits), so a request
//! with a cached key costs one short hash and one lock, and neither the key nor anything an
//! outsider could match against it is kept in memory. An entry is trusted for [`KEY_CACHE_TTL`],
//! then its row is read again.
//!
//! Nothing here that must hold across processes lives in this process's memory. Several sessiond
//! processes of one database agree on every credential, on the sign-in throttle's counts
//! ([`limiter`]) and on the setup tokens, because those are rows; what this process keeps is a
//! cache of verified keys, bounded in time, and the list of its own open streams' credentials.
//!
//! Revocation reaches every process within [`REVOCATION_BOUND`] (1 s): a revocation made through
//! this process at once (its entries are dropped, its streams told), one made anywhere else
//! within the key cache's 100 ms for requests and within [`Auth::watch_revocations`]' 200 ms poll
//! for open event streams, which asks the database which credentials of this process's open
//! streams are still good (one query per few hundred credentials, none while no stream is open)
//! and tells the streams of the others through [`Auth::revocations`]. Signing out ends the browser
//! session's streams the same way, and a browser session's streams end when it expires
//! ([`Auth::expires_at`]).

pub mod limiter;
pub mod password;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::clock;
use crate::config;
use crate::error::{Error, Result};
use crate::secret;
use crate::sessions::{Actor, Channel};
use crate::store::Store;
use crate::store::identity::{self, KeyRow};
use crate::timeline::Sender;

/// Name of the browser session cookie.
pub const COOKIE: &str = "sessiond_session";
/// How soon a credential revoked anywhere (by this process, another process of the database or
/// the CLI) stops working on every process, open event streams included. Requests with an API key
/// are refused within [`KEY_CACHE_TTL`] and one read (browser sessions are read on every request,
/// so at once); streams end within [`REVOCATION_POLL`] and one query. A second leaves those four
/// to five times their usual time on a loaded database, and is sooner than a person who revoked a
/// leaked key can look at what it still reaches.
pub const REVOCATION_BOUND: Duration = Duration::from_secs(1);
/// How long a verified key is trusted without looking at the database again (a revocation made by
/// another process takes effect within this time; one made through this server at once).
pub const KEY_CACHE_TTL: Duration = Duration::from_millis(100);
/// How often [`Auth::watch_revocations`] asks the database about the credentials of this
/// process's open streams.
const REVOCATION_POLL: Duration = Duration::from_millis(200);
/// `last_used_at` is written at most this often per key.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Verified keys remembered at most; past this the cache starts over.
const KEY_CACHE_MAX: usize = 10_000;
/// Setup tokens kept while no user exists (one per start of any process): a link stays valid
/// until this many newer ones were printed, or the owner is created.
pub const SETUP_TOKENS_KEPT: usize = 10;

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// Read sessions and stream their events (`sessions` or `sessions:read`).
    SessionsRead,
    /// Everything else on the Sessions API (`sessions`).
    Sessions,
    /// Mint upload grants (`files:write`).
    FilesWrite,
}

/// Capabilities a key can carry.
pub const SCOPES: [&str; 3] = ["sessions", "sessions:read", "files:write"];

/// Accepts `sessions` or the qualified `ws:<slug>:sessions` form (the slug must be the key's).
pub fn parse_scope(scope: &str, workspace_slug: &str) -> Result<String> {
    let cap = match scope.strip_prefix("ws:") {
        Some(rest) => {
            let (slug, cap) = rest.split_once(':').ok_or_else(|| {
                Error::invalid(format!("scope {scope}: expected ws:<slug>:<capability>"))
            })?;
            if slug != workspace_slug {
                return Err(Error::invalid(format!(
                    "scope {scope}: names another workspace"
                )));
            }
            cap
        }
        None => scope,
    };
    if !SCOPES.contains(&cap) {
        return Err(Error::invalid(format!(
            "scope {scope}: must be one of {}",
            SCOPES.join(", ")
        )));
    }
    Ok(cap.to_owned())
}

fn grants(scopes: &[String], cap: Capability) -> bool {
    let has = |s: &str| scopes.iter().any(|x| x == s);
    match cap {
        Capability::Sessions => has("sessions"),
        Capability::SessionsRead => has("sessions") || has("sessions:read"),
        Capability::FilesWrite => has("files:write"),
    }
}

/// Who is calling.
#[derive(Debug, Clone)]
pub enum Principal {
    /// A person through a browser session: member of any number of workspaces.
    Browser { user_id: String },
    /// An API key (personal or app), bound to one workspace and its scopes.
    Key(Arc<KeyRow>),
}

/// A key that was verified against its stored hash.
struct CachedKey {
    row: Arc<KeyRow>,
    fetched: Instant,
    touched: Option<Instant>,
}

/// The cache's name for a whole key text: 128 bits of SipHash-1-3 under two secret keys drawn at
/// start. Without those keys nobody can make a text with a given digest, so a hit means the very
/// key that was verified; and the digest is useless to anyone who reads memory for secrets.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct KeyDigest(u64, u64);

struct KeyDigester(RandomState, RandomState);

#[derive(Default)]
struct KeyCache {
    keys: HashMap<KeyDigest, CachedKey>,
    /// Counts revocations: a row read before one is not cached after it.
    revocations: u64,
}

impl KeyDigester {
    fn new() -> KeyDigester {
        KeyDigester(RandomState::new(), RandomState::new())
    }

    fn digest(&self, key: &str) -> KeyDigest {
        KeyDigest(self.0.hash_one(key), self.1.hash_one(key))
    }
}

/// A credential that stopped being valid, for the streams opened with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoked {
    /// An API key, by its public id.
    Key(String),
    /// A browser session, by the hash of its cookie.
    Browser(String),
}

/// What an open stream was authorised with, to end it when that is revoked or expires.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StreamCredential {
    /// An API key, by its public id.
    Key(String),
    /// A browser session, by the hash of its cookie.
    Browser(String),
    None,
}

impl StreamCredential {
    pub fn is_revoked_by(&self, r: &Revoked) -> bool {
        match (self, r) {
            (StreamCredential::Key(a), Revoked::Key(b)) => a == b,
            (StreamCredential::Browser(a), Revoked::Browser(b)) => a == b,
            _ => false,
        }
    }
}

/// How many of this process's open event streams hold each credential: what
/// [`Auth::watch_revocations`] asks the database about.
#[derive(Default)]
struct OpenStreams(Mutex<HashMap<StreamCredential, usize>>);

impl OpenStreams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<StreamCredential, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An open stream's place on the list of credentials the revocation watcher checks; dropped with
/// the stream.
pub struct StreamHold {
    streams: Arc<OpenStreams>,
    credential: StreamCredential,
}

impl Drop for StreamHold {
    fn drop(&mut self) {
        let mut held = self.streams.lock();
        if let Some(n) = held.get_mut(&self.credential) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.credential);
            }
        }
    }
}

pub struct Auth {
    store: Store,
    keys: Mutex<KeyCache>,
    digester: KeyDigester,
    revoked: broadcast::Sender<Revoked>,
    pub logins: limiter::LoginLimiter,
    /// How long a browser session lasts (`limits.browser_session_ms`).
    session_ms: i64,
    /// The credentials this process's open event streams were opened with.
    streams: Arc<OpenStreams>,
}

/// A freshly made key: shown once, never stored.
pub struct NewKey {
    pub id: String,
    pub key: String,
}

/// `sk_<24 hex id>_<secret>`.
fn split_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("sk_")?;
    let (id, secret) = (rest.get(..24)?, rest.get(24..)?.strip_prefix('_')?);
    (id.bytes().all(|b| b.is_ascii_hexdigit()) && !secret.is_empty()).then_some((id, secret))
}

/// Makes a new key: the text shown once (never stored) and the row that records it (the
/// secret's hash only). `expires_at` (ms since the epoch) ends it by itself; `None`: never.
pub fn mint_key(
    name: &str,
    workspace_id: &str,
    scopes: &[String],
    expires_at: Option<i64>,
) -> Result<(NewKey, identity::NewKeyRow)> {
    let mut id = [0u8; 12];
    getrandom::fill(&mut id).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    let id = crate::secret::hex(&id);
    let secret = secret::random_token(32)?;
    let row = identity::NewKeyRow {
        id: id.clone(),
        secret_hash: secret::token_hash(&secret),
        name: name.to_owned(),
        workspace_id: workspace_id.to_owned(),
        scopes: scopes.to_vec(),
        expires_at,
    };
    Ok((
        NewKey {
            key: format!("sk_{id}_{secret}"),
            id,
        },
        row,
    ))
}

impl Auth {
    /// Browser sessions last [`config::DEFAULT_BROWSER_SESSION_MS`] unless
    /// [`Auth::with_browser_session_ms`] says otherwise.
    pub fn new(store: Store) -> Auth {
        Auth {
            keys: Mutex::new(KeyCache::default()),
            digester: KeyDigester::new(),
            revoked: broadcast::channel(256).0,
            logins: limiter::LoginLimiter::new(store.clone()),
            session_ms: config::DEFAULT_BROWSER_SESSION_MS as i64,
            streams: Arc::default(),
            store,
        }
    }

    /// Sets the failed-login limiter's first delay (`limits.login_delay_ms`).
    pub fn with_login_delay_ms(mut self, ms: u64) -> Auth {
        self.logins =
            limiter::LoginLimiter::with_base_delay(self.store.clone(), Duration::from_millis(ms));
        self
    }

    /// Sets how long a browser session lasts (`limits.browser_session_ms`).
    pub fn with_browser_session_ms(mut self, ms: u64) -> Auth {
        self.session_ms = i64::try_from(ms).unwrap_or(i64::MAX);
        self
    }

    /// How long a browser session lasts, in ms.
    pub fn session_ms(&self) -> i64 {
        self.session_ms
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Makes a one-time setup token when no user exists yet; returns it to be printed. Only its
    /// hash is kept, in the database, beside those of earlier starts and of the other processes
    /// (the [`SETUP_TOKENS_KEPT`] newest), so every printed link works on every process until
    /// the first owner is created with one of them.
    pub fn prepare_setup(&self) -> Result<Option<String>> {
        // Read first: a server with an account (the usual start) writes nothing here, so it
        // starts on a full disk too.
        if self.store.identity().user_count_blocking()? > 0 {
            return Ok(None);
        }
        let token = secret::random_token(24)?;
        let added = self
            .store
            .logins()
            .add_setup_token_blocking(&secret::token_hash(&token), SETUP_TOKENS_KEPT)?;
        Ok(added.then_some(token))
    }

    /// Whether `token` is a setup token that can still be used (checked before the password is
    /// hashed; [`Auth::complete_setup`] decides).
    pub async fn setup_token_known(&self, token: &str) -> Result<bool> {
        Ok(self
            .store
            .logins()
            .setup_token_known(&secret::token_hash(token))
            .await?)
    }

    /// Creates the first owner with setup token `token`, which (with every other setup token)
    /// is used up in the same transaction: of concurrent setups, on any processes, one creates
    /// the owner. `None` when the token is not one.
    pub async fn complete_setup(
        &self,
        token: &str,
        email: &str,
        password_hash: &str,
    ) -> Result<Option<String>> {
        Ok(self
            .store
            .logins()
            .complete_setup(&secret::token_hash(token), email, password_hash)
            .await?)
    }

    /// Whether first-run setup is open (no user, a setup token to create one with).
    pub async fn setup_pending(&self) -> Result<bool> {
        Ok(self.store.logins().setup_open().await?)
    }

    /// Verifies an API key; 401 for anything but a live key. A key verified less than
    /// [`KEY_CACHE_TTL`] ago costs one short keyed hash and one lock; otherwise its row is read
    /// and its secret checked against the stored SHA-256.
    pub async fn key(&self, key: &str) -> Result<Arc<KeyRow>> {
        let digest = self.digester.digest(key);
        let (cached, revocations) = {
            let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            let cached = cache
                .keys
                .get_mut(&digest)
                .filter(|c| c.fetched.elapsed() < KEY_CACHE_TTL)
                .map(|c| (Arc::clone(&c.row), Self::due_for_touch(c)));
            (cached, cache.revocations)
        };
        if let Some((row, touch)) = cached {
            // An expired key is refused at once, whatever the cache says.
            if row.expired(clock::now_ms()) {
                return Err(Error::Unauthorized);
            }
            if touch {
                self.touch(&row.id);
            }
            return Ok(row);
        }
        let (id, secret) = split_key(key).ok_or(Error::Unauthorized)?;
        let row = self
            .store
            .identity()
            .key_by_id(id)
            .await?
            .ok_or(Error::Unauthorized)?;
        let hash = secret::token_hash(secret);
        if !secret::constant_time_eq(row.secret_hash.as_bytes(), hash.as_bytes())
            || row.revoked
            || !row.member
            || row.expired(clock::now_ms())
        {
            // Whatever was cached under this text is no longer good.
            self.keys
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys
                .remove(&digest);
            return Err(Error::Unauthorized);
        }
        let row = Arc::new(row);
        let touch = {
            let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            if cache.revocations != revocations {
                // A key was revoked while this row was read: it may be this one, so answer from
                // the row (revoked after the read began) but do not remember it.
                return Ok(row);
            }
            let keys = &mut cache.keys;
            if keys.len() >= KEY_CACHE_MAX && !keys.contains_key(&digest) {
                keys.clear();
            }
            let entry = keys.entry(digest).or_insert_with(|| CachedKey {
                row: Arc::clone(&row),
                fetched: Instant::now(),
                touched: None,
            });
            entry.row = Arc::clone(&row);
            entry.fetched = Instant::now();
            Self::due_for_touch(entry)
        };
        if touch {
            self.touch(&row.id);
        }
        Ok(row)
    }

    /// Whether the key's last use is due to be recorded (at most once a minute); marks it so.
    fn due_for_touch(c: &mut CachedKey) -> bool {
        if c.touched.is_none_or(|t| t.elapsed() >= TOUCH_EVERY) {
            c.touched = Some(Instant::now());
            return true;
        }
        false
    }

    /// Records the key's last use.
    fn touch(&self, id: &str) {
        let store = self.store.clone();
        let id = id.to_owned();
        let now = clock::now_ms();
        tokio::spawn(async move {
            let _ = store.identity().touch_key(&id, now).await;
        });
    }

    /// Forgets a key at once and ends the streams opened with it (after a revocation).
    pub fn forget_key(&self, id: &str) {
        {
            let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            cache.revocations += 1;
            cache.keys.retain(|_, c| c.row.id != id);
        }
        let _ = self.revoked.send(Revoked::Key(id.to_owned()));
    }

    /// Credentials revoked from now on (a stream that lags re-checks its own credential).
    pub fn revocations(&self) -> broadcast::Receiver<Revoked> {
        self.revoked.subscribe()
    }

    /// Whether a stream's credential is still good (after its revocation feed lagged).
    pub async fn still_valid(&self, cred: &StreamCredential) -> bool {
        match cred {
            StreamCredential::Key(id) => {
                matches!(
                    self.store.identity().key_by_id(id).await,
                    Ok(Some(k)) if !k.revoked && k.member && !k.expired(clock::now_ms())
                )
            }
            StreamCredential::Browser(hash) => {
                matches!(
                    self.store.identity().browser_session(hash).await,
                    Ok(Some((_, expires))) if expires >= clock::now_ms()
                )
            }
            StreamCredential::None => true,
        }
    }

    /// Puts a stream's credential on the list [`Auth::watch_revocations`] checks, for as long
    /// as the hold lives (`None` for a stream without one).
    pub fn hold_stream(&self, credential: &StreamCredential) -> Option<StreamHold> {
        if *credential == StreamCredential::None {
            return None;
        }
        *self.streams.lock().entry(credential.clone()).or_insert(0) += 1;
        Some(StreamHold {
            streams: Arc::clone(&self.streams),
            credential: credential.clone(),
        })
    }

    /// Ends the streams whose credential stopped being valid anywhere: a key revoked by another
    /// process or the CLI, or whose user left its workspace; a browser session signed out on
    /// another process. Every [`REVOCATION_POLL`] it asks the database which credentials of this
    /// process's open streams are still good (no query while none is open) and forgets the
    /// others, which ends their streams. Asking about the state, rather than reading a log of
    /// revocations since a time, needs no agreement between the processes' clocks and misses
    /// nothing committed late. Runs until the server stops.
    pub async fn watch_revocations(&self) {
        loop {
            tokio::time::sleep(REVOCATION_POLL).await;
            let (mut keys, mut browsers) = (Vec::new(), Vec::new());
            for cred in self.streams.lock().keys() {
                match cred {
                    StreamCredential::Key(id) => keys.push(id.clone()),
                    StreamCredential::Browser(hash) => browsers.push(hash.clone()),
                    StreamCredential::None => {}
                }
            }
            if keys.is_empty() && browsers.is_empty() {
                continue;
            }
            let valid = self
                .store
                .identity()
                .valid_credentials(keys.clone(), browsers.clone(), clock::now_ms())
                .await;
            // Unreadable now: the streams stay until the database answers again.
            let Ok((valid_keys, valid_browsers)) = valid else {
                continue;
            };
            for id in keys.iter().filter(|id| !valid_keys.contains(*id)) {
                self.forget_key(id);
            }
            for hash in browsers.iter().filter(|h| !valid_browsers.contains(*h)) {
                let _ = self.revoked.send(Revoked::Browser(hash.clone()));
            }
        }
    }

    /// The user behind a browser session cookie; 401 when unknown or expired.
    pub async fn cookie(&self, cookie: &str) -> Result<String> {
        Ok(self.live_browser_session(cookie).await?.0)
    }

    /// When a stream's credential stops being valid by itself (ms since the epoch): a browser
    /// session's expiry, or an API key's when it has one. A browser session that is gone already
    /// expires now.
    pub async fn expires_at(&self, cred: &StreamCredential) -> Option<i64> {
        let hash = match cred {
            StreamCredential::Browser(hash) => hash,
            StreamCredential::Key(id) => {
                return match self.store.identity().key_by_id(id).await {
                    Ok(Some(k)) => k.expires_at,
                    Ok(None) => Some(clock::now_ms()),
                    Err(_) => None,
                };
            }
            StreamCredential::None => return None,
        };
        match self.store.identity().browser_session(hash).await {
            Ok(Some((_, expires_at))) => Some(expires_at),
            Ok(None) => Some(clock::now_ms()),
            // Unreadable now: the stream keeps its other ends (sign-out, revocation).
            Err(_) => None,
        }
    }

    /// The user and expiry of a browser session cookie; 401 when unknown or expired.
    async fn live_browser_session(&self, cookie: &str) -> Result<(String, i64)> {
        let hash = secret::token_hash(cookie);
        let (user_id, expires_at) = self
            .store
            .identity()
            .browser_session(&hash)
            .await?
            .ok_or(Error::Unauthorized)?;
        if expires_at < clock::now_ms() {
            return Err(Error::Unauthorized);
        }
        Ok((user_id, expires_at))
    }

    /// Opens a browser session; returns the cookie value.
    pub async fn open_browser_session(&self, user_id: &str) -> Result<String> {
        let token = secret::random_token(32)?;
        let expires = clock::now_ms().saturating_add(self.session_ms);
        self.store
            .identity()
            .open_browser_session(&secret::token_hash(&token), user_id, expires)
            .await?;
        Ok(token)
    }

    pub async fn close_browser_session(&self, cookie: &str) -> Result<()> {
        let hash = secret::token_hash(cookie);
        self.store.identity().close_browser_session(&hash).await?;
        let _ = self.revoked.send(Revoked::Browser(hash));
        Ok(())
    }

    /// Checks `principal` may use `cap` in workspace `slug` and builds the actor.
    pub async fn authorize(
        &self,
        principal: &Principal,
        slug: &str,
        cap: Capability,
    ) -> Result<Actor> {
        match principal {
            Principal::Key(k) => {
                if k.workspace_slug != slug {
                    return Err(Error::NotFound);
                }
                if !grants(&k.scopes, cap) {
                    return Err(Error::Forbidden(format!(
                        "this key lacks the {} capability for workspace {slug}",
                        match cap {
                            Capability::Sessions => "sessions",
                            Capability::SessionsRead => "sessions:read",
                            Capability::FilesWrite => "files:write",
                        }
                    )));
                }
                Ok(match (&k.user_id, &k.app_id) {
                    (_, Some(app)) => Actor {
                        workspace_id: k.workspace_id.clone(),
                        workspace_slug: k.workspace_slug.clone(),
                        user_id: app.clone(),
                        sender: Sender::App {
                            app_id: app.clone(),
                        },
                        channel: Channel::ApiKey {
                            key_id: k.id.clone(),
                        },
                    },
                    (user, None) => {
                        let user = user.clone().unwrap_or_default();
                        Actor {
                            workspace_id: k.workspace_id.clone(),
                            workspace_slug: k.workspace_slug.clone(),
                            user_id: user.clone(),
                            sender: Sender::User { user_id: user },
                            channel: Channel::ApiKey {
                                key_id: k.id.clone(),
                            },
                        }
                    }
                })
            }
            Principal::Browser { user_id } => {
                let ws = self
                    .store
                    .identity()
                    .member_workspace(user_id, slug)
                    .await?
                    .ok_or(Error::NotFound)?;
                Ok(Actor {
                    workspace_id: ws.id,
                    workspace_slug: ws.slug,
                    user_id: user_id.clone(),
                    sender: Sender::User {
                        user_id: user_id.clone(),
                    },
                    channel: Channel::Browser,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_in_both_forms() {
        assert_eq!(parse_scope("sessions", "w").unwrap(), "sessions");
        assert_eq!(parse_scope("ws:w:files:write", "w").unwrap(), "files:write");
        assert!(parse_scope("ws:other:sessions", "w").is_err());
        assert!(parse_scope("admin", "w").is_err());
        assert!(grants(&["sessions".into()], Capability::SessionsRead));
        assert!(!grants(&["sessions:read".into()], Capability::Sessions));
    }

    #[test]
    fn keys_split() {
        let k = format!("sk_{}_{}", "a".repeat(24), "se_cr-et");
        assert_eq!(
            split_key(&k),
            Some(("aaaaaaaaaaaaaaaaaaaaaaaa", "se_cr-et"))
        );
        assert_eq!(split_key("sk_short_x"), None);
        assert_eq!(split_key("Bearer"), None);
    }
}
