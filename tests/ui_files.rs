//! The console's Files view, in the browser: the workspace drive browsed by breadcrumbs, a file
//! dropped on the listing uploaded into its folder (and a second drop of the same name refused
//! inline with the server's reason), a file chosen in the Upload button's picker uploaded the
//! same way, markdown and an image previewed beside the listing, a file
//! downloaded with the page's own session, the view at a phone's width, and a session's details
//! listing the files its tools wrote (its `file.changed` events) as links that open them here.
//!
//! Data is made through the API and the drive folder, then seen in headless Chromium (as
//! `tests/ui.rs`, under libtest-mimic: a missing browser is reported `ignored`). Screenshots land
//! in `target/ui-screenshots/`.

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/webdriver.rs"]
mod webdriver;

use base64::Engine;
use common::*;
use console::*;
use serde_json::{Value, json};

const TESTS: &[(&str, fn())] = &[
    (
        "the_drive_is_browsed_uploaded_to_previewed_and_downloaded",
        the_drive_is_browsed_uploaded_to_previewed_and_downloaded,
    ),
    (
        "a_session_lists_the_files_its_tools_wrote",
        a_session_lists_the_files_its_tools_wrote,
    ),
];

fn main() -> std::process::ExitCode {
    run(TESTS)
}

/// A 1×1 PNG.
const DOT_PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

fn drive_file(s: &Server, rel: &str, bytes: &[u8]) {
    let p = s.data_dir.join("drive").join(WS).join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, bytes).expect("write drive file");
}

/// Waits until the Files view shows folder `dir`, listed.
fn wait_listed(b: &webdriver::Browser, dir: &str) {
    b.wait_js(
        &format!("the listing of {dir:?}"),
        &format!(
            "const v = document.querySelector('.files-view'); \
             return v && v.dataset.dir === {dir:?} \
               && /^[0-9]+$/.test(v.querySelector('.files-list').dataset.loaded || '');"
        ),
        WAIT,
    );
}

/// Drops a file named `name` holding `text` on the listing, as a drag from the desktop would.
fn drop_file(b: &webdriver::Browser, name: &str, text: &str) {
    b.exec(
        "const dt = new DataTransfer(); \
         dt.items.add(new File([arguments[1]], arguments[0], { type: 'text/plain' })); \
         const list = document.querySelector('.files-list'); \
         for (const type of ['dragenter', 'dragover', 'drop']) \
           list.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));",
        &[json!(name), json!(text)],
    );
}

/// Waits for the preview of `path` to be shown (or to fail); returns its state.
fn wait_preview(b: &webdriver::Browser, path: &str) -> Value {
    b.wait_js(
        &format!("the preview of {path}"),
        &format!(
            "const p = document.querySelector('.files-preview'); \
             return p && !p.hidden && p.dataset.path === {path:?} \
               && p.dataset.state !== 'loading' && p.dataset.state;"
        ),
        WAIT,
    )
}

fn the_drive_is_browsed_uploaded_to_previewed_and_downloaded() {
    let s = Server::start();
    drive_file(
        &s,
        "docs/guide.md",
        b"# Guide\n\nSome **bold** text.\n\n<script>window.__pwned = 1</script>\n",
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(DOT_PNG)
        .expect("png");
    drive_file(&s, "docs/dot.png", &png);
    drive_file(&s, "readme.txt", b"at the root");

    let b = browser();
    login(&b, &s);
    // The nav item leads to the drive's root.
    b.click_css(".nav a[href$='/files']");
    wait_listed(&b, "");
    assert_eq!(count(&b, ".nav a.active[href$='/files']"), 1);
    assert_eq!(count(&b, "tr[data-path='docs'][data-kind='dir']"), 1);
    assert_eq!(count(&b, "tr[data-path='readme.txt'][data-kind='file']"), 1);

    // Into a folder, and the breadcrumbs say where.
    b.click_css("tr[data-path='docs'] a");
    wait_listed(&b, "docs");
    assert_eq!(
        b.exec(
            "return [...document.querySelectorAll('.crumbs a')].map((a) => a.textContent);",
            &[]
        ),
        json!(["Drive", "docs"])
    );

    // A file dropped on the listing lands in this folder.
    drop_file(&b, "dropped.txt", "dropped by hand");
    b.find("tr[data-path='docs/dropped.txt']");
    assert_eq!(
        std::fs::read(s.data_dir.join("drive").join(WS).join("docs/dropped.txt"))
            .expect("uploaded"),
        b"dropped by hand"
    );
    // The same name again: refused, and the server's reason is shown where it happened.
    drop_file(&b, "dropped.txt", "again");
    let error = b.wait_js(
        "the upload error",
        "const e = document.querySelector('.files-error'); return e && !e.hidden && e.textContent;",
        WAIT,
    );
    assert!(
        error
            .as_str()
            .is_some_and(|e| e.contains("dropped.txt") && e.contains("already exists")),
        "{error}"
    );
    assert_eq!(
        std::fs::read(s.data_dir.join("drive").join(WS).join("docs/dropped.txt")).expect("kept"),
        b"dropped by hand"
    );

    // The file picker (what the Upload button opens) uploads the chosen file the same way.
    let picked = tempfile::tempdir().expect("tempdir");
    let picked_path = picked.path().join("picked.txt");
    std::fs::write(&picked_path, b"chosen in the picker").expect("write");
    let input = b.find("#files-picker");
    b.send_keys(&input, picked_path.to_str().expect("utf-8 path"));
    b.find("tr[data-path='docs/picked.txt']");
    assert_eq!(
        std::fs::read(s.data_dir.join("drive").join(WS).join("docs/picked.txt")).expect("uploaded"),
        b"chosen in the picker"
    );

    // Markdown previews through the safe renderer: markup of the file never runs.
    b.click_css("tr[data-path='docs/guide.md'] .file-open");
    assert_eq!(wait_preview(&b, "docs/guide.md"), json!("ready"));
    assert_eq!(
        text_of(&b, ".files-preview .preview-md .md-h"),
        json!("Guide")
    );
    assert_eq!(
        text_of(&b, ".files-preview .preview-md strong"),
        json!("bold")
    );
    assert_eq!(count(&b, ".files-preview script"), 0);
    b.screenshot("files");
    assert_eq!(b.exec("return window.__pwned ?? null;", &[]), Value::Null);
    assert!(
        b.exec("return location.hash;", &[])
            .as_str()
            .is_some_and(|h| h.ends_with("/files/docs?open=guide.md")),
    );

    // An image previews as an image.
    b.click_css("tr[data-path='docs/dot.png'] .file-open");
    assert_eq!(wait_preview(&b, "docs/dot.png"), json!("ready"));
    assert_eq!(
        b.exec(
            "return document.querySelector('.files-preview img').naturalWidth;",
            &[]
        ),
        json!(1)
    );

    // A download with the page's own session: the bytes, as an attachment.
    b.exec(
        "window.__download = null; \
         const a = document.querySelector(\"tr[data-path='docs/guide.md'] a.file-download\"); \
         fetch(a.href).then(async (r) => { window.__download = { status: r.status, \
           disposition: r.headers.get('content-disposition'), body: await r.text(), \
           name: a.getAttribute('download') }; });",
        &[],
    );
    let download = b.wait_js("the download", "return window.__download;", WAIT);
    assert_eq!(download["status"], 200, "{download}");
    assert_eq!(download["name"], "guide.md");
    assert!(
        download["disposition"]
            .as_str()
            .is_some_and(|d| d.starts_with("attachment;")),
        "{download}"
    );
    assert!(
        download["body"]
            .as_str()
            .is_some_and(|t| t.starts_with("# Guide")),
        "{download}"
    );

    // Opening a file by its address shows it; the preview is keyboard-closable.
    b.goto(&s.url(&format!("/#/w/{WS}/files/docs?open=guide.md")));
    assert_eq!(wait_preview(&b, "docs/guide.md"), json!("ready"));
    b.click_css(".files-preview .preview-head button");
    b.wait_js(
        "the preview closed",
        "return document.querySelector('.files-preview').hidden \
           && document.activeElement?.closest('tr')?.dataset.path === 'docs/guide.md';",
        WAIT,
    );

    // A folder that does not exist says so in place.
    b.goto(&s.url(&format!("/#/w/{WS}/files/nowhere")));
    b.wait_js(
        "the missing folder's error",
        "return document.querySelector('.files-list')?.dataset.loaded === 'error' \
           && document.querySelector('.files-list .form-error').textContent;",
        WAIT,
    );

    // At a phone's width the view fits, in the dark theme too.
    b.set_viewport(375, 800);
    b.goto(&s.url(&format!("/#/w/{WS}/files/docs?open=guide.md")));
    wait_listed(&b, "docs");
    assert_eq!(wait_preview(&b, "docs/guide.md"), json!("ready"));
    b.exec(
        "localStorage.setItem('sessiond.theme', 'dark'); \
         document.dispatchEvent(new CustomEvent('sessiond-theme', { detail: 'dark' }));",
        &[],
    );
    b.wait_js(
        "the dark theme",
        "return document.documentElement.dataset.theme === 'dark';",
        WAIT,
    );
    let overflow = b.exec(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
        &[],
    );
    assert_eq!(overflow, json!(0), "no sideways scrolling at 375 px");
    b.screenshot("files-narrow-dark");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

fn a_session_lists_the_files_its_tools_wrote() {
    let s = Server::start();
    drive_file(&s, "work/notes/out.md", b"# Out\n\nwritten by a tool\n");
    let created = s.create(json!({
        "prompt": "/tool write_file {\"path\": \"notes/out.md\"}\n/reply wrote it",
        "cwd": "work",
    }));
    let id = created["session"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    s.wait_terminal(&id, 0);

    let b = browser();
    login(&b, &s);
    open_session(&b, &s, &id);
    let link = b.wait_js(
        "the written file's link",
        "const a = document.querySelector('.written-list a.written-link'); \
         return a && [a.textContent, a.getAttribute('href')];",
        WAIT,
    );
    assert_eq!(link[0], "work/notes/out.md", "{link}");
    assert_eq!(
        link[1],
        format!("#/w/{WS}/files/work/notes?open=out.md"),
        "{link}"
    );
    assert_eq!(
        b.exec(
            "return document.querySelector('.session-folder-link').getAttribute('href');",
            &[]
        ),
        json!(format!("#/w/{WS}/files/work"))
    );
    b.exec(
        "document.querySelector('.written-list').scrollIntoView({ block: 'center' });",
        &[],
    );
    b.screenshot("files-session");
    b.click_css(".written-list a.written-link");
    wait_listed(&b, "work/notes");
    assert_eq!(wait_preview(&b, "work/notes/out.md"), json!("ready"));
    assert_eq!(
        text_of(&b, ".files-preview .preview-md .md-h"),
        json!("Out")
    );
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}
