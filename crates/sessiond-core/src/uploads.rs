//! Direct file uploads into the drive (R36–R42).
//!
//! A credential with `files:write` mints a grant for one folder (`<cwd>/uploads`): a random
//! write-only bearer token (only its hash is stored) that expires after a short time. The upload
//! PUT accepts that token and nothing else, writes one new file into that folder tree, and never
//! replaces an existing file.

use std::io::Write;

use serde::Serialize;

use crate::clock;
use crate::drive::{self, Drive};
use crate::error::{Error, Result};
use crate::secret;
use crate::sessions::Actor;
use crate::store::Store;
use crate::store::identity::{NewUploadGrant, UploadCheck};

/// Path prefix of the upload endpoint; a grant's `uploadPath` is `/files/<grant id>`.
pub const UPLOAD_PREFIX: &str = "/files";

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    pub vm_base_url: String,
    pub upload_path: String,
    pub upload_token: String,
    pub expires_at: i64,
    pub prefix: String,
}

/// Mints a grant for `<cwd>/uploads` (the drive root's `uploads` when cwd is omitted).
pub async fn mint(
    store: &Store,
    drive: &Drive,
    actor: &Actor,
    cwd: Option<&str>,
    base_url: &str,
    ttl_ms: u64,
) -> Result<Grant> {
    let folder = match cwd {
        Some(c) => drive.check_cwd(c, "")?,
        None => String::new(),
    };
    let prefix = if folder.is_empty() {
        "uploads".to_owned()
    } else {
        format!("{folder}/uploads")
    };
    let prefix = drive.make_dir(&prefix)?;
    let token = secret::random_token(32)?;
    let id = crate::ids::new_id();
    let expires_at = clock::now_ms() + ttl_ms as i64;
    store
        .identity()
        .insert_upload_grant(NewUploadGrant {
            id: id.clone(),
            token_hash: secret::token_hash(&token),
            workspace_id: actor.workspace_id.clone(),
            prefix: prefix.clone(),
            expires_at,
        })
        .await?;
    Ok(Grant {
        vm_base_url: base_url.trim_end_matches('/').to_owned(),
        upload_path: format!("{UPLOAD_PREFIX}/{id}"),
        upload_token: token,
        expires_at,
        prefix,
    })
}

/// Where an authorised upload goes.
pub struct Target {
    pub drive: Drive,
    pub prefix: String,
}

/// Checks the bearer token against grant `grant_id`: 401 when missing, unknown or expired, 403
/// when it is a valid token for another folder.
pub async fn authorise(
    store: &Store,
    data_dir: &std::path::Path,
    grant_id: &str,
    token: Option<&str>,
) -> Result<Target> {
    let token = token.ok_or(Error::Unauthorized)?;
    let hash = secret::token_hash(token);
    let UploadCheck {
        grant,
        grant_of_token: owner_of_token,
        workspace_slug: slug,
    } = store.identity().upload_check(grant_id, &hash).await?;
    let grant = match grant {
        Some(g) if secret::constant_time_eq(g.token_hash.as_bytes(), hash.as_bytes()) => g,
        _ if owner_of_token.is_some() => {
            return Err(Error::Forbidden(
                "this upload token is for another folder".into(),
            ));
        }
        _ => return Err(Error::Unauthorized),
    };
    if grant.expires_at < clock::now_ms() {
        return Err(Error::Unauthorized);
    }
    let slug = slug.ok_or(Error::Unauthorized)?;
    Ok(Target {
        drive: Drive::root_for(data_dir, &slug),
        prefix: grant.prefix,
    })
}

/// An upload being written: a hidden temporary file in the target folder.
pub struct Upload {
    file: std::fs::File,
    tmp: std::path::PathBuf,
    folder: String,
    name: String,
    written: u64,
    limit: u64,
    drive: Drive,
}

impl Upload {
    pub fn begin(target: Target, name: &str, limit: u64) -> Result<Upload> {
        drive::check_file_name(name)?;
        let folder = target.drive.make_dir(&target.prefix)?;
        let (file, tmp) = target.drive.temp_file(&folder)?;
        Ok(Upload {
            file,
            tmp,
            folder,
            name: name.to_owned(),
            written: 0,
            limit,
            drive: target.drive,
        })
    }

    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        self.written += chunk.len() as u64;
        if self.written > self.limit {
            return Err(Error::PayloadTooLarge {
                limit: self.limit as usize,
            });
        }
        self.file
            .write_all(chunk)
            .map_err(|e| Error::from_io("cannot write upload", &e))
    }

    /// Makes the file visible under its name; fails with `exists` rather than replacing one.
    pub fn finish(self) -> Result<(String, u64)> {
        self.file
            .sync_all()
            .map_err(|e| Error::from_io("cannot write upload", &e))?;
        let path = self.drive.link_new(&self.tmp, &self.folder, &self.name)?;
        Ok((path, self.written))
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.tmp);
    }
}
