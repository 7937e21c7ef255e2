//! The archive's container: a POSIX ustar stream, written and read here by hand.
//!
//! Why not a crate: an archive holds a few kinds of plain files with short names that sessiond
//! chooses itself (`sessions/<id>/events.jsonl`, `files/<sha-256>`), so the whole format needed
//! is a 512-byte header with a name, a size, a mode and a checksum, the data padded to 512
//! bytes, and two zero blocks at the end: some eighty lines. The `tar` crate is not in the tree
//! and would bring symlinks, sparse files, long names and extended headers that an archive
//! never holds and an import would have to refuse anyway. What is written is a standard tar
//! file: `tar tf`, `tar xf` and every archive tool read it.
//!
//! Reading is strict: only regular files (type `0`), names of at most 100 bytes that are
//! relative and free of `..`, each header's checksum right, sizes within what was received.

use crate::error::{Error, Result};

const BLOCK: usize = 512;

/// One member of an archive.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub data: Vec<u8>,
}

/// Appends one regular file to `out`. Names are made by sessiond and always fit the 100 bytes
/// of a ustar name (checked nevertheless, since a longer one would be cut silently).
pub fn write_member(out: &mut Vec<u8>, name: &str, data: &[u8], mtime_secs: u64) -> Result<()> {
    if name.len() > 100 || name.is_empty() {
        return Err(Error::Internal(format!(
            "archive member name {name:?} does not fit a tar header"
        )));
    }
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], data.len() as u64);
    octal(&mut h[136..148], mtime_secs);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    let field = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(field.as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len() + padding(data.len()), 0);
    Ok(())
}

/// The end of an archive: two zero blocks.
pub fn write_end(out: &mut Vec<u8>) {
    out.resize(out.len() + 2 * BLOCK, 0);
}

fn padding(len: usize) -> usize {
    (BLOCK - len % BLOCK) % BLOCK
}

/// Writes `value` as zero-padded octal digits with a NUL at the end of `field`.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
    field[digits] = 0;
}

fn parse_octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// Every member of an archive, in order. A malformed archive is a 400 naming what is wrong.
pub fn read_members(bytes: &[u8]) -> Result<Vec<Member>> {
    let bad = |why: String| Error::invalid(format!("archive: {why}"));
    let mut members = Vec::new();
    let mut at = 0usize;
    loop {
        let Some(h) = bytes.get(at..at + BLOCK) else {
            return Err(bad("ends before its end-of-archive blocks".into()));
        };
        if h.iter().all(|&b| b == 0) {
            return Ok(members);
        }
        let stored = parse_octal(&h[148..156])
            .ok_or_else(|| bad(format!("header at byte {at}: not a tar header")))?;
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        if sum != stored {
            return Err(bad(format!("header at byte {at}: wrong header checksum")));
        }
        let name_len = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = std::str::from_utf8(&h[..name_len])
            .map_err(|_| bad(format!("header at byte {at}: name is not UTF-8")))?
            .to_owned();
        if h[345] != 0 {
            return Err(bad(format!("{name}: long names are not used in archives")));
        }
        if !matches!(h[156], b'0' | 0) {
            return Err(bad(format!("{name}: only regular files are allowed")));
        }
        if name.is_empty()
            || name.starts_with('/')
            || name
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Err(bad(format!("{name:?}: not a plain relative member name")));
        }
        let size = parse_octal(&h[124..136])
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| bad(format!("{name}: unreadable size")))?;
        let start = at + BLOCK;
        let data = start
            .checked_add(size)
            .and_then(|end| bytes.get(start..end))
            .ok_or_else(|| bad(format!("{name}: truncated")))?;
        members.push(Member {
            name,
            data: data.to_vec(),
        });
        at = start + size + padding(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_written_are_read_back_in_order() {
        let mut out = Vec::new();
        write_member(&mut out, "a/b.json", b"{}", 1).unwrap();
        write_member(&mut out, "empty", b"", 1).unwrap();
        write_member(&mut out, "big", &[7u8; 1000], 1).unwrap();
        write_end(&mut out);
        assert_eq!(out.len() % 512, 0);
        let m = read_members(&out).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(
            (m[0].name.as_str(), m[0].data.as_slice()),
            ("a/b.json", &b"{}"[..])
        );
        assert!(m[1].data.is_empty());
        assert_eq!(m[2].data, vec![7u8; 1000]);
    }

    #[test]
    fn a_damaged_header_or_a_truncated_archive_is_refused() {
        let mut out = Vec::new();
        write_member(&mut out, "x", b"hello", 1).unwrap();
        write_end(&mut out);
        let mut bad = out.clone();
        bad[3] ^= 1;
        assert!(read_members(&bad).is_err());
        assert!(read_members(&out[..600]).is_err());
        let mut up = Vec::new();
        write_member(&mut up, "../x", b"", 1).unwrap();
        write_end(&mut up);
        assert!(read_members(&up).is_err());
    }
}
