//! Dependencies point one way: the `crate::` (and `super::`) paths between the crate's top-level
//! modules form no circle, the engines use nothing above them (no runner, no store, no sessions
//! core), the store knows no sessions logic and `config` no engine types.
//!
//! What a crate's wall holds is not checked here: the store, the SQL layer, the vocabulary and the
//! telemetry are crates of their own (`crates/`), which cannot name the server at all. This test
//! reads the root's `src/`, where the walls between modules are held by convention.
//!
//! The graph is read from the source text, which is exactly what a reader (or a change) sees:
//! every `use` and every path in code outside `#[cfg(test)]` modules counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The `src/` of a crate of the workspace (`""` for the root package).
fn src_of(krate: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    match krate {
        "" => root.join("src"),
        name => root.join("crates").join(name).join("src"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file below `src/` (`engine/openai/mod.rs` → `[engine, openai]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its `#[cfg(test)]` modules.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut skipping: Option<i32> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        if let Some(depth) = skipping.as_mut() {
            *depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if *depth <= 0 && line.contains('}') {
                skipping = None;
            }
            continue;
        }
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod ") || next.contains(" mod "))
        {
            let header = lines.next().unwrap_or("");
            let depth = header.matches('{').count() as i32 - header.matches('}').count() as i32;
            skipping = (depth > 0).then_some(depth);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a file's code names, through `crate::` or `super::` paths.
fn named_modules(code: &str, me: &[String], aliases: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    let mut push = |name: &str| {
        let name = aliases.get(name).map_or(name, String::as_str);
        found.push(name.to_owned());
    };
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with('$') {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c}`: the first segment of each entry.
            let mut depth = 0;
            let mut entry_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => entry_start = true,
                    c if entry_start && !c.is_whitespace() => {
                        push(ident_at(&group[j..]));
                        entry_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            push(ident_at(rest));
        }
    }
    for (i, _) in code.match_indices("super::") {
        // Only the first `super` of a chain: `super::super::x` counts once.
        if code[..i].ends_with("super::") {
            continue;
        }
        let mut rest = &code[i..];
        let mut up = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            up += 1;
            rest = r;
        }
        // A `super` path that reaches the crate root names a top-level module.
        if up >= me.len() {
            push(ident_at(rest));
        }
    }
    found
}

/// The module graph of the core crate, whose top-level modules are the layers.
fn graph() -> Graph {
    let src = src_of("sessiond-core");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_owned())
        .collect();
    // Items the crate root re-exports (`pub use error::{Error, Result}`) belong to their module.
    let mut aliases = BTreeMap::new();
    for line in lib.lines() {
        if let Some(rest) = line.trim().strip_prefix("pub use ") {
            let module = ident_at(rest).to_owned();
            for item in rest[module.len()..]
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|s| !s.is_empty())
            {
                aliases.insert(item.to_owned(), module.clone());
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let me = module_path(rel);
        let Some(top) = me.first().cloned() else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let deps = graph.entry(top.clone()).or_default();
        for m in named_modules(&code(&text), &me, &aliases) {
            if m != top && modules.contains(&m) {
                deps.insert(m);
            }
        }
    }
    graph
}

/// A circle of the graph, if it has one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

fn show(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, deps)| {
            format!(
                "  {m} -> {}",
                deps.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_module_graph_has_no_circle() {
    let graph = graph();
    assert!(
        graph.get("runner").is_some_and(|d| d.contains("engine")),
        "the reader misses known edges:\n{}",
        show(&graph)
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import circle: {}\nthe graph:\n{}",
            cycle.join(" -> "),
            show(&graph)
        );
    }
}

#[test]
fn engines_the_store_and_config_use_nothing_above_them() {
    let graph = graph();
    let rules: [(&str, &[&str]); 3] = [
        (
            "engine",
            &[
                "runner",
                "sessions",
                "store",
                "projection",
                "agents",
                "api",
                "server",
                "auth",
                "uploads",
                "bus",
                "web",
                "cli",
            ],
        ),
        (
            "store",
            &[
                "sessions",
                "projection",
                "runner",
                "engine",
                "agents",
                "api",
                "server",
                "auth",
                "uploads",
                "web",
                "cli",
            ],
        ),
        (
            "config",
            &["engine", "runner", "sessions", "store", "agents"],
        ),
    ];
    for (module, above) in rules {
        let deps = graph.get(module).cloned().unwrap_or_default();
        let wrong: Vec<&str> = above
            .iter()
            .copied()
            .filter(|m| deps.contains(*m))
            .collect();
        assert!(
            wrong.is_empty(),
            "{module} uses {wrong:?}; it may use only modules below it\n{}",
            show(&graph)
        );
    }
}

#[test]
fn the_reader_sees_grouped_super_and_re_exported_paths() {
    let aliases = BTreeMap::from([("Error".to_owned(), "error".to_owned())]);
    let me = vec!["engine".to_owned(), "tools".to_owned()];
    let code = code(
        "use crate::{clock, timeline::{Step, Event}};\n\
         use super::super::drive::Drive; // crate::runner in a comment\n\
         fn f() -> crate::Error { todo!() }\n\
         #[cfg(test)]\nmod tests {\n    use crate::store;\n}\n",
    );
    let mut found = named_modules(&code, &me, &aliases);
    found.sort();
    assert_eq!(found, ["clock", "drive", "error", "timeline"]);
}

/// Whether `word` occurs in `code` as a whole identifier (`Connection`, not `Connections`).
fn has_word(code: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(word).any(|(i, _)| {
        !code[..i].chars().next_back().is_some_and(ident)
            && !code[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// Where a file's code reaches past the store's port: a SQL type, a connection, or a call of
/// `Store::read`/`write` (or their `_blocking` and `write_one` forms) with a closure or function.
/// A method of that name taking a literal flag (`OpenOptions::write(true)`) or a buffer
/// (`io.read(&mut buf)`) is not the store.
fn port_breaches(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for word in ["rusqlite", "sessiond_sql", "Connection"] {
        if has_word(code, word) {
            found.push(word.to_owned());
        }
    }
    for word in [".conn()", ".conn,"] {
        if code.contains(word) {
            found.push(word.to_owned());
        }
    }
    for call in [
        ".read(",
        ".write(",
        ".read_blocking(",
        ".write_blocking(",
        ".write_one(",
    ] {
        for (i, _) in code.match_indices(call) {
            let arg = code[i + call.len()..].trim_start();
            let not_the_store = arg.starts_with("true)")
                || arg.starts_with("false)")
                || arg.starts_with("&mut ")
                || arg.starts_with("&chunk)")
                || arg.starts_with(')');
            if !not_the_store {
                let line = code[..i].lines().count().max(1);
                found.push(format!("{call}…) on line {line}"));
            }
        }
    }
    found
}

/// The breaches of every file below `dirs` (`crate/dir`, `crate/` for all of a crate's `src/`,
/// the root package's as `/dir`). The store crate is the store's own and is not read.
fn breaches_outside_the_store(dirs: &[&str]) -> (usize, Vec<(String, Vec<String>)>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        let (krate, rel) = dir.split_once('/').unwrap_or((dir, ""));
        rust_files(&src_of(krate).join(rel), &mut files);
    }
    let n = files.len();
    let wrong = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            let b = port_breaches(&code(&text));
            (!b.is_empty()).then_some((rel, b))
        })
        .collect();
    (n, wrong)
}

fn show_breaches(wrong: &[(String, Vec<String>)]) -> String {
    wrong
        .iter()
        .flat_map(|(f, b)| b.iter().map(move |b| format!("  {f}: {b}")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The agent platform API, schedules and their HTTP layer use the store through its aggregate
/// handles (`store.agentex()`, `store.schedules()`, `store.acp()`, `store.log()`), whose methods
/// take and return sessiond's own types: another backend can stand behind the same methods.
#[test]
fn agent_platform_and_schedules_use_the_store_through_its_port() {
    let (n, wrong) = breaches_outside_the_store(&[
        "sessiond-core/agentex",
        "sessiond-core/schedules",
        "sessiond-http/agentex",
    ]);
    assert!(n >= 10, "the directories moved: {n} files");
    assert!(
        wrong.is_empty(),
        "code outside the store reaches past its port:\n{}",
        show_breaches(&wrong)
    );
}

/// Every crate above the store: no SQL type, no connection, no read or write closure. Every unit
/// of work is a method of a store handle, typed in and out; the store's `read` and `write` are
/// private to it.
#[test]
fn nothing_outside_the_store_reaches_past_its_port() {
    let (n, wrong) = breaches_outside_the_store(&["sessiond-core/", "sessiond-http/", "/"]);
    assert!(n >= 100, "the crates moved: {n} files");
    assert!(
        wrong.is_empty(),
        "code outside the store reaches past its port:\n{}",
        show_breaches(&wrong)
    );
}

#[test]
fn the_port_check_sees_closures_connections_and_sql_types() {
    let code = code(
        "let t = store\n    .read(move |c| rows::task(c, pk))\n    .await?;\n\
         store.write_blocking(|tx| tx.insert(&row))?;\n\
         let n = store.read(rows::next_due).await?;\n\
         let f = rows::count(tx.conn(), id)?;\n\
         fn q(c: &rusqlite::Connection) {}\n\
         options.write(true).create_new(true);\n\
         store.schedules().due(now, 10).await?; // not store.read(|c| …)\n\
         let n = io.read(&mut buf).await?; // \"Connections refused\"\n\
         store.write_one(move |w| w.append(&key, &e)).await?;\n",
    );
    let found = port_breaches(&code);
    assert_eq!(
        found,
        [
            "rusqlite",
            "Connection",
            ".conn()",
            ".read(…) on line 2",
            ".read(…) on line 5",
            ".write_blocking(…) on line 4",
            ".write_one(…) on line 11",
        ],
        "{code}"
    );
}

/// Only the HTTP crate and the wiring that starts it (the root's `server.rs`) name actix: the
/// core, the store, the engines and the runner know nothing of HTTP, and the core's `Error` is
/// mapped to a status in `sessiond-http`'s `error.rs` alone. No other crate of the workspace can
/// link it without saying so in its manifest, which this reads too. String literals do not count
/// (`cli.rs` names actix's log targets to quiet them).
#[test]
fn only_the_http_layer_names_actix() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if dir.ends_with("sessiond-http") {
            continue;
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            !manifest
                .lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains("actix")),
            "{} depends on actix",
            dir.display()
        );
        rust_files(&dir.join("src"), &mut files);
    }
    rust_files(&src_of(""), &mut files);
    assert!(
        files.len() >= 100,
        "the crates moved: {} files",
        files.len()
    );
    let wrong: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("src/server.rs"))
        .filter(|f| {
            let text = without_strings(&code(&std::fs::read_to_string(f).unwrap()));
            ["actix_web", "actix_http", "actix_server", "actix_service"]
                .iter()
                .any(|w| has_word(&text, w))
        })
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        wrong.is_empty(),
        "outside the HTTP layer, these name actix: {wrong:?}"
    );
}

/// `code` with the insides of its one-line string literals blanked (`"actix_http"` → `""`).
fn without_strings(code: &str) -> String {
    code.lines()
        .map(|line| {
            let mut out = String::new();
            let mut quoted = false;
            let mut escaped = false;
            for c in line.chars() {
                if quoted && !escaped && c == '\\' {
                    escaped = true;
                    continue;
                }
                if c == '"' && !escaped {
                    quoted = !quoted;
                    out.push(c);
                } else if !quoted {
                    out.push(c);
                }
                escaped = false;
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths (`a::b`) a file's code names through `crate::`, `super::` and `self::`
/// paths, grouped imports expanded (`crate::a::{b, c::d}` names `a::b` and `a::c::d`).
fn named_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    fn segments(s: &str) -> (Vec<String>, &str) {
        let mut out = Vec::new();
        let mut rest = s;
        loop {
            let id = ident_at(rest);
            if id.is_empty() {
                break;
            }
            out.push(id.to_owned());
            rest = &rest[id.len()..];
            match rest.strip_prefix("::") {
                Some(r) if !r.starts_with('{') => rest = r,
                Some(r) => return (out, r),
                None => break,
            }
        }
        (out, rest)
    }
    /// The entries of a `{…}` group (whose text starts after the `{`), each split at its top level.
    fn group_entries(group: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.push(&group[start..i]);
                    return out;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out
    }
    fn expand(base: Vec<String>, text: &str, out: &mut Vec<Vec<String>>) {
        let (mut segs, rest) = segments(text.trim_start());
        let mut path = base;
        path.append(&mut segs);
        match rest.strip_prefix('{') {
            Some(group) => {
                for entry in group_entries(group) {
                    let entry = entry.trim();
                    if entry == "self" {
                        out.push(path.clone());
                    } else if !entry.is_empty() {
                        expand(path.clone(), entry, out);
                    }
                }
            }
            _ => out.push(path),
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with('$')
            || code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        expand(Vec::new(), &code[i + "crate::".len()..], &mut out);
    }
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::")
            || code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let mut rest = &code[i..];
        let mut base = me.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        expand(base, rest, &mut out);
    }
    for (i, _) in code.match_indices("self::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        expand(me.to_vec(), &code[i + "self::".len()..], &mut out);
    }
    out
}

/// Which file of a crate names which: each file by its module path, each edge to the file that
/// holds the longest prefix of a named path.
fn file_graph(krate: &str) -> Graph {
    let src = src_of(krate);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .into_iter()
        .map(|f| (module_path(f.strip_prefix(&src).unwrap()), f))
        .collect();
    let mut graph = Graph::new();
    for (me, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let deps = graph.entry(me.join("::")).or_default();
        for path in named_paths(&without_strings(&code(&text)), me) {
            let target = (0..=path.len())
                .rev()
                .map(|n| &path[..n])
                .find(|p| modules.contains_key(*p));
            if let Some(t) = target.filter(|t| *t != me.as_slice()) {
                deps.insert(t.join("::"));
            }
        }
    }
    graph
}

/// No two files name each other, directly or around a circle: a circle of files is one unit that
/// cannot be read, tested or moved to a crate of its own in parts.
#[test]
fn the_file_graph_has_no_circle() {
    for (krate, from, to) in [
        ("sessiond-core", "runner::turn", "store"),
        ("sessiond-http", "agentex::acp", "agent_key"),
    ] {
        let graph = file_graph(krate);
        assert!(
            graph.get(from).is_some_and(|d| d.contains(to)),
            "the reader misses the known edge {from} -> {to}:\n{}",
            show(&graph)
        );
    }
    for krate in ["sessiond-core", "sessiond-http", "sessiond-store", ""] {
        if let Some(cycle) = find_cycle(&file_graph(krate)) {
            panic!(
                "import circle between files of {krate:?}: {}",
                cycle.join(" -> ")
            );
        }
    }
}
