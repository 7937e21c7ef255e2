//! The workspace drive by path (`GET /v1/ws/{ws}/files`, `GET`/`PUT …/files/content`): listings,
//! downloads with their headers, uploads that never replace a file, the scopes each route needs,
//! workspaces kept apart, and paths that try to leave the drive (`..`, absolute, encoded, links
//! out of it) refused with a 4xx that changes nothing. Agent keys are refused on these routes by
//! `tests/agent_keys.rs`, which walks every documented route.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use reqwest::blocking::Client;
use serde_json::{Value, json};

fn drive(s: &Server, ws: &str) -> PathBuf {
    let d = s.data_dir.join("drive").join(ws);
    std::fs::create_dir_all(&d).expect("create drive");
    d
}

fn write(s: &Server, rel: &str, bytes: &[u8]) {
    let p = drive(s, "default").join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, bytes).expect("write file in drive");
}

fn list_url(s: &Server, ws: &str, path: &str) -> String {
    s.url(&format!("/v1/ws/{ws}/files?path={}", query_escape(path)))
}

fn content_url(s: &Server, ws: &str, path: &str) -> String {
    s.url(&format!(
        "/v1/ws/{ws}/files/content?path={}",
        query_escape(path)
    ))
}

fn put_bytes(c: &Client, key: &str, url: &str, bytes: Vec<u8>) -> (u16, Value) {
    into_json(
        c.put(url)
            .header("authorization", format!("Bearer {key}"))
            .body(bytes)
            .send()
            .expect("PUT"),
    )
}

fn get_with(c: &Client, key: &str, url: &str) -> (u16, Value) {
    into_json(
        c.get(url)
            .header("authorization", format!("Bearer {key}"))
            .send()
            .expect("GET"),
    )
}

fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Every file, folder and link under `dir` (not following links), relative to `dir`.
fn tree(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            out.insert(
                p.strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned(),
            );
            if e.file_type().expect("file type").is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, dir, &mut out);
    out
}

/// A key of the `default` workspace with these scopes, made through the keys route.
fn key_with(s: &Server, scopes: &[&str]) -> String {
    let (st, made) = s.post(
        &s.url("/v1/ws/default/keys"),
        &json!({"name": scopes.join("+"), "scopes": scopes}),
    );
    assert_eq!(st, 201, "{made}");
    made["key"].as_str().expect("key").to_owned()
}

fn names(listing: &Value) -> Vec<String> {
    listing["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["name"].as_str().expect("name").to_owned())
        .collect()
}

#[test]
fn folders_list_and_files_download_with_safe_headers() {
    let s = Server::start();
    write(&s, "docs/readme.md", b"# Title\n\nSome *text*.\n");
    write(&s, "docs/pic.png", b"\x89PNG\r\n\x1a\nnot really");
    write(&s, "docs/page.html", b"<script>alert(1)</script>");
    write(&s, "docs/r\u{e9}sum\u{e9} \"1\".txt", b"cv");
    write(&s, "docs/blob.bin", &[0, 1, 2]);
    std::fs::create_dir_all(drive(&s, "default").join("docs/sub")).expect("mkdir");
    write(&s, "top.txt", b"top");

    // The root: folders first, then files; `path` absent and `path=` alike.
    for url in [
        s.url("/v1/ws/default/files"),
        list_url(&s, "default", ""),
        list_url(&s, "default", "."),
    ] {
        let (st, root) = s.get(&url);
        assert_eq!(st, 200, "{root}");
        assert_eq!(root["path"], "");
        assert_eq!(root["truncated"], false);
        let n = names(&root);
        let docs = n.iter().position(|x| x == "docs").expect("docs listed");
        let top = n
            .iter()
            .position(|x| x == "top.txt")
            .expect("top.txt listed");
        assert!(docs < top, "folders first: {n:?}");
    }
    let (st, docs) = s.get(&list_url(&s, "default", "docs/"));
    assert_eq!(st, 200, "{docs}");
    assert_eq!(docs["path"], "docs");
    assert_eq!(names(&docs)[0], "sub");
    let entries = docs["entries"].as_array().expect("entries");
    let md = entries
        .iter()
        .find(|e| e["name"] == "readme.md")
        .expect("readme.md");
    assert_eq!(md["path"], "docs/readme.md");
    assert_eq!(md["kind"], "file");
    assert_eq!(md["size"], 22);
    assert_eq!(md["type"], "text/markdown");
    assert_eq!(md["preview"], "markdown");
    assert!(md["modifiedAt"].as_i64().expect("modifiedAt") > 1_600_000_000_000);
    let sub = entries.iter().find(|e| e["name"] == "sub").expect("sub");
    assert_eq!(sub["kind"], "dir");
    assert!(sub.get("size").is_none(), "{sub}");
    let png = entries
        .iter()
        .find(|e| e["name"] == "pic.png")
        .expect("png");
    assert_eq!(png["preview"], "image");
    let bin = entries
        .iter()
        .find(|e| e["name"] == "blob.bin")
        .expect("bin");
    assert!(bin.get("preview").is_none(), "{bin}");

    // A download: the bytes as an attachment, never sniffed, sandboxed.
    let (st, h, body) = s.get_bytes(&content_url(&s, "default", "docs/readme.md"));
    assert_eq!(st, 200);
    assert_eq!(body, b"# Title\n\nSome *text*.\n");
    assert_eq!(header(&h, "content-type"), "text/markdown");
    assert!(header(&h, "content-disposition").starts_with("attachment;"));
    assert_eq!(header(&h, "x-content-type-options"), "nosniff");
    assert!(header(&h, "content-security-policy").contains("sandbox"));
    assert_eq!(header(&h, "content-length"), "22");

    // Inline: text of every kind as text/plain, images as themselves.
    let (_, h, _) = s.get_bytes(&format!(
        "{}&inline=1",
        content_url(&s, "default", "docs/readme.md")
    ));
    assert_eq!(header(&h, "content-type"), "text/plain; charset=utf-8");
    assert!(header(&h, "content-disposition").starts_with("inline;"));
    let (_, h, body) = s.get_bytes(&format!(
        "{}&inline=1",
        content_url(&s, "default", "docs/page.html")
    ));
    assert_eq!(header(&h, "content-type"), "text/plain; charset=utf-8");
    assert!(header(&h, "content-security-policy").contains("sandbox"));
    assert_eq!(body, b"<script>alert(1)</script>");
    let (_, h, _) = s.get_bytes(&content_url(&s, "default", "docs/page.html"));
    assert!(header(&h, "content-disposition").starts_with("attachment;"));
    let (_, h, _) = s.get_bytes(&format!(
        "{}&inline=1",
        content_url(&s, "default", "docs/pic.png")
    ));
    assert_eq!(header(&h, "content-type"), "image/png");
    assert!(header(&h, "content-disposition").starts_with("inline;"));
    // What has no preview stays an attachment even when asked inline.
    let (_, h, _) = s.get_bytes(&format!(
        "{}&inline=1",
        content_url(&s, "default", "docs/blob.bin")
    ));
    assert_eq!(header(&h, "content-type"), "application/octet-stream");
    assert!(header(&h, "content-disposition").starts_with("attachment;"));
    // A name outside ASCII (and with quotes) in both forms of the disposition.
    let (st, h, body) = s.get_bytes(&content_url(
        &s,
        "default",
        "docs/r\u{e9}sum\u{e9} \"1\".txt",
    ));
    assert_eq!(st, 200);
    assert_eq!(body, b"cv");
    let d = header(&h, "content-disposition");
    assert!(d.contains("filename=\"r_sum_ _1_.txt\""), "{d}");
    assert!(
        d.contains("filename*=UTF-8''r%C3%A9sum%C3%A9%20%221%22%2Etxt"),
        "{d}"
    );

    // Wrong kinds, missing things and bad parameters: clear 4xx JSON errors.
    for (url, status, code) in [
        (content_url(&s, "default", "docs"), 400, "invalid_request"),
        (list_url(&s, "default", "top.txt"), 400, "invalid_request"),
        (
            content_url(&s, "default", "docs/none.txt"),
            404,
            "not_found",
        ),
        (list_url(&s, "default", "nowhere"), 404, "not_found"),
        (
            s.url("/v1/ws/default/files/content"),
            400,
            "invalid_request",
        ),
        (
            format!("{}&inline=maybe", content_url(&s, "default", "top.txt")),
            400,
            "invalid_request",
        ),
        (
            format!("{}&extra=1", list_url(&s, "default", "")),
            400,
            "invalid_request",
        ),
    ] {
        let (st, v) = s.get(&url);
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(code)),
            "{url}: {v}"
        );
        assert!(v["message"].is_string(), "{v}");
    }
}

#[test]
fn uploads_write_new_files_in_existing_folders_only() {
    let s = Server::start();
    let c = http_builder().build().expect("client");
    write(&s, "docs/keep.txt", b"original");
    let (st, v) = put_bytes(
        &c,
        &s.token,
        &content_url(&s, "default", "docs/new note.txt"),
        b"hello".to_vec(),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(
        v,
        json!({"path": "docs/new note.txt", "name": "new note.txt", "bytes": 5})
    );
    assert_eq!(
        std::fs::read(drive(&s, "default").join("docs/new note.txt")).expect("written"),
        b"hello"
    );
    // The drive root is a folder too.
    let (st, v) = put_bytes(
        &c,
        &s.token,
        &content_url(&s, "default", "root.txt"),
        b"r".to_vec(),
    );
    assert_eq!((st, v["path"].as_str()), (201, Some("root.txt")), "{v}");

    let before = tree(&drive(&s, "default"));
    // Never replaced; a missing folder is not made; a name that hides itself is refused.
    for (path, status, code) in [
        ("docs/keep.txt", 409, "exists"),
        ("nowhere/x.txt", 404, "not_found"),
        ("docs", 409, "exists"),
        ("docs/", 400, "invalid_request"),
        ("docs/a\u{202e}txt.exe", 400, "invalid_request"),
        ("docs/keep.txt/x", 400, "invalid_request"),
    ] {
        let (st, v) = put_bytes(
            &c,
            &s.token,
            &content_url(&s, "default", path),
            b"new".to_vec(),
        );
        assert_eq!(
            (st, v["error"].as_str()),
            (status, Some(code)),
            "{path}: {v}"
        );
    }
    assert_eq!(tree(&drive(&s, "default")), before);
    assert_eq!(
        std::fs::read(drive(&s, "default").join("docs/keep.txt")).expect("kept"),
        b"original"
    );

    // Reading needs `sessions:read`; writing needs `files:write`.
    let reader = key_with(&s, &["sessions:read"]);
    let (st, v) = get_with(&c, &reader, &list_url(&s, "default", "docs"));
    assert_eq!(st, 200, "{v}");
    for key in [reader, key_with(&s, &["sessions"])] {
        let (st, v) = put_bytes(
            &c,
            &key,
            &content_url(&s, "default", "docs/denied.txt"),
            b"x".to_vec(),
        );
        assert_eq!((st, v["error"].as_str()), (403, Some("forbidden")), "{v}");
    }
    let writer = key_with(&s, &["files:write"]);
    let (st, v) = put_bytes(
        &c,
        &writer,
        &content_url(&s, "default", "docs/by-writer.txt"),
        b"w".to_vec(),
    );
    assert_eq!(st, 201, "{v}");
    // No credential at all.
    let (st, v) = into_json(
        c.get(list_url(&s, "default", ""))
            .send()
            .expect("GET without a key"),
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (401, Some("unauthorized")),
        "{v}"
    );
    assert!(!drive(&s, "default").join("docs/denied.txt").exists());
}

#[test]
fn uploads_over_the_size_limit_are_413_and_leave_nothing() {
    let s = Server::start_with_config("[limits]\nmax_upload_bytes = 16\n");
    let c = http_builder().build().expect("client");
    std::fs::create_dir_all(drive(&s, "default").join("in")).expect("mkdir");
    let before = tree(&drive(&s, "default"));
    let (st, v) = put_bytes(
        &c,
        &s.token,
        &content_url(&s, "default", "in/big.bin"),
        vec![1; 17],
    );
    assert_eq!(
        (st, v["error"].as_str()),
        (413, Some("payload_too_large")),
        "{v}"
    );
    // Streamed without a declared length.
    let resp = c
        .put(content_url(&s, "default", "in/streamed.bin"))
        .header("authorization", format!("Bearer {}", s.token))
        .body(reqwest::blocking::Body::new(std::io::Cursor::new(vec![
            2u8;
            1000
        ])))
        .send()
        .expect("chunked PUT");
    let (st, v) = into_json(resp);
    assert_eq!(
        (st, v["error"].as_str()),
        (413, Some("payload_too_large")),
        "{v}"
    );
    assert_eq!(tree(&drive(&s, "default")), before);
    let (st, v) = put_bytes(
        &c,
        &s.token,
        &content_url(&s, "default", "in/fits.bin"),
        vec![3; 16],
    );
    assert_eq!((st, v["bytes"].as_u64()), (201, Some(16)), "{v}");
}

#[test]
fn paths_that_leave_the_drive_are_refused_and_change_nothing() {
    let s = Server::start();
    let c = http_builder().build().expect("client");
    write(&s, "docs/readme.md", b"# in the drive");
    let outside = s.data_dir.parent().expect("tmp").join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir outside");
    std::fs::write(outside.join("secret.txt"), b"outside the drive").expect("write outside");
    let d = drive(&s, "default");
    std::os::unix::fs::symlink(&outside, d.join("escape")).expect("link out");
    std::os::unix::fs::symlink(outside.join("secret.txt"), d.join("leak.txt")).expect("link out");
    std::os::unix::fs::symlink("docs", d.join("inside")).expect("link in");
    std::os::unix::fs::symlink("../../..", d.join("docs/up")).expect("link up");

    // The listing shows the link that stays and leaves out those that leave.
    let (st, root) = s.get(&list_url(&s, "default", ""));
    assert_eq!(st, 200, "{root}");
    let n = names(&root);
    assert!(n.contains(&"inside".to_owned()), "{n:?}");
    assert!(!n.contains(&"escape".to_owned()), "{n:?}");
    assert!(!n.contains(&"leak.txt".to_owned()), "{n:?}");
    let (st, _, body) = s.get_bytes(&content_url(&s, "default", "inside/readme.md"));
    assert_eq!((st, body.as_slice()), (200, &b"# in the drive"[..]));

    let before_drive = tree(&d);
    let before_outside = tree(&outside);
    let secret_name = outside.join("secret.txt");
    let absolute = secret_name.to_string_lossy().into_owned();
    // Query values as sent on the wire (already escaped where the test means it).
    let raw = [
        "..%2Foutside%2Fsecret.txt",
        "%2E%2E/%2E%2E/outside/secret.txt",
        "docs%2F..%2F..%2F..%2Foutside%2Fsecret.txt",
        "docs%5C..%5C..%5Coutside%5Csecret.txt",
        "docs/readme.md%00",
        "%2Fetc%2Fpasswd",
        "escape%2Fsecret.txt",
        "escape",
        "leak.txt",
        "docs/up",
        "docs/up/outside/secret.txt",
        "%252E%252E%252Foutside%252Fsecret.txt",
    ];
    let mut paths: Vec<String> = raw.iter().map(|p| (*p).to_owned()).collect();
    paths.push(query_escape(&absolute));
    for p in &paths {
        for url in [
            s.url(&format!("/v1/ws/default/files/content?path={p}")),
            s.url(&format!("/v1/ws/default/files?path={p}")),
            s.url(&format!("/v1/ws/default/files/content?path={p}&inline=1")),
        ] {
            let resp = c
                .get(&url)
                .header("authorization", format!("Bearer {}", s.token))
                .send()
                .expect("GET");
            let st = resp.status().as_u16();
            let text = resp.text().unwrap_or_default();
            assert!((400..500).contains(&st), "{url}: {st} {text}");
            assert!(!text.contains("outside the drive"), "{url}: {text}");
            let v: Value = serde_json::from_str(&text).expect("a JSON error");
            assert!(v["error"].is_string(), "{url}: {v}");
        }
        // Encoded twice, a path is the literal name `%2E%2E%2F…`: a file that may be made in
        // the drive, so it is only read here.
        if p.contains("%25") {
            continue;
        }
        let new_name = format!("{p}%2Fnew.txt");
        for url in [
            s.url(&format!("/v1/ws/default/files/content?path={p}")),
            s.url(&format!("/v1/ws/default/files/content?path={new_name}")),
        ] {
            let (st, v) = put_bytes(&c, &s.token, &url, b"planted".to_vec());
            assert!((400..500).contains(&st), "PUT {url}: {st} {v}");
            assert!(v["error"].is_string(), "{url}: {v}");
        }
    }
    assert_eq!(tree(&d), before_drive, "the drive is unchanged");
    assert_eq!(tree(&outside), before_outside, "nothing written outside");
    assert_eq!(
        std::fs::read(outside.join("secret.txt")).expect("secret"),
        b"outside the drive"
    );
}

#[test]
fn each_workspace_sees_only_its_own_drive() {
    let s = Server::start();
    let c = http_builder().build().expect("client");
    write(&s, "mine.txt", b"default's");
    let other = workspace_member_key(&s.data_dir, "other", "owner");
    std::fs::write(drive(&s, "other").join("theirs.txt"), b"other's").expect("write");

    // Another workspace's routes answer 404, for reads and writes alike, both ways.
    for (key, ws, file) in [
        (&other, "default", "mine.txt"),
        (&s.token, "other", "theirs.txt"),
    ] {
        let (st, v) = get_with(&c, key, &list_url(&s, ws, ""));
        assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
        let (st, v) = get_with(&c, key, &content_url(&s, ws, file));
        assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
        let (st, v) = put_bytes(&c, key, &content_url(&s, ws, "planted.txt"), b"x".to_vec());
        assert_eq!((st, v["error"].as_str()), (404, Some("not_found")), "{v}");
    }
    let (st, v) = get_with(&c, &other, &list_url(&s, "other", ""));
    assert_eq!(st, 200, "{v}");
    assert!(names(&v).contains(&"theirs.txt".to_owned()), "{v}");
    assert!(!names(&v).contains(&"mine.txt".to_owned()), "{v}");
    assert!(!drive(&s, "default").join("planted.txt").exists());
    assert!(!drive(&s, "other").join("planted.txt").exists());
}

#[test]
fn a_listing_stops_at_a_thousand_entries() {
    let s = Server::start();
    let big = drive(&s, "default").join("big");
    std::fs::create_dir_all(&big).expect("mkdir");
    for i in 0..1005 {
        std::fs::write(big.join(format!("f{i:04}.txt")), b"").expect("write");
    }
    let (st, v) = s.get(&list_url(&s, "default", "big"));
    assert_eq!(st, 200);
    assert_eq!(v["entries"].as_array().expect("entries").len(), 1000);
    assert_eq!(v["truncated"], true);
}

#[test]
fn the_files_a_sessions_tools_wrote_are_file_changed_events_in_its_folder() {
    let s = Server::start();
    std::fs::create_dir_all(drive(&s, "default").join("work")).expect("mkdir");
    let created = s.create(json!({
        "prompt": "/tool write_file {\"path\": \"notes/out.md\"}\n/reply done",
        "cwd": "work",
    }));
    let id = created["session"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    s.wait_terminal(&id, 0);
    let changed = poll_until("file.changed", Duration::from_secs(20), || {
        let (st, page) = into_json(
            s.http
                .get(s.url(&format!("/v2/sessions/{id}/events?limit=100")))
                .send()
                .expect("GET events"),
        );
        assert_eq!(st, 200, "{page}");
        page["events"]
            .as_array()
            .expect("events")
            .iter()
            .find(|e| e["type"] == "file.changed")
            .cloned()
    });
    assert_eq!(changed["data"]["path"], "notes/out.md");
    assert_eq!(changed["data"]["operation"], "update");
    // The session's folder is a drive folder the files routes list.
    assert_eq!(s.detail(&id)["cwd"], "work");
    let (st, v) = s.get(&list_url(&s, "default", "work"));
    assert_eq!((st, v["path"].as_str()), (200, Some("work")), "{v}");
}
