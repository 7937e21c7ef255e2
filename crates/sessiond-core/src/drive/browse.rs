//! The drive browsed by people: a folder's entries, a file opened for reading, and a new file
//! written at a path, each from a path a client sent.
//!
//! Paths here are stricter than a cwd's: they are relative to the drive, and a `..` segment, a
//! backslash, a NUL or an absolute path is refused outright rather than normalised. What remains
//! is resolved on the real filesystem (symlinks followed) and must still be inside the drive; a
//! link that leads out of it is refused like `..`, and a listing leaves such links out.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;

use super::{Drive, normalise, relative, within};
use crate::error::{Error, Result};

/// At most this many entries in one listing (`truncated` says when a folder has more).
pub const LIST_MAX: usize = 1000;

/// How a file can be shown in place: as text, as markdown, or as an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preview {
    Text,
    Markdown,
    Image,
}

/// A file's type, guessed from its name, and whether it may be shown in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub mime: &'static str,
    pub preview: Option<Preview>,
}

/// The type of a file by its extension. Active types (HTML, SVG, scripts) are previewed as text
/// only, never as what they are.
pub fn guess(name: &str) -> Kind {
    use Preview::{Image, Markdown, Text};
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let (mime, preview) = match ext.as_str() {
        "md" | "markdown" => ("text/markdown", Some(Markdown)),
        "txt" | "log" | "text" | "out" | "err" => ("text/plain", Some(Text)),
        "csv" => ("text/csv", Some(Text)),
        "tsv" => ("text/tab-separated-values", Some(Text)),
        "json" | "jsonl" | "ndjson" => ("application/json", Some(Text)),
        "toml" => ("application/toml", Some(Text)),
        "yaml" | "yml" => ("application/yaml", Some(Text)),
        "xml" => ("application/xml", Some(Text)),
        "html" | "htm" => ("text/html", Some(Text)),
        "css" => ("text/css", Some(Text)),
        "js" | "mjs" | "cjs" => ("text/javascript", Some(Text)),
        "svg" => ("image/svg+xml", Some(Text)),
        "rs" | "py" | "ts" | "tsx" | "jsx" | "go" | "java" | "c" | "h" | "cpp" | "hpp" | "cc"
        | "rb" | "php" | "sh" | "bash" | "zsh" | "sql" | "ini" | "cfg" | "conf" | "env"
        | "lock" | "diff" | "patch" | "kt" | "swift" | "lua" | "pl" | "r" | "scala" | "cs" => {
            ("text/plain", Some(Text))
        }
        "png" => ("image/png", Some(Image)),
        "jpg" | "jpeg" => ("image/jpeg", Some(Image)),
        "gif" => ("image/gif", Some(Image)),
        "webp" => ("image/webp", Some(Image)),
        "avif" => ("image/avif", Some(Image)),
        "pdf" => ("application/pdf", None),
        "zip" => ("application/zip", None),
        "gz" | "tgz" => ("application/gzip", None),
        "tar" => ("application/x-tar", None),
        _ => {
            // Names without an extension that are text by convention.
            let text = matches!(
                name,
                "README" | "LICENSE" | "Makefile" | "Dockerfile" | "CHANGELOG" | "NOTICE"
            ) || name.starts_with('.');
            if text {
                ("text/plain", Some(Text))
            } else {
                ("application/octet-stream", None)
            }
        }
    };
    Kind { mime, preview }
}

/// One entry of a listing.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub name: String,
    /// Drive-relative, `/`-separated.
    pub path: String,
    /// `file` or `dir`.
    pub kind: &'static str,
    /// Bytes (files only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Epoch milliseconds of the last change.
    pub modified_at: Option<i64>,
    /// The type guessed from the name (files only).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub mime: Option<&'static str>,
    /// How the console may show it in place (files only; absent: download only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<Preview>,
}

/// A folder's entries: folders first, then files, each by name.
#[derive(Debug, Serialize)]
pub struct Listing {
    /// The folder, drive-relative (`""` for the drive root).
    pub path: String,
    pub entries: Vec<Entry>,
    /// More entries exist than [`LIST_MAX`].
    pub truncated: bool,
}

/// A file opened for reading.
#[derive(Debug)]
pub struct Opened {
    pub file: fs::File,
    pub path: String,
    pub name: String,
    pub size: u64,
    pub modified_at: Option<i64>,
    pub kind: Kind,
}

fn outside() -> Error {
    Error::invalid("path: must stay inside the workspace drive")
}

/// The drive-relative form of a client's path, refusing what could climb or hide a separator.
pub fn check_path(path: &str) -> Result<String> {
    if path.contains('\0') {
        return Err(Error::invalid("path: must not contain NUL"));
    }
    if path.contains('\\') {
        return Err(Error::invalid("path: must use '/' as its separator"));
    }
    if path.starts_with('/') {
        return Err(Error::invalid(
            "path: must be relative to the workspace drive",
        ));
    }
    if path.split('/').any(|s| s == "..") {
        return Err(Error::invalid("path: must not contain '..'"));
    }
    if path.chars().any(char::is_control) {
        return Err(Error::invalid("path: must not contain control characters"));
    }
    normalise(path).ok_or_else(outside)
}

fn millis(meta: &fs::Metadata) -> Option<i64> {
    meta.modified()
        .ok()?
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|d| d.as_millis() as i64)
}

/// Whether a name is one of the drive's own temporary files (an upload being written).
fn is_partial(name: &str) -> bool {
    name.starts_with(".upload-") && name.ends_with(".partial")
}

impl Drive {
    /// The canonical real path and drive-relative path of a client's path: 400 when it leads
    /// outside the drive (lexically or through a link), 404 when nothing is there.
    fn resolve(&self, path: &str) -> Result<(PathBuf, String)> {
        let rel = check_path(path)?;
        let root = self.canonical_root()?;
        let target = self.root.join(&rel);
        let real = match target.canonicalize() {
            Ok(real) => real,
            // A link whose target is missing or unreadable is refused like one that leaves.
            Err(_) => {
                return Err(match fs::symlink_metadata(&target) {
                    Ok(_) => outside(),
                    Err(_) => Error::NotFound,
                });
            }
        };
        if !within(&real, &root) {
            return Err(outside());
        }
        Ok((real.clone(), relative(&real, &root)))
    }

    /// The entries of folder `path` (`""` or `.` for the drive root), at most [`LIST_MAX`].
    pub fn list(&self, path: &str) -> Result<Listing> {
        let (real, rel) = self.resolve(path)?;
        if !real.is_dir() {
            return Err(Error::invalid("path: is a file, not a folder"));
        }
        let root = self.canonical_root()?;
        let dir = fs::read_dir(&real).map_err(|e| Error::from_io("cannot read folder", &e))?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for item in dir {
            let Ok(item) = item else { continue };
            let Ok(name) = item.file_name().into_string() else {
                continue;
            };
            if is_partial(&name) {
                continue;
            }
            let Some(entry) = entry_of(&root, &item.path(), &rel, name) else {
                continue;
            };
            if entries.len() == LIST_MAX {
                truncated = true;
                break;
            }
            entries.push(entry);
        }
        entries.sort_by(|a, b| {
            (a.kind != "dir")
                .cmp(&(b.kind != "dir"))
                .then_with(|| a.name.to_lowercase().cmp(&b.name.to_lowercase()))
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(Listing {
            path: rel,
            entries,
            truncated,
        })
    }

    /// Opens file `path` for reading.
    pub fn open(&self, path: &str) -> Result<Opened> {
        let (real, rel) = self.resolve(path)?;
        if real.is_dir() {
            return Err(Error::invalid("path: is a folder, not a file"));
        }
        let file = fs::File::open(&real).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound,
            _ => Error::from_io("cannot read file", &e),
        })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::from_io("cannot read file", &e))?;
        if !meta.is_file() {
            return Err(Error::invalid("path: is not a regular file"));
        }
        let name = rel.rsplit('/').next().unwrap_or_default().to_owned();
        Ok(Opened {
            file,
            kind: guess(&name),
            name,
            size: meta.len(),
            modified_at: millis(&meta),
            path: rel,
        })
    }

    /// Where a new file `path` goes: its existing folder (canonical, drive-relative) and its
    /// checked name. The folder must already exist; nothing is created here.
    pub fn new_file_target(&self, path: &str) -> Result<(String, String)> {
        if path.ends_with('/') {
            return Err(Error::invalid("path: must name a file"));
        }
        let rel = check_path(path)?;
        let (dir, name) = match rel.rsplit_once('/') {
            Some((dir, name)) => (dir, name),
            None => ("", rel.as_str()),
        };
        if name.is_empty() {
            return Err(Error::invalid("path: must name a file"));
        }
        super::check_file_name(name)?;
        let (real, dir) = self.resolve(dir)?;
        if !real.is_dir() {
            return Err(Error::invalid("path: its folder is a file"));
        }
        Ok((dir, name.to_owned()))
    }
}

/// The entry for `path` (a child of folder `rel`), following a link that stays inside the drive;
/// `None` for a link that leaves it or dangles, and for anything neither file nor folder.
fn entry_of(root: &Path, path: &Path, rel: &str, name: String) -> Option<Entry> {
    let meta = fs::symlink_metadata(path).ok()?;
    let meta = if meta.file_type().is_symlink() {
        let real = path.canonicalize().ok()?;
        if !within(&real, root) {
            return None;
        }
        fs::metadata(&real).ok()?
    } else {
        meta
    };
    let child = if rel.is_empty() {
        name.clone()
    } else {
        format!("{rel}/{name}")
    };
    if meta.is_dir() {
        Some(Entry {
            name,
            path: child,
            kind: "dir",
            size: None,
            modified_at: millis(&meta),
            mime: None,
            preview: None,
        })
    } else if meta.is_file() {
        let kind = guess(&name);
        Some(Entry {
            size: Some(meta.len()),
            modified_at: millis(&meta),
            mime: Some(kind.mime),
            preview: kind.preview,
            name,
            path: child,
            kind: "file",
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_paths_never_climb() {
        assert_eq!(check_path("").unwrap(), "");
        assert_eq!(check_path("./a//b/").unwrap(), "a/b");
        for bad in ["../x", "a/../b", "/etc", "a\\b", "a\0b", "..", "a/\n"] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn listings_leave_out_links_that_leave_and_partial_uploads() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Drive::root_for(tmp.path(), "ws");
        d.ensure().unwrap();
        fs::create_dir_all(d.root().join("docs")).unwrap();
        fs::write(d.root().join("docs/a.md"), b"# A").unwrap();
        fs::write(d.root().join(".upload-x.partial"), b"").unwrap();
        std::os::unix::fs::symlink("/etc", d.root().join("escape")).unwrap();
        std::os::unix::fs::symlink("docs", d.root().join("inside")).unwrap();
        let l = d.list("").unwrap();
        let names: Vec<_> = l.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["docs", "inside"]);
        assert!(!l.truncated);
        let docs = d.list("docs").unwrap();
        assert_eq!(docs.entries[0].path, "docs/a.md");
        assert_eq!(docs.entries[0].preview, Some(Preview::Markdown));
        assert!(d.list("escape").is_err());
        assert!(d.open("escape/passwd").is_err());
        assert!(matches!(d.open("nope.txt"), Err(Error::NotFound)));
        assert_eq!(d.open("inside/a.md").unwrap().path, "docs/a.md");
    }

    #[test]
    fn active_types_preview_as_text_only() {
        assert_eq!(guess("x.svg").preview, Some(Preview::Text));
        assert_eq!(guess("x.html").preview, Some(Preview::Text));
        assert_eq!(guess("x.PNG").preview, Some(Preview::Image));
        assert_eq!(guess("x.bin").preview, None);
    }
}
