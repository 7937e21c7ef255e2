//! The sandbox of the file tools (`read_file`, `write_file`, `list_dir`, `search_files`) and of
//! `run_command`'s working directory: the session's working directory inside its workspace drive.
//!
//! Paths given to a tool are relative to the working directory and checked twice, as
//! [`crate::drive`] checks drive paths: first lexically ([`drive::normalise`]: no absolute paths,
//! no `..` above the base), then on the real filesystem with symlinks resolved, so that the real
//! path of everything read, written, listed or searched lies inside the canonical base. A link
//! inside the base that leads outside it is refused; a link to somewhere else inside is followed.
//! `%2e%2e` and other encodings are not decoded: they are plain names.
//!
//! Writes create missing folders one at a time, each checked before the next is made, and replace
//! a file atomically (a temporary file in the same folder, then a rename). Files are opened without
//! following a final link and without blocking on special files. The checks hold at the time of a
//! call; a process that swaps folders for links concurrently is outside what they guard against.
//!
//! Results and errors are text for the model: paths in them are relative to the base, and an
//! error never names a host path.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::drive;

/// At most this much text is returned by one `read_file`.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// The largest content `write_file` accepts.
pub const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;
/// At most this many entries are listed by one `list_dir`.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// `search_files` stops after this many matching lines.
pub const MAX_MATCHES: usize = 200;
/// `search_files` stops after searching this many files.
pub const MAX_SEARCH_FILES: usize = 20_000;
/// `search_files` skips files larger than this.
pub const MAX_SEARCH_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// A matching line is shown up to this many characters.
pub const MAX_MATCH_LINE_CHARS: usize = 300;
/// The longest path a tool accepts.
pub const MAX_PATH_BYTES: usize = 4096;
/// A file with a NUL byte in its first this-many bytes is binary.
const SNIFF_BYTES: usize = 8192;
/// The longest path segment (file or folder name).
const MAX_NAME_BYTES: usize = 255;
/// How much of a path from the model is echoed back in an error.
const MAX_SHOWN_CHARS: usize = 200;
/// Folders of version-control systems, not descended into by `search_files`.
const SKIPPED_DIRS: [&str; 3] = [".git", ".hg", ".svn"];

/// Why a tool call failed. The message is the tool result shown to the model: it names paths as
/// the model gave them (relative to the working directory), never a host path.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("paths are relative to the working directory")]
    Absolute,
    #[error("{0}: leads outside the working directory")]
    Outside(String),
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: is a link whose target does not exist")]
    BrokenLink(String),
    #[error("{0}: is a directory")]
    IsADirectory(String),
    #[error("{0}: is not a directory")]
    NotADirectory(String),
    #[error("{0}: is not a regular file")]
    NotAFile(String),
    #[error("{0}: is a binary file; only text files can be read")]
    Binary(String),
    #[error("{0}: is not UTF-8 text")]
    NotText(String),
    /// The working directory itself is unusable.
    #[error("working directory {cwd}: {why}")]
    WorkingDirectory { cwd: String, why: &'static str },
    /// A bad argument; the message says which and why.
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

impl ToolError {
    fn io(path: &str, e: &io::Error) -> ToolError {
        // std's io::Error carries the OS message only, never the path it was about.
        ToolError::Io {
            path: shown(path),
            message: e.to_string(),
        }
    }
}

/// The folder the tools work in: the session's cwd inside its drive. Paths given to tools are
/// relative to it; nothing may resolve outside it (not `..`, not absolute paths, not symlinks).
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Canonical: absolute, no links, no `.`/`..`.
    base: PathBuf,
}

impl Sandbox {
    /// The canonical working directory (where `run_command` starts its commands).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The sandbox for a session whose drive is `drive_root` and whose cwd is `cwd`
    /// (drive-relative; `None` or `""` for the drive root). Both must exist.
    pub fn new(drive_root: &Path, cwd: Option<&str>) -> Result<Sandbox, ToolError> {
        let cwd = cwd.unwrap_or("");
        let bad = |why| ToolError::WorkingDirectory {
            cwd: if cwd.is_empty() {
                "(drive root)".to_owned()
            } else {
                shown(cwd)
            },
            why,
        };
        let rel = drive::normalise(cwd).ok_or_else(|| bad("leads outside the workspace drive"))?;
        let root = drive_root
            .canonicalize()
            .map_err(|_| bad("the workspace drive does not exist"))?;
        let base = root
            .join(&rel)
            .canonicalize()
            .map_err(|_| bad("does not exist"))?;
        if !base.starts_with(&root) {
            return Err(bad("leads outside the workspace drive"));
        }
        if !base.is_dir() {
            return Err(bad("is not a directory"));
        }
        Ok(Sandbox { base })
    }

    /// The text of file `path`, from line `offset_line` (1-based; `None` or 0 = the first) for at
    /// most `limit_lines` lines, capped at [`MAX_READ_BYTES`]. When less than the rest of the file
    /// is returned, a last line in brackets says so and where to continue. Binary (a NUL byte) and
    /// non-UTF-8 files are refused.
    pub fn read_file(
        &self,
        path: &str,
        offset_line: Option<usize>,
        limit_lines: Option<usize>,
    ) -> Result<String, ToolError> {
        if limit_lines == Some(0) {
            return Err(ToolError::Invalid("limit_lines must be at least 1".into()));
        }
        let (_, real) = self.existing(path)?;
        let file = open_regular(&real, path)?;
        let start = offset_line.unwrap_or(1).max(1);
        read_lines(file, path, start, limit_lines.unwrap_or(usize::MAX))
    }

    /// Writes `content` to file `path`, creating missing folders inside the working directory and
    /// replacing an existing file atomically (its permissions are kept). A link to a file inside
    /// the working directory is written through; a link leading outside is refused.
    pub fn write_file(&self, path: &str, content: &str) -> Result<String, ToolError> {
        if content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::Invalid(format!(
                "content is {} bytes; write_file takes at most {MAX_WRITE_BYTES}",
                content.len()
            )));
        }
        let rel = lexical(path)?;
        if rel.is_empty() || path.ends_with(['/', '\\']) {
            return Err(ToolError::Invalid(format!(
                "{}: give a file name to write",
                shown(path)
            )));
        }
        let (parent_rel, name) = match rel.rsplit_once('/') {
            Some((parent, name)) => (parent, name),
            None => ("", rel.as_str()),
        };
        let parent = self.make_dirs(parent_rel)?;
        let target = parent.join(name);
        let (dest, permissions) = match fs::symlink_metadata(&target) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => (target, None),
            Err(e) => return Err(ToolError::io(path, &e)),
            Ok(meta) => {
                let real = match target.canonicalize() {
                    Ok(real) => real,
                    Err(_) if meta.is_symlink() => return Err(ToolError::BrokenLink(shown(path))),
                    Err(e) => return Err(ToolError::io(path, &e)),
                };
                if !self.contains(&real) {
                    return Err(ToolError::Outside(shown(path)));
                }
                let meta = fs::metadata(&real).map_err(|e| ToolError::io(path, &e))?;
                if meta.is_dir() {
                    return Err(ToolError::IsADirectory(shown(path)));
                }
                if !meta.is_file() {
                    return Err(ToolError::NotAFile(shown(path)));
                }
                (real, Some(meta.permissions()))
            }
        };
        let folder = dest.parent().unwrap_or(&parent);
        replace_file(folder, &dest, content.as_bytes(), permissions)
            .map_err(|e| ToolError::io(path, &e))?;
        Ok(format!("wrote {} bytes to {rel}", content.len()))
    }

    /// The entries of folder `path` (`None`, `""` or `"."` for the working directory), sorted by
    /// name: folders end in `/`, files show their size, links show where they lead (inside the
    /// working directory) or that they lead outside. At most [`MAX_LIST_ENTRIES`].
    pub fn list_dir(&self, path: Option<&str>) -> Result<String, ToolError> {
        let path = path.unwrap_or("");
        let (_, real) = self.existing(path)?;
        if !real.is_dir() {
            return Err(ToolError::NotADirectory(shown(path)));
        }
        let mut names = read_names(&real).map_err(|e| ToolError::io(path, &e))?;
        if names.is_empty() {
            return Ok("(empty directory)".to_owned());
        }
        names.sort();
        let total = names.len();
        let mut out = String::new();
        for name in names.iter().take(MAX_LIST_ENTRIES) {
            out.push_str(&self.describe_entry(&real.join(name), &name.to_string_lossy()));
            out.push('\n');
        }
        if total > MAX_LIST_ENTRIES {
            out.push_str(&format!(
                "[showing the first {MAX_LIST_ENTRIES} of {total} entries]\n"
            ));
        }
        Ok(out)
    }

    /// Lines containing `pattern` (literal, case-sensitive) in the text files under `path` (a
    /// folder or one file; `None` = the working directory), as `path:line: text` with paths
    /// relative to the working directory. `glob` (`*.rs`, `test_*`, `?` for one character)
    /// filters file names. Links, binary files, files over [`MAX_SEARCH_FILE_BYTES`] and
    /// version-control folders are skipped; the search stops at [`MAX_MATCHES`] matches or
    /// [`MAX_SEARCH_FILES`] files and says so.
    pub fn search_files(
        &self,
        pattern: &str,
        path: Option<&str>,
        glob: Option<&str>,
    ) -> Result<String, ToolError> {
        if pattern.is_empty() {
            return Err(ToolError::Invalid("pattern is empty".into()));
        }
        if pattern.contains(['\n', '\r']) {
            return Err(ToolError::Invalid(
                "pattern must be a single line: lines are searched one at a time".into(),
            ));
        }
        let glob = match glob {
            None | Some("") => None,
            Some(g) if g.contains(['/', '\\']) || g.contains('\0') => {
                return Err(ToolError::Invalid(
                    "glob matches file names only (like *.rs); give folders as path".into(),
                ));
            }
            Some(g) if g.len() > MAX_NAME_BYTES => {
                return Err(ToolError::Invalid(format!(
                    "glob is longer than {MAX_NAME_BYTES} bytes"
                )));
            }
            Some(g) => Some(g.chars().collect::<Vec<_>>()),
        };
        let path = path.unwrap_or("");
        let (rel, real) = self.existing(path)?;
        let mut search = Search {
            pattern,
            glob: glob.as_deref(),
            lines: Vec::new(),
            files: 0,
            skipped_large: 0,
            stop: None,
        };
        if real.is_dir() {
            search.walk(&real, &rel);
        } else if real.is_file() {
            // A file named explicitly is searched whatever the glob says.
            search.file(&real, &rel, true);
        } else {
            return Err(ToolError::NotAFile(shown(path)));
        }
        Ok(search.report())
    }

    /// True when canonical `real` is the base or inside it.
    fn contains(&self, real: &Path) -> bool {
        real.starts_with(&self.base)
    }

    /// The normalised relative form and the canonical real path of an existing `path`.
    fn existing(&self, path: &str) -> Result<(String, PathBuf), ToolError> {
        let rel = lexical(path)?;
        let target = self.base.join(&rel);
        match target.canonicalize() {
            Ok(real) if self.contains(&real) => Ok((rel, real)),
            Ok(_) => Err(ToolError::Outside(shown(path))),
            Err(e) => Err(self.missing(path, &rel, &e)),
        }
    }

    /// Why `rel` could not be resolved: under a link leading outside, a broken link, or missing.
    fn missing(&self, path: &str, rel: &str, e: &io::Error) -> ToolError {
        // The deepest ancestor that exists decides whether the path leads outside, so that
        // `link-to-outside/anything` is refused rather than reported missing.
        for ancestor in Path::new(rel).ancestors().skip(1) {
            if let Ok(real) = self.base.join(ancestor).canonicalize() {
                if !self.contains(&real) {
                    return ToolError::Outside(shown(path));
                }
                break;
            }
        }
        if fs::symlink_metadata(self.base.join(rel)).is_ok_and(|m| m.is_symlink()) {
            return ToolError::BrokenLink(shown(path));
        }
        match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => {
                ToolError::NotFound(shown(path))
            }
            _ => ToolError::io(path, e),
        }
    }

    /// Creates the folders of normalised `rel` that are missing, one at a time, checking each
    /// existing or new one before going deeper; returns the canonical folder.
    fn make_dirs(&self, rel: &str) -> Result<PathBuf, ToolError> {
        let mut dir = self.base.clone();
        let mut so_far = String::new();
        for seg in rel.split('/').filter(|s| !s.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(seg);
            let next = dir.join(seg);
            match fs::symlink_metadata(&next) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&next) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(ToolError::io(&so_far, &e)),
                },
                Err(e) => return Err(ToolError::io(&so_far, &e)),
            }
            let real = match next.canonicalize() {
                Ok(real) => real,
                Err(_) if fs::symlink_metadata(&next).is_ok_and(|m| m.is_symlink()) => {
                    return Err(ToolError::BrokenLink(shown(&so_far)));
                }
                Err(e) => return Err(ToolError::io(&so_far, &e)),
            };
            if !self.contains(&real) {
                return Err(ToolError::Outside(shown(&so_far)));
            }
            if !real.is_dir() {
                return Err(ToolError::NotADirectory(shown(&so_far)));
            }
            dir = real;
        }
        Ok(dir)
    }

    /// One `list_dir` line for the entry at `full` named `name`.
    fn describe_entry(&self, full: &Path, name: &str) -> String {
        let meta = match fs::symlink_metadata(full) {
            Ok(meta) => meta,
            Err(_) => return format!("{name} (unreadable)"),
        };
        if !meta.is_symlink() {
            return describe(name, &meta);
        }
        match full.canonicalize() {
            Err(_) => format!("{name} -> (broken link)"),
            Ok(real) if !self.contains(&real) => {
                format!("{name} -> (outside the working directory)")
            }
            Ok(real) => {
                let target = self.relative(&real);
                let target = if target.is_empty() { "." } else { &target };
                match fs::metadata(&real) {
                    Ok(meta) => describe(&format!("{name} -> {target}"), &meta),
                    Err(_) => format!("{name} -> {target}"),
                }
            }
        }
    }

    /// `real` (canonical, inside the base) relative to the base, `/`-separated.
    fn relative(&self, real: &Path) -> String {
        real.strip_prefix(&self.base)
            .map(|p| {
                p.components()
                    .filter_map(|c| match c {
                        Component::Normal(s) => Some(s.to_string_lossy()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .unwrap_or_default()
    }
}

/// Checks a path from the model and returns its lexical normal form (`""` for the base).
fn lexical(path: &str) -> Result<String, ToolError> {
    if path.contains('\0') {
        return Err(ToolError::Invalid("path contains a NUL byte".into()));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(ToolError::Invalid(format!(
            "path is longer than {MAX_PATH_BYTES} bytes"
        )));
    }
    let bytes = path.as_bytes();
    // `C:` or `C:/…`; `c:name` is an ordinary name.
    let drive_letter = bytes.len() >= 2
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && matches!(bytes.get(2), None | Some(b'/' | b'\\'));
    if path.starts_with(['/', '\\']) || drive_letter {
        return Err(ToolError::Absolute);
    }
    let rel = drive::normalise(path).ok_or_else(|| ToolError::Outside(shown(path)))?;
    if rel.split('/').any(|seg| seg.len() > MAX_NAME_BYTES) {
        return Err(ToolError::Invalid(format!(
            "{}: a name in the path is longer than {MAX_NAME_BYTES} bytes",
            shown(path)
        )));
    }
    Ok(rel)
}

/// A path from the model as echoed in a message: `.` for the base, long ones shortened.
fn shown(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    match path.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((end, _)) => format!("{}…", &path[..end]),
        None => path.to_owned(),
    }
}

/// Opens canonical `real` for reading without following a final link or blocking on a FIFO, and
/// checks that it is a regular file.
fn open_regular(real: &Path, path: &str) -> Result<File, ToolError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(real)
        .map_err(|e| ToolError::io(path, &e))?;
    let meta = file.metadata().map_err(|e| ToolError::io(path, &e))?;
    if meta.is_dir() {
        return Err(ToolError::IsADirectory(shown(path)));
    }
    if !meta.is_file() {
        return Err(ToolError::NotAFile(shown(path)));
    }
    Ok(file)
}

/// Why `read_lines` stopped before the end of the file.
enum Cut {
    /// `limit_lines` lines were returned and more follow.
    Limit,
    /// [`MAX_READ_BYTES`] were reached.
    Cap,
}

/// Lines `start..start + limit` of `file`, as `read_file` returns them.
fn read_lines(mut file: File, path: &str, start: usize, limit: usize) -> Result<String, ToolError> {
    let io_err = |e: io::Error| ToolError::io(path, &e);
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    if head.contains(&0) {
        return Err(ToolError::Binary(shown(path)));
    }
    let mut reader = BufReader::new(io::Cursor::new(head).chain(file));

    // Skip to line `start`.
    let mut line = 1usize;
    let mut at_line_start = true;
    while line < start {
        let buf = reader.fill_buf().map_err(io_err)?;
        if buf.is_empty() {
            return Ok(past_end(if at_line_start { line - 1 } else { line }, start));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                line += 1;
                at_line_start = true;
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                at_line_start = false;
            }
        }
    }

    if start > 1 && reader.fill_buf().map_err(io_err)?.is_empty() {
        // The file ends with the newline of line `start - 1`.
        return Ok(past_end(start - 1, start));
    }

    // Take up to `limit` lines, within the byte cap.
    let mut out: Vec<u8> = Vec::new();
    let mut taken = 0usize;
    let mut cut = None;
    loop {
        let buf = reader.fill_buf().map_err(io_err)?;
        if buf.is_empty() {
            break;
        }
        if taken == limit {
            cut = Some(Cut::Limit);
            break;
        }
        let (len, ends_line) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = MAX_READ_BYTES - out.len();
        if len > room {
            out.extend_from_slice(&buf[..room]);
            cut = Some(Cut::Cap);
            break;
        }
        out.extend_from_slice(&buf[..len]);
        reader.consume(len);
        if ends_line {
            taken += 1;
        }
    }

    let mut note = None;
    match cut {
        None => {}
        Some(Cut::Limit) => {
            let last = start + taken - 1;
            note = Some(format!(
                "[showing lines {start}-{last}; more follows from offset_line={}]",
                last + 1
            ));
        }
        Some(Cut::Cap) => match out.iter().rposition(|&b| b == b'\n') {
            Some(i) => {
                out.truncate(i + 1);
                let shown_lines = out.iter().filter(|&&b| b == b'\n').count();
                let last = start + shown_lines - 1;
                note = Some(format!(
                    "[truncated at {} KiB: showing lines {start}-{last}; continue with \
                     offset_line={}]",
                    MAX_READ_BYTES / 1024,
                    last + 1
                ));
            }
            None => {
                note = Some(format!(
                    "[line {start} is longer than {} KiB; only its start is shown; the next \
                     line is offset_line={}]",
                    MAX_READ_BYTES / 1024,
                    start + 1
                ));
            }
        },
    }
    if out.contains(&0) {
        return Err(ToolError::Binary(shown(path)));
    }
    let mut text = match String::from_utf8(out) {
        Ok(text) => text,
        // A character split by the byte cap is dropped; anything else is not UTF-8.
        Err(e) if matches!(cut, Some(Cut::Cap)) && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| ToolError::NotText(shown(path)))?
        }
        Err(_) => return Err(ToolError::NotText(shown(path))),
    };
    if let Some(note) = note {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
    }
    Ok(text)
}

/// The answer to an `offset_line` beyond the last of `total` lines.
fn past_end(total: usize, start: usize) -> String {
    format!("[the file has {total} lines; offset_line {start} is past the end]")
}

/// Writes `bytes` to a new temporary file in `folder` (canonical) and renames it onto `dest`.
fn replace_file(
    folder: &Path,
    dest: &Path,
    bytes: &[u8],
    permissions: Option<fs::Permissions>,
) -> io::Result<()> {
    let tmp = folder.join(format!(".sessiond-{}.tmp", crate::ids::new_id()));
    let written = write_new(&tmp, bytes, permissions).and_then(|()| fs::rename(&tmp, dest));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// Creates `path` (never opening an existing file or link) with `bytes`, synced.
fn write_new(path: &Path, bytes: &[u8], permissions: Option<fs::Permissions>) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    file.write_all(bytes)?;
    if let Some(permissions) = permissions {
        file.set_permissions(permissions)?;
    }
    file.sync_all()
}

/// The names in folder `dir`.
fn read_names(dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect()
}

/// `name/` for a folder, `name (N bytes)` for a file, `name (special file)` otherwise.
fn describe(name: &str, meta: &fs::Metadata) -> String {
    if meta.is_dir() {
        format!("{name}/")
    } else if meta.is_file() {
        format!("{name} ({} bytes)", meta.len())
    } else {
        format!("{name} (special file)")
    }
}

/// Why a search stopped early.
enum Stop {
    Matches,
    Files,
}

/// One `search_files` run.
struct Search<'a> {
    pattern: &'a str,
    glob: Option<&'a [char]>,
    lines: Vec<String>,
    files: usize,
    skipped_large: usize,
    stop: Option<Stop>,
}

impl Search<'_> {
    /// Searches the files under folder `real` (canonical, inside the base; `rel` relative to the
    /// base) depth first in name order, without following links.
    fn walk(&mut self, real: &Path, rel: &str) {
        let mut stack = vec![sorted_entries(real, rel).into_iter()];
        while self.stop.is_none() {
            let Some(top) = stack.last_mut() else { break };
            let Some((path, rel, kind)) = top.next() else {
                stack.pop();
                continue;
            };
            if kind.is_dir() {
                let skipped = rel
                    .rsplit('/')
                    .next()
                    .is_some_and(|name| SKIPPED_DIRS.contains(&name));
                if !skipped {
                    stack.push(sorted_entries(&path, &rel).into_iter());
                }
            } else if kind.is_file() {
                self.file(&path, &rel, false);
            }
            // Links and special files are not followed or read.
        }
    }

    /// Searches one file, unless the glob rules it out (`named` = given as the search path).
    fn file(&mut self, real: &Path, rel: &str, named: bool) {
        if !named && let Some(glob) = self.glob {
            let name: Vec<char> = rel.rsplit('/').next().unwrap_or(rel).chars().collect();
            if !glob_match(glob, &name) {
                return;
            }
        }
        if self.files == MAX_SEARCH_FILES {
            self.stop = Some(Stop::Files);
            return;
        }
        self.files += 1;
        let Ok(file) = open_regular(real, rel) else {
            return;
        };
        if !file
            .metadata()
            .is_ok_and(|m| m.len() <= MAX_SEARCH_FILE_BYTES)
        {
            self.skipped_large += 1;
            return;
        }
        let mut bytes = Vec::new();
        if file
            .take(MAX_SEARCH_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .is_err()
        {
            return;
        }
        if bytes.len() as u64 > MAX_SEARCH_FILE_BYTES {
            self.skipped_large += 1;
            return;
        }
        if bytes.contains(&0) {
            return;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if !line.contains(self.pattern) {
                continue;
            }
            if self.lines.len() == MAX_MATCHES {
                self.stop = Some(Stop::Matches);
                return;
            }
            self.lines.push(format!("{rel}:{}: {}", i + 1, clip(line)));
        }
    }

    fn report(self) -> String {
        let mut out = String::new();
        if self.lines.is_empty() {
            out.push_str(&format!("no matches for {:?}\n", self.pattern));
        }
        for line in &self.lines {
            out.push_str(line);
            out.push('\n');
        }
        match self.stop {
            None => {}
            Some(Stop::Matches) => out.push_str(&format!(
                "[stopped at {MAX_MATCHES} matches; narrow the search with path or glob]\n"
            )),
            Some(Stop::Files) => out.push_str(&format!(
                "[stopped after searching {MAX_SEARCH_FILES} files; narrow the search with path \
                 or glob]\n"
            )),
        }
        if self.skipped_large > 0 {
            out.push_str(&format!(
                "[skipped files larger than {} MiB: {}]\n",
                MAX_SEARCH_FILE_BYTES / (1024 * 1024),
                self.skipped_large
            ));
        }
        out
    }
}

/// The entries of folder `real` sorted by name, with their paths relative to the base and their
/// types (not following links); an unreadable folder has none.
fn sorted_entries(real: &Path, rel: &str) -> Vec<(PathBuf, String, fs::FileType)> {
    let Ok(entries) = fs::read_dir(real) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let kind = entry.file_type().ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            Some((entry.path(), rel, kind))
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// A matching line as shown: no trailing whitespace, at most [`MAX_MATCH_LINE_CHARS`] characters.
fn clip(line: &str) -> String {
    let line = line.trim_end();
    match line.char_indices().nth(MAX_MATCH_LINE_CHARS) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

/// True when `name` matches `glob`, where `*` stands for any run of characters and `?` for one.
fn glob_match(glob: &[char], name: &[char]) -> bool {
    let (mut g, mut n) = (0, 0);
    // Where the last `*` was, and the name position it currently stands up to.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    g = sg + 1;
                    n = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    /// A drive with the session's cwd at `proj/`, a sibling folder `other/` inside the drive but
    /// outside the cwd, and a folder `outside/` next to the drive with a secret in it.
    struct Fixture {
        tmp: tempfile::TempDir,
        sandbox: Sandbox,
    }

    impl Fixture {
        fn new() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path();
            fs::create_dir_all(root.join("drive/proj")).unwrap();
            fs::create_dir_all(root.join("drive/other")).unwrap();
            fs::write(root.join("drive/other/private.txt"), "PRIVATE\n").unwrap();
            fs::create_dir_all(root.join("outside/dir")).unwrap();
            fs::write(root.join("outside/secret.txt"), "SECRET\n").unwrap();
            fs::write(root.join("outside/dir/inner.txt"), "SECRET inner\n").unwrap();
            let sandbox = Sandbox::new(&root.join("drive"), Some("proj")).unwrap();
            Fixture { tmp, sandbox }
        }

        /// A path inside the cwd.
        fn base(&self, rel: &str) -> PathBuf {
            self.tmp.path().join("drive/proj").join(rel)
        }

        fn outside(&self, rel: &str) -> PathBuf {
            self.tmp.path().join("outside").join(rel)
        }

        fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
            let path = self.base(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }

        fn link(&self, target: &Path, rel: &str) {
            symlink(target, self.base(rel)).unwrap();
        }

        /// Every file under `outside/`, to show that nothing was created or changed there.
        fn outside_files(&self) -> Vec<(String, Vec<u8>)> {
            let mut out = Vec::new();
            let mut stack = vec![self.outside("")];
            while let Some(dir) = stack.pop() {
                for entry in fs::read_dir(dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                    } else {
                        out.push((path.display().to_string(), fs::read(&path).unwrap()));
                    }
                }
            }
            out.sort();
            out
        }

        /// The error's message, checked never to name a host path.
        fn message(&self, err: ToolError) -> String {
            let msg = err.to_string();
            let host = self.tmp.path().to_string_lossy().into_owned();
            assert!(!msg.contains(&host), "{msg:?} names a host path");
            msg
        }
    }

    fn outside_err(r: Result<String, ToolError>) -> bool {
        matches!(r, Err(ToolError::Outside(_)))
    }

    // --- the sandbox itself ---

    #[test]
    fn sandbox_new_refuses_a_cwd_that_is_missing_escapes_or_is_a_file() {
        let fx = Fixture::new();
        let drive = fx.tmp.path().join("drive");
        fs::write(drive.join("file.txt"), "x").unwrap();
        symlink(fx.outside(""), drive.join("escape")).unwrap();
        for (cwd, why) in [
            ("../outside", "leads outside the workspace drive"),
            ("/etc", "leads outside the workspace drive"),
            ("escape", "leads outside the workspace drive"),
            ("nope", "does not exist"),
            ("file.txt", "is not a directory"),
        ] {
            let err = Sandbox::new(&drive, Some(cwd)).unwrap_err();
            assert!(fx.message(err).ends_with(why), "{cwd}");
        }
        assert!(Sandbox::new(&fx.tmp.path().join("no-drive"), None).is_err());
        let root = Sandbox::new(&drive, None).unwrap();
        assert_eq!(
            root.read_file("proj/../other/private.txt", None, None)
                .unwrap(),
            "PRIVATE\n"
        );
        let root = Sandbox::new(&drive, Some("")).unwrap();
        assert!(root.list_dir(None).unwrap().contains("proj/"));
    }

    #[test]
    fn paths_are_relative_to_the_cwd_and_cannot_reach_the_rest_of_the_drive() {
        let fx = Fixture::new();
        fx.put("a.txt", "in proj\n");
        assert_eq!(
            fx.sandbox.read_file("a.txt", None, None).unwrap(),
            "in proj\n"
        );
        assert_eq!(
            fx.sandbox.read_file("./x/../a.txt", None, None).unwrap(),
            "in proj\n"
        );
        assert!(outside_err(fx.sandbox.read_file(
            "../other/private.txt",
            None,
            None
        )));
        fx.link(&fx.tmp.path().join("drive/other"), "sibling");
        assert!(outside_err(fx.sandbox.read_file(
            "sibling/private.txt",
            None,
            None
        )));
        assert!(outside_err(fx.sandbox.list_dir(Some("sibling"))));
    }

    // --- escapes, through every tool ---

    #[test]
    fn every_tool_refuses_absolute_paths() {
        let fx = Fixture::new();
        let secret = fx.outside("secret.txt").display().to_string();
        for path in [
            secret.as_str(),
            "/etc/passwd",
            "\\etc",
            "C:",
            "C:/x",
            "c:\\x",
        ] {
            let results = [
                fx.sandbox.read_file(path, None, None),
                fx.sandbox.write_file(path, "x"),
                fx.sandbox.list_dir(Some(path)),
                fx.sandbox.search_files("SECRET", Some(path), None),
            ];
            for r in results {
                let err = r.unwrap_err();
                assert!(matches!(err, ToolError::Absolute), "{path}: {err}");
                assert_eq!(
                    err.to_string(),
                    "paths are relative to the working directory"
                );
            }
        }
        assert_eq!(fx.outside_files().len(), 2);
    }

    #[test]
    fn every_tool_refuses_dot_dot_above_the_cwd() {
        let fx = Fixture::new();
        let before = fx.outside_files();
        for path in [
            "..",
            "../",
            "../outside/secret.txt",
            "../../outside/secret.txt",
            "a/../../outside/secret.txt",
            "./../proj/../..",
            "..\\..\\outside\\secret.txt",
        ] {
            assert!(
                outside_err(fx.sandbox.read_file(path, None, None)),
                "{path}"
            );
            assert!(outside_err(fx.sandbox.write_file(path, "x")), "{path}");
            assert!(outside_err(fx.sandbox.list_dir(Some(path))), "{path}");
            assert!(outside_err(fx.sandbox.search_files(
                "SECRET",
                Some(path),
                None
            )));
        }
        assert_eq!(fx.outside_files(), before);
        assert!(!fx.base("a").exists());
    }

    #[test]
    fn percent_encoded_dots_are_plain_names() {
        let fx = Fixture::new();
        assert!(matches!(
            fx.sandbox
                .read_file("%2e%2e/outside/secret.txt", None, None),
            Err(ToolError::NotFound(_))
        ));
        fx.sandbox.write_file("%2e%2e/x.txt", "literal").unwrap();
        assert_eq!(
            fs::read_to_string(fx.base("%2e%2e/x.txt")).unwrap(),
            "literal"
        );
        assert!(fx.sandbox.list_dir(None).unwrap().contains("%2e%2e/"));
    }

    #[test]
    fn nul_bytes_and_overlong_paths_are_errors() {
        let fx = Fixture::new();
        let long_name = "n".repeat(300);
        let long_path = "d/".repeat(3000);
        for path in ["a\0b", long_name.as_str(), long_path.as_str()] {
            let results = [
                fx.sandbox.read_file(path, None, None),
                fx.sandbox.write_file(path, "x"),
                fx.sandbox.list_dir(Some(path)),
                fx.sandbox.search_files("x", Some(path), None),
            ];
            for r in results {
                let msg = fx.message(r.unwrap_err());
                assert!(msg.len() < 400, "{msg}");
            }
        }
        assert!(!fx.base("d").exists());
    }

    #[test]
    fn a_symlink_to_a_file_outside_is_refused_by_every_tool() {
        let fx = Fixture::new();
        fx.link(&fx.outside("secret.txt"), "leak.txt");
        let before = fx.outside_files();
        assert!(outside_err(fx.sandbox.read_file("leak.txt", None, None)));
        assert!(outside_err(
            fx.sandbox.write_file("leak.txt", "overwritten")
        ));
        assert!(outside_err(fx.sandbox.list_dir(Some("leak.txt"))));
        assert!(outside_err(fx.sandbox.search_files(
            "SECRET",
            Some("leak.txt"),
            None
        )));
        let all = fx.sandbox.search_files("SECRET", None, None).unwrap();
        assert!(all.starts_with("no matches"), "{all}");
        assert_eq!(fx.outside_files(), before);
        assert!(
            fs::symlink_metadata(fx.base("leak.txt"))
                .unwrap()
                .is_symlink()
        );
    }

    #[test]
    fn a_symlink_to_a_dir_outside_is_refused_by_every_tool() {
        let fx = Fixture::new();
        fx.link(&fx.outside("dir"), "out");
        let before = fx.outside_files();
        assert!(outside_err(fx.sandbox.read_file(
            "out/inner.txt",
            None,
            None
        )));
        assert!(outside_err(fx.sandbox.read_file(
            "out/missing.txt",
            None,
            None
        )));
        // `..` is resolved lexically, not through the link: this is `secret.txt` in the cwd.
        assert!(matches!(
            fx.sandbox.read_file("out/../secret.txt", None, None),
            Err(ToolError::NotFound(_))
        ));
        assert!(outside_err(fx.sandbox.write_file("out/inner.txt", "x")));
        assert!(outside_err(fx.sandbox.write_file("out/new.txt", "x")));
        assert!(outside_err(fx.sandbox.list_dir(Some("out"))));
        assert!(outside_err(fx.sandbox.list_dir(Some("out/"))));
        assert!(outside_err(fx.sandbox.search_files(
            "SECRET",
            Some("out"),
            None
        )));
        let all = fx.sandbox.search_files("SECRET", None, None).unwrap();
        assert!(all.starts_with("no matches"), "{all}");
        assert_eq!(fx.outside_files(), before);
    }

    #[test]
    fn write_file_refuses_a_symlinked_parent_dir_leading_outside() {
        let fx = Fixture::new();
        fx.link(&fx.outside(""), "parent");
        fx.put("sub/keep.txt", "");
        symlink(fx.outside("dir"), fx.base("sub/deep")).unwrap();
        let before = fx.outside_files();
        for path in [
            "parent/new.txt",
            "parent/made/deeper/new.txt",
            "parent/secret.txt",
            "sub/deep/new.txt",
            "sub/deep/x/y.txt",
        ] {
            let err = fx.sandbox.write_file(path, "x").unwrap_err();
            assert!(matches!(err, ToolError::Outside(_)), "{path}: {err}");
            fx.message(err);
        }
        assert_eq!(fx.outside_files(), before);
        assert!(!fx.outside("made").exists());
        assert!(!fx.outside("dir/x").exists());
    }

    #[test]
    fn broken_links_are_refused_not_followed() {
        let fx = Fixture::new();
        fx.link(&fx.outside("not-there.txt"), "dangling.txt");
        fx.link(&fx.outside("not-there"), "dangling-dir");
        assert!(matches!(
            fx.sandbox.read_file("dangling.txt", None, None),
            Err(ToolError::BrokenLink(_))
        ));
        assert!(matches!(
            fx.sandbox.write_file("dangling.txt", "x"),
            Err(ToolError::BrokenLink(_))
        ));
        assert!(matches!(
            fx.sandbox.write_file("dangling-dir/x.txt", "x"),
            Err(ToolError::BrokenLink(_))
        ));
        assert!(!fx.outside("not-there.txt").exists());
        assert!(!fx.outside("not-there").exists());
    }

    #[test]
    fn symlinks_that_stay_inside_are_followed() {
        let fx = Fixture::new();
        fx.put("real/data.txt", "one\n");
        fx.link(Path::new("real/data.txt"), "alias.txt");
        fx.link(Path::new("real"), "alias-dir");
        assert_eq!(
            fx.sandbox.read_file("alias.txt", None, None).unwrap(),
            "one\n"
        );
        assert_eq!(
            fx.sandbox
                .read_file("alias-dir/data.txt", None, None)
                .unwrap(),
            "one\n"
        );
        assert_eq!(
            fx.sandbox.write_file("alias.txt", "two\n").unwrap(),
            "wrote 4 bytes to alias.txt"
        );
        assert_eq!(
            fs::read_to_string(fx.base("real/data.txt")).unwrap(),
            "two\n"
        );
        assert!(
            fs::symlink_metadata(fx.base("alias.txt"))
                .unwrap()
                .is_symlink()
        );
        fx.sandbox.write_file("alias-dir/new.txt", "3").unwrap();
        assert_eq!(fs::read_to_string(fx.base("real/new.txt")).unwrap(), "3");
        assert_eq!(
            fx.sandbox.list_dir(Some("alias-dir")).unwrap(),
            "data.txt (4 bytes)\nnew.txt (1 bytes)\n"
        );
    }

    // --- read_file ---

    #[test]
    fn read_file_returns_the_whole_text() {
        let fx = Fixture::new();
        fx.put("a.txt", "héllo\nworld");
        assert_eq!(
            fx.sandbox.read_file("a.txt", None, None).unwrap(),
            "héllo\nworld"
        );
        fx.put("empty.txt", "");
        assert_eq!(fx.sandbox.read_file("empty.txt", None, None).unwrap(), "");
    }

    #[test]
    fn read_file_selects_lines_and_says_where_to_continue() {
        let fx = Fixture::new();
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        fx.put("ten.txt", &text);
        let r = |o, l| fx.sandbox.read_file("ten.txt", o, l).unwrap();
        assert_eq!(
            r(Some(3), Some(2)),
            "line 3\nline 4\n[showing lines 3-4; more follows from offset_line=5]"
        );
        assert_eq!(r(Some(9), Some(5)), "line 9\nline 10\n");
        assert_eq!(r(Some(10), None), "line 10\n");
        assert_eq!(r(Some(0), None), text);
        assert_eq!(r(None, Some(10)), text);
        assert_eq!(
            r(Some(11), None),
            "[the file has 10 lines; offset_line 11 is past the end]"
        );
        fx.put("partial.txt", "a\nb");
        assert_eq!(
            fx.sandbox.read_file("partial.txt", Some(2), None).unwrap(),
            "b"
        );
        assert_eq!(
            fx.sandbox.read_file("partial.txt", Some(4), None).unwrap(),
            "[the file has 2 lines; offset_line 4 is past the end]"
        );
        assert!(matches!(
            fx.sandbox.read_file("ten.txt", None, Some(0)),
            Err(ToolError::Invalid(_))
        ));
    }

    #[test]
    fn read_file_truncates_at_the_byte_cap_on_a_line_boundary() {
        let fx = Fixture::new();
        let line = format!("{}\n", "x".repeat(99)); // 100 bytes
        let lines = MAX_READ_BYTES / 100 + 50;
        fx.put("big.txt", line.repeat(lines));
        let out = fx.sandbox.read_file("big.txt", None, None).unwrap();
        let shown = MAX_READ_BYTES / 100;
        let (text, note) = out.rsplit_once('\n').unwrap();
        assert_eq!(text.len() + 1, shown * 100);
        assert_eq!(
            note,
            format!(
                "[truncated at 256 KiB: showing lines 1-{shown}; continue with offset_line={}]",
                shown + 1
            )
        );
        let rest = fx
            .sandbox
            .read_file("big.txt", Some(shown + 1), None)
            .unwrap();
        assert_eq!(rest, line.repeat(lines - shown));
    }

    #[test]
    fn read_file_cuts_a_single_huge_line_at_a_character_boundary() {
        let fx = Fixture::new();
        // 'é' is two bytes; an odd prefix puts a character across the cap.
        fx.put(
            "long.txt",
            format!("a{}\nnext\n", "é".repeat(MAX_READ_BYTES)),
        );
        let out = fx.sandbox.read_file("long.txt", None, None).unwrap();
        let (text, note) = out.rsplit_once('\n').unwrap();
        assert_eq!(text.len(), MAX_READ_BYTES - 1);
        assert!(text.starts_with("aé"));
        assert_eq!(
            note,
            "[line 1 is longer than 256 KiB; only its start is shown; the next line is offset_line=2]"
        );
        assert_eq!(
            fx.sandbox.read_file("long.txt", Some(2), None).unwrap(),
            "next\n"
        );
    }

    #[test]
    fn read_file_refuses_binary_and_non_utf8_files() {
        let fx = Fixture::new();
        fx.put("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
        let msg = fx.message(fx.sandbox.read_file("image.png", None, None).unwrap_err());
        assert_eq!(
            msg,
            "image.png: is a binary file; only text files can be read"
        );
        // A NUL past the sniffed head is caught in the text read.
        let mut late = vec![b'a'; SNIFF_BYTES + 10];
        late.push(0);
        fx.put("late.bin", late);
        assert!(matches!(
            fx.sandbox.read_file("late.bin", None, None),
            Err(ToolError::Binary(_))
        ));
        fx.put("latin1.txt", b"caf\xe9\n");
        assert!(matches!(
            fx.sandbox.read_file("latin1.txt", None, None),
            Err(ToolError::NotText(_))
        ));
    }

    #[test]
    fn read_file_refuses_directories_missing_files_and_special_files() {
        let fx = Fixture::new();
        fx.put("dir/x", "");
        assert!(matches!(
            fx.sandbox.read_file("dir", None, None),
            Err(ToolError::IsADirectory(_))
        ));
        assert!(matches!(
            fx.sandbox.read_file("", None, None),
            Err(ToolError::IsADirectory(_))
        ));
        let msg = fx.message(fx.sandbox.read_file("nope.txt", None, None).unwrap_err());
        assert_eq!(msg, "nope.txt: no such file or directory");
        assert!(matches!(
            fx.sandbox.read_file("dir/x/y", None, None),
            Err(ToolError::NotFound(_))
        ));
        // A FIFO would block an ordinary open; it is refused at once.
        let fifo = std::ffi::CString::new(fx.base("pipe").to_string_lossy().into_owned()).unwrap();
        // SAFETY: `fifo` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            fx.sandbox.read_file("pipe", None, None),
            Err(ToolError::NotAFile(_))
        ));
        assert!(
            fx.sandbox
                .list_dir(None)
                .unwrap()
                .contains("pipe (special file)")
        );
        assert!(
            fx.sandbox
                .search_files("x", None, None)
                .unwrap()
                .starts_with("no matches")
        );
    }

    // --- write_file ---

    #[test]
    fn write_file_creates_nested_dirs() {
        let fx = Fixture::new();
        assert_eq!(
            fx.sandbox.write_file("a/b/c/new.txt", "hello").unwrap(),
            "wrote 5 bytes to a/b/c/new.txt"
        );
        assert_eq!(
            fs::read_to_string(fx.base("a/b/c/new.txt")).unwrap(),
            "hello"
        );
        assert_eq!(
            fx.sandbox.write_file("./a//b/../d.txt", "").unwrap(),
            "wrote 0 bytes to a/d.txt"
        );
        assert!(fx.base("a/d.txt").is_file());
    }

    #[test]
    fn write_file_replaces_atomically_keeps_permissions_and_leaves_no_temporary_files() {
        let fx = Fixture::new();
        fx.put("script.sh", "old");
        fs::set_permissions(fx.base("script.sh"), fs::Permissions::from_mode(0o750)).unwrap();
        fx.sandbox.write_file("script.sh", "new content").unwrap();
        assert_eq!(
            fs::read_to_string(fx.base("script.sh")).unwrap(),
            "new content"
        );
        let mode = fs::metadata(fx.base("script.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o750);
        assert_eq!(fx.sandbox.list_dir(None).unwrap(), "script.sh (11 bytes)\n");
    }

    #[test]
    fn write_file_refuses_directories_empty_paths_and_oversized_content() {
        let fx = Fixture::new();
        fx.put("dir/x", "");
        fx.put("file.txt", "");
        assert!(matches!(
            fx.sandbox.write_file("dir", "x"),
            Err(ToolError::IsADirectory(_))
        ));
        for path in ["", ".", "new/", "dir/"] {
            assert!(
                matches!(fx.sandbox.write_file(path, "x"), Err(ToolError::Invalid(_))),
                "{path:?}"
            );
        }
        assert!(!fx.base("new").exists());
        assert!(matches!(
            fx.sandbox.write_file("file.txt/below.txt", "x"),
            Err(ToolError::NotADirectory(_))
        ));
        let big = "x".repeat(MAX_WRITE_BYTES + 1);
        assert!(matches!(
            fx.sandbox.write_file("big.txt", &big),
            Err(ToolError::Invalid(_))
        ));
        assert!(!fx.base("big.txt").exists());
    }

    // --- list_dir ---

    #[test]
    fn list_dir_sorts_entries_marks_dirs_and_shows_sizes() {
        let fx = Fixture::new();
        fx.put("b.txt", "12345");
        fx.put("a/inner.txt", "");
        fx.put(".hidden", "x");
        fx.put("c/d/e.txt", "");
        assert_eq!(
            fx.sandbox.list_dir(None).unwrap(),
            ".hidden (1 bytes)\na/\nb.txt (5 bytes)\nc/\n"
        );
        assert_eq!(
            fx.sandbox.list_dir(Some(".")).unwrap(),
            fx.sandbox.list_dir(Some("")).unwrap()
        );
        assert_eq!(
            fx.sandbox.list_dir(Some("c/d")).unwrap(),
            "e.txt (0 bytes)\n"
        );
        fx.put("empty/.keep", "");
        fs::remove_file(fx.base("empty/.keep")).unwrap();
        assert_eq!(
            fx.sandbox.list_dir(Some("empty")).unwrap(),
            "(empty directory)"
        );
        assert!(matches!(
            fx.sandbox.list_dir(Some("b.txt")),
            Err(ToolError::NotADirectory(_))
        ));
        assert!(matches!(
            fx.sandbox.list_dir(Some("nope")),
            Err(ToolError::NotFound(_))
        ));
    }

    #[test]
    fn list_dir_shows_where_links_lead_without_naming_anything_outside() {
        let fx = Fixture::new();
        fx.put("real/f.txt", "abc");
        fx.link(Path::new("real"), "to-dir");
        fx.link(Path::new("real/f.txt"), "to-file");
        fx.link(&fx.outside("secret.txt"), "to-outside");
        fx.link(Path::new("missing"), "to-nothing");
        let out = fx.sandbox.list_dir(None).unwrap();
        assert_eq!(
            out,
            "real/\n\
             to-dir -> real/\n\
             to-file -> real/f.txt (3 bytes)\n\
             to-nothing -> (broken link)\n\
             to-outside -> (outside the working directory)\n"
        );
    }

    #[test]
    fn list_dir_caps_the_number_of_entries() {
        let fx = Fixture::new();
        for i in 0..MAX_LIST_ENTRIES + 5 {
            fx.put(&format!("f{i:05}"), "");
        }
        let out = fx.sandbox.list_dir(None).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), MAX_LIST_ENTRIES + 1);
        assert_eq!(lines[0], "f00000 (0 bytes)");
        assert_eq!(lines[MAX_LIST_ENTRIES - 1], "f00999 (0 bytes)");
        assert_eq!(
            lines[MAX_LIST_ENTRIES],
            "[showing the first 1000 of 1005 entries]"
        );
    }

    // --- search_files ---

    #[test]
    fn search_files_finds_literal_case_sensitive_matches_with_relative_paths() {
        let fx = Fixture::new();
        fx.put("src/main.rs", "fn main() {\n    let a = b.*c;\n}\n");
        fx.put("src/lib.rs", "// Main\nfn main_helper() {}\r\n");
        fx.put("README.md", "run main\n");
        assert_eq!(
            fx.sandbox.search_files("main", None, None).unwrap(),
            "README.md:1: run main\nsrc/lib.rs:2: fn main_helper() {}\nsrc/main.rs:1: fn main() {\n"
        );
        assert_eq!(
            fx.sandbox.search_files("b.*c", Some("src"), None).unwrap(),
            "src/main.rs:2:     let a = b.*c;\n"
        );
        assert_eq!(
            fx.sandbox
                .search_files("Main", Some("src/lib.rs"), None)
                .unwrap(),
            "src/lib.rs:1: // Main\n"
        );
        assert_eq!(
            fx.sandbox.search_files("absent", None, None).unwrap(),
            "no matches for \"absent\"\n"
        );
        assert!(matches!(
            fx.sandbox.search_files("", None, None),
            Err(ToolError::Invalid(_))
        ));
        assert!(matches!(
            fx.sandbox.search_files("a\nb", None, None),
            Err(ToolError::Invalid(_))
        ));
    }

    #[test]
    fn search_files_glob_filters_file_names() {
        let fx = Fixture::new();
        fx.put("a.rs", "hit\n");
        fx.put("a.rs.bak", "hit\n");
        fx.put("sub/test_b.rs", "hit\n");
        fx.put("sub/b.txt", "hit\n");
        let s = |glob| fx.sandbox.search_files("hit", None, Some(glob)).unwrap();
        assert_eq!(s("*.rs"), "a.rs:1: hit\nsub/test_b.rs:1: hit\n");
        assert_eq!(s("test_*"), "sub/test_b.rs:1: hit\n");
        assert_eq!(s("?.txt"), "sub/b.txt:1: hit\n");
        assert_eq!(
            s("*.rs*"),
            "a.rs:1: hit\na.rs.bak:1: hit\nsub/test_b.rs:1: hit\n"
        );
        assert_eq!(s("").lines().count(), 4);
        assert!(matches!(
            fx.sandbox.search_files("hit", None, Some("sub/*.rs")),
            Err(ToolError::Invalid(_))
        ));
    }

    #[test]
    fn search_files_stops_at_the_match_cap_and_says_so() {
        let fx = Fixture::new();
        fx.put("many.txt", "match\n".repeat(MAX_MATCHES + 1));
        let out = fx.sandbox.search_files("match", None, None).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), MAX_MATCHES + 1);
        assert_eq!(lines[MAX_MATCHES - 1], "many.txt:200: match");
        assert_eq!(
            lines[MAX_MATCHES],
            "[stopped at 200 matches; narrow the search with path or glob]"
        );
        // Exactly the cap is not a cut.
        fx.put("many.txt", "match\n".repeat(MAX_MATCHES));
        let out = fx.sandbox.search_files("match", None, None).unwrap();
        assert_eq!(out.lines().count(), MAX_MATCHES);
    }

    #[test]
    fn search_files_skips_binary_and_huge_files_and_clips_long_lines() {
        let fx = Fixture::new();
        fx.put("bin.dat", b"needle\0\0");
        let mut late = b"needle\n".repeat(SNIFF_BYTES);
        late.push(0);
        fx.put("late.bin", late);
        fx.put(
            "huge.txt",
            format!("needle\n{}", "x".repeat(MAX_SEARCH_FILE_BYTES as usize)),
        );
        fx.put("long.txt", format!("needle{}\n", "y".repeat(1000)));
        fx.put(".git/config", "needle\n");
        let out = fx.sandbox.search_files("needle", None, None).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].starts_with("long.txt:1: needleyyy"));
        assert!(lines[0].ends_with('…'));
        assert_eq!(
            lines[0].chars().count(),
            "long.txt:1: ".len() + MAX_MATCH_LINE_CHARS + 1
        );
        assert_eq!(lines[1], "[skipped files larger than 4 MiB: 1]");
        // Named explicitly, a version-control folder is searched.
        assert_eq!(
            fx.sandbox
                .search_files("needle", Some(".git"), None)
                .unwrap(),
            ".git/config:1: needle\n"
        );
    }

    #[test]
    fn search_files_does_not_follow_links_even_inside() {
        let fx = Fixture::new();
        fx.put("real/a.txt", "needle\n");
        fx.link(Path::new("real"), "alias");
        fx.link(Path::new("."), "loop");
        fx.link(&fx.outside(""), "out");
        assert_eq!(
            fx.sandbox.search_files("needle", None, None).unwrap(),
            "real/a.txt:1: needle\n"
        );
        // A link inside named as the path is resolved like any other path.
        assert_eq!(
            fx.sandbox
                .search_files("needle", Some("alias"), None)
                .unwrap(),
            "alias/a.txt:1: needle\n"
        );
    }

    #[test]
    fn glob_matches_stars_and_question_marks() {
        let m = |g: &str, n: &str| {
            glob_match(
                &g.chars().collect::<Vec<_>>(),
                &n.chars().collect::<Vec<_>>(),
            )
        };
        assert!(m("*.rs", "main.rs"));
        assert!(m("*.rs", ".rs"));
        assert!(!m("*.rs", "main.rsx"));
        assert!(m("test_*", "test_a.py"));
        assert!(m("*", ""));
        assert!(m("a*b*c", "aXXbYYbc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("?.txt", "é.txt"));
        assert!(!m("?.txt", "ab.txt"));
        assert!(m("**x", "x"));
        assert!(!m("", "x"));
    }
}
