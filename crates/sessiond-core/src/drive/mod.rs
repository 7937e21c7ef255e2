//! The workspace drive: a folder per workspace (`<data dir>/drive/<workspace>/`) that sessions
//! work in and uploads land in.
//!
//! Paths from users are relative to the drive, normalised lexically (`a/b/../c` → `a/c`) and then
//! checked on the real filesystem with symlinks resolved, so that nothing — `..`, absolute paths,
//! encoded separators or links — can lead outside the drive (or outside an agent's anchor).
//! `browse` is the drive as people see it through the API: listings, reads and writes by path.

pub mod browse;

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The drive of one workspace.
#[derive(Debug, Clone)]
pub struct Drive {
    root: PathBuf,
}

/// The lexical normal form of a drive path: no `.`, no empty segments, `..` resolved, `""` for the
/// drive root. `None` when the path is absolute or climbs above the root.
pub fn normalise(path: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('\\') || path.contains('\0') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split(['/', '\\']) {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s if s.contains(':') && parts.is_empty() && s.len() == 2 => return None,
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// True when `path` is inside `dir` (both canonical).
fn within(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

impl Drive {
    pub fn root_for(data_dir: &Path, workspace_slug: &str) -> Drive {
        Drive {
            root: data_dir.join("drive").join(workspace_slug),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the drive folder when missing.
    pub fn ensure(&self) -> Result<()> {
        fs::create_dir_all(&self.root).map_err(|e| {
            Error::Internal(format!("cannot create drive {}: {e}", self.root.display()))
        })
    }

    fn canonical_root(&self) -> Result<PathBuf> {
        self.ensure()?;
        self.root
            .canonicalize()
            .map_err(|e| Error::Internal(format!("drive root: {e}")))
    }

    /// Validates a working directory (R65–R68): returns its canonical drive-relative form, or
    /// `invalid_cwd` with the seed's reason.
    pub fn check_cwd(&self, cwd: &str, anchor: &str) -> Result<String> {
        let rel = normalise(cwd).ok_or(Error::InvalidCwd("outside_drive"))?;
        let root = self.canonical_root()?;
        let target = self.root.join(&rel);
        let real = match target.canonicalize() {
            Ok(real) => real,
            Err(_) => {
                // A dangling or escaping link is reported as outside the drive, a plain miss as
                // missing.
                return Err(match fs::symlink_metadata(&target) {
                    Ok(_) => Error::InvalidCwd("outside_drive"),
                    Err(_) => Error::InvalidCwd("missing"),
                });
            }
        };
        if !within(&real, &root) {
            return Err(Error::InvalidCwd("outside_drive"));
        }
        if !real.is_dir() {
            return Err(Error::InvalidCwd("not_a_directory"));
        }
        let anchor_real = match normalise(anchor) {
            Some(a) if !a.is_empty() => self.root.join(a).canonicalize().ok(),
            _ => Some(root.clone()),
        };
        match anchor_real {
            Some(a) if within(&real, &a) => {}
            _ => return Err(Error::InvalidCwd("outside_agent_anchor")),
        }
        Ok(relative(&real, &root))
    }

    /// Checks that an attachment path names an existing file inside the drive; returns its
    /// canonical drive-relative form.
    pub fn check_file(&self, path: &str) -> Result<String> {
        let rel = normalise(path)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| Error::invalid("must stay inside the workspace drive"))?;
        let root = self.canonical_root()?;
        let real = self
            .root
            .join(&rel)
            .canonicalize()
            .map_err(|_| Error::invalid("no such file in the workspace drive"))?;
        if !within(&real, &root) {
            return Err(Error::invalid("must stay inside the workspace drive"));
        }
        if !real.is_file() {
            return Err(Error::invalid("is not a file"));
        }
        Ok(relative(&real, &root))
    }

    /// Creates (if needed) a folder inside the drive and returns its canonical relative path.
    pub fn make_dir(&self, rel: &str) -> Result<String> {
        let rel = normalise(rel).ok_or(Error::InvalidCwd("outside_drive"))?;
        let root = self.canonical_root()?;
        let target = self.root.join(&rel);
        fs::create_dir_all(&target)
            .map_err(|e| Error::from_io(&format!("cannot create {rel}"), &e))?;
        let real = target
            .canonicalize()
            .map_err(|e| Error::Internal(format!("{rel}: {e}")))?;
        if !within(&real, &root) {
            return Err(Error::InvalidCwd("outside_drive"));
        }
        Ok(relative(&real, &root))
    }

    /// A hidden temporary file in folder `dir` (drive-relative, canonical).
    pub fn temp_file(&self, dir: &str) -> Result<(fs::File, PathBuf)> {
        let folder = self.canonical_root()?.join(dir);
        let tmp = folder.join(format!(".upload-{}.partial", crate::ids::new_id()));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::from_io("cannot create upload file", &e))?;
        Ok((file, tmp))
    }

    /// Gives a finished temporary file its name in `dir` without ever replacing an existing file
    /// (a hard link fails if the name is taken); returns the drive-relative path.
    pub fn link_new(&self, tmp: &Path, dir: &str, name: &str) -> Result<String> {
        check_file_name(name)?;
        let final_path = self.canonical_root()?.join(dir).join(name);
        match fs::hard_link(tmp, &final_path) {
            Ok(()) => {
                let _ = fs::remove_file(tmp);
                Ok(if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::Exists),
            Err(e) => Err(Error::from_io("cannot store upload", &e)),
        }
    }

    /// Writes a new file `name` into folder `dir` (drive-relative), never replacing an existing
    /// one.
    pub fn write_new_file(&self, dir: &str, name: &str, bytes: &[u8]) -> Result<String> {
        check_file_name(name)?;
        let dir_rel = self.make_dir(dir)?;
        let (mut file, tmp) = self.temp_file(&dir_rel)?;
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        let result = match written {
            Ok(()) => self.link_new(&tmp, &dir_rel, name),
            Err(e) => Err(Error::from_io("cannot write file", &e)),
        };
        let _ = fs::remove_file(&tmp);
        result
    }
}

/// Characters that change or hide how a name reads without showing themselves: Unicode's format
/// characters (bidirectional overrides and isolates, zero-width spaces and joiners, the BOM, tags),
/// line and paragraph separators, and the invisible fillers. A name `invoice\u{202E}fdp.exe` would
/// show as `invoiceexe.pdf`.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F | 0x1160 | 0x180E | 0x3164 | 0xFEFF | 0xFFA0
        | 0x0600..=0x0605 | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x200B..=0x200F | 0x2028..=0x202E | 0x2060..=0x206F | 0xFFF9..=0xFFFB
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0001 | 0xE0020..=0xE007F)
}

/// A visible file name: no separators, no `..`, no control or invisible format characters, not
/// ending in a space, not hidden-as-dot-only, at most 255 bytes.
pub fn check_file_name(name: &str) -> Result<()> {
    let bad = |why: &str| Error::invalid(format!("filename: {why}"));
    if name.is_empty() || name == "." || name == ".." {
        return Err(bad("must be a file name"));
    }
    if name.len() > 255 {
        return Err(bad("longer than 255 bytes"));
    }
    if name.contains(['/', '\\']) || name.contains("..") {
        return Err(bad("must not contain '/', '\\' or '..'"));
    }
    if name.chars().any(char::is_control) {
        return Err(bad("must not contain control characters"));
    }
    if name.chars().any(is_invisible) {
        return Err(bad(
            "must not contain invisible format characters (such as bidirectional overrides)",
        ));
    }
    if name.ends_with(char::is_whitespace) {
        return Err(bad("must not end in a space"));
    }
    Ok(())
}

fn relative(real: &Path, root: &Path) -> String {
    real.strip_prefix(root)
        .map(|p| {
            p.components()
                .filter_map(|c| match c {
                    Component::Normal(s) => s.to_str(),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_r67() {
        assert_eq!(
            normalise("projects/drafts/../release").as_deref(),
            Some("projects/release")
        );
        assert_eq!(normalise("./a//b/").as_deref(), Some("a/b"));
        assert_eq!(normalise(".").as_deref(), Some(""));
        assert_eq!(normalise("../x"), None);
        assert_eq!(normalise("/etc"), None);
        assert_eq!(normalise("a/../../b"), None);
        assert_eq!(normalise("C:/x"), None);
    }

    #[test]
    fn cwd_checks_the_filesystem() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Drive::root_for(tmp.path(), "ws");
        d.ensure().unwrap();
        fs::create_dir_all(d.root().join("projects/release")).unwrap();
        fs::write(d.root().join("projects/file.txt"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", d.root().join("escape")).unwrap();
        assert_eq!(
            d.check_cwd("projects/drafts/../release", "").unwrap(),
            "projects/release"
        );
        assert!(matches!(
            d.check_cwd("nope", ""),
            Err(Error::InvalidCwd("missing"))
        ));
        assert!(matches!(
            d.check_cwd("projects/file.txt", ""),
            Err(Error::InvalidCwd("not_a_directory"))
        ));
        assert!(matches!(
            d.check_cwd("escape", ""),
            Err(Error::InvalidCwd("outside_drive"))
        ));
        assert!(matches!(
            d.check_cwd("../..", ""),
            Err(Error::InvalidCwd("outside_drive"))
        ));
        assert!(matches!(
            d.check_cwd("projects", "agents/x"),
            Err(Error::InvalidCwd("outside_agent_anchor"))
        ));
    }

    #[test]
    fn uploads_never_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let d = Drive::root_for(tmp.path(), "ws");
        assert_eq!(
            d.write_new_file("a/uploads", "x.txt", b"1").unwrap(),
            "a/uploads/x.txt"
        );
        assert!(matches!(
            d.write_new_file("a/uploads", "x.txt", b"2"),
            Err(Error::Exists)
        ));
        assert_eq!(fs::read(d.root().join("a/uploads/x.txt")).unwrap(), b"1");
        assert!(d.write_new_file("a/uploads", "../x", b"2").is_err());
        assert!(d.write_new_file("a/uploads", "a\nb", b"2").is_err());
    }
}
