//! The crate's layers, held by a test (rust-analyzer keeps its boundaries this way): every
//! `crate::<module>` reference in `src/` must be an edge the layer table in ARCHITECTURE.md
//! allows, every module must have a row there, and the table itself must have no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The table under `## Layers` in ARCHITECTURE.md: module → the modules it may use.
fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## Layers\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Layers` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut table = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').collect();
        assert!(cells.len() >= 3, "a layer row has two cells: {line}");
        for module in names(cells[1]) {
            let before = table.insert(module.clone(), names(cells[2]));
            assert!(
                before.is_none(),
                "`{module}` has two rows in the layer table"
            );
        }
    }
    assert!(!table.is_empty(), "the layer table has no rows");
    table
}

/// `path` below `src`, with `/` between its parts: `hub/mod.rs`.
fn relative(src: &Path, path: &Path) -> String {
    path.strip_prefix(src)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// Every `.rs` file below `dir`.
fn rs_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// Every `crate::<module>` a module's files name (comments aside): module → (used, where).
fn edges() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let src = Path::new(ROOT).join("src");
    for file in rs_files(&src) {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let used = out.entry(module.clone()).or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            let at = || format!("{}:{}", rel.display(), n + 1);
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let named: Vec<&str> = match rest.strip_prefix('{') {
                    // `crate::{a, b::c}`: the first segment of each item.
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or("")
                        .split(',')
                        .map(|item| item.trim().split("::").next().unwrap_or("").trim())
                        .collect(),
                    None => vec![
                        rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or(""),
                    ],
                };
                for name in named {
                    let name = name.split_whitespace().next().unwrap_or("");
                    if !name.is_empty() && name != "self" && name != module {
                        used.entry(name.to_string()).or_insert_with(at);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let allowed = allowed();
    let mut wrong = Vec::new();
    for (module, used) in edges() {
        let Some(may) = allowed.get(&module) else {
            wrong.push(format!(
                "`{module}` has no row in ARCHITECTURE.md's layer table"
            ));
            continue;
        };
        for (target, at) in used {
            if !may.contains(&target) {
                wrong.push(format!(
                    "{at}: `{module}` uses `{target}`, which the layer table does not allow"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "move the shared piece down, or change the table in ARCHITECTURE.md (## Layers) on \
         purpose:\n{}",
        wrong.join("\n")
    );
}

/// The table is the graph as it is: an allowance nothing uses is taken out, so that the table
/// shows what depends on what.
#[test]
fn the_layer_table_allows_only_what_is_used() {
    let edges = edges();
    let mut unused = Vec::new();
    for (module, may) in allowed() {
        let used = edges.get(&module);
        for target in may {
            if !used.is_some_and(|u| u.contains_key(&target)) {
                unused.push(format!("`{module}` may use `{target}` but does not"));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "take these out of ARCHITECTURE.md's layer table:\n{}",
        unused.join("\n")
    );
}

#[test]
fn the_layer_table_names_real_modules_and_has_no_cycle() {
    let allowed = allowed();
    let modules: BTreeSet<String> = edges().into_keys().collect();
    for (module, may) in &allowed {
        assert!(
            modules.contains(module),
            "the layer table names `{module}`, which is not a module of src/"
        );
        for target in may {
            assert!(
                allowed.contains_key(target),
                "`{module}` may use `{target}`, which has no row"
            );
        }
    }
    // Depth-first: a module on the current path reached again is a cycle.
    fn visit<'a>(
        module: &'a str,
        allowed: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(module) {
            return;
        }
        if let Some(at) = path.iter().position(|m| *m == module) {
            panic!("the layer table has a cycle: {}", path[at..].join(" → "));
        }
        path.push(module);
        for target in &allowed[module] {
            visit(target, allowed, path, done);
        }
        path.pop();
        done.insert(module);
    }
    let mut done = BTreeSet::new();
    for module in allowed.keys() {
        visit(module, &allowed, &mut Vec::new(), &mut done);
    }
}

/// docs/state.md's "What state.db holds" names every table a migration creates: the page
/// that tells an operator what is stored (and that no secret is) cannot fall behind.
#[test]
fn state_md_names_every_table_of_the_state_database() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("docs/state.md")).unwrap();
    let section = docs
        .split("## What state.db holds")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/state.md has a section `What state.db holds`");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("src/state")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sql") {
            continue;
        }
        // An FTS5 index (`CREATE VIRTUAL TABLE`) is a table like any other here.
        let sql = std::fs::read_to_string(&path)
            .unwrap()
            .replace("CREATE VIRTUAL TABLE ", "CREATE TABLE ");
        for rest in sql.split("CREATE TABLE ").skip(1) {
            let name: String = rest
                .trim_start_matches("IF NOT EXISTS ")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // A table rebuilt under a new name and renamed into place is the old table.
            let renamed = sql
                .split(&format!("ALTER TABLE {name} RENAME TO "))
                .nth(1)
                .and_then(|r| {
                    r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                });
            let name = renamed.map_or(name.clone(), str::to_string);
            if !section.contains(&format!("`{name}`")) {
                missing.push(format!("{name} ({})", path.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tables docs/state.md does not name: {missing:#?}"
    );
}

/// Every table a migration in `src/state/*.sql` creates (a table rebuilt under a new name and
/// renamed into place counts as the old one): table → the migration file.
fn migration_tables() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(Path::new(ROOT).join("src/state")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sql") {
            continue;
        }
        let sql = std::fs::read_to_string(&path)
            .unwrap()
            .replace("CREATE VIRTUAL TABLE ", "CREATE TABLE ");
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for rest in sql.split("CREATE TABLE ").skip(1) {
            let name: String = rest
                .trim_start_matches("IF NOT EXISTS ")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let renamed = sql
                .split(&format!("ALTER TABLE {name} RENAME TO "))
                .nth(1)
                .and_then(|r| {
                    r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .next()
                });
            out.insert(renamed.map_or(name, str::to_string), file.clone());
        }
    }
    out
}

/// The table under `## Tables` in ARCHITECTURE.md: table → the module that owns it.
fn table_owners() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let section = text
        .split("\n## Tables\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Tables` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let names = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut owners = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').collect();
        assert!(cells.len() >= 3, "a table row has two cells: {line}");
        let module = names(cells[1]).into_iter().next().unwrap();
        for table in names(cells[2]) {
            let before = owners.insert(table.clone(), module.clone());
            assert!(
                before.is_none(),
                "`{table}` has two owners in ARCHITECTURE.md's ## Tables"
            );
        }
    }
    assert!(!owners.is_empty(), "the ## Tables section has no rows");
    owners
}

/// The tables a line of Rust names in SQL: the word after `FROM`, `INTO`, `UPDATE` or `JOIN`
/// (upper case, as every statement here is written), where it is a table of `tables`.
fn sql_tables<'a>(line: &str, tables: &'a BTreeMap<String, String>) -> Vec<&'a str> {
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| matches!(w[0], "FROM" | "INTO" | "UPDATE" | "JOIN"))
        .filter_map(|w| tables.get_key_value(w[1]).map(|(k, _)| k.as_str()))
        .collect()
}

#[test]
fn sql_tables_hold_their_words() {
    let tables: BTreeMap<String, String> = [("sessions", ""), ("hub_runs", "")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        sql_tables(
            r#""SELECT x FROM sessions s JOIN hub_runs r ON r.k = s.k","#,
            &tables
        ),
        ["sessions", "hub_runs"]
    );
    assert_eq!(
        sql_tables(
            "DELETE FROM sessions WHERE k IN (SELECT k FROM tree)",
            &tables
        ),
        ["sessions"]
    );
    assert!(sql_tables("let from = sessions; // from sessions", &tables).is_empty());
}

/// A module reads and writes only its own tables (ARCHITECTURE.md, ## Tables): SQL naming
/// another module's table fails, and every table a migration creates has an owner.
#[test]
fn every_table_is_named_in_sql_only_by_the_module_that_owns_it() {
    let owners = table_owners();
    let created = migration_tables();
    let unowned: Vec<String> = created
        .iter()
        .filter(|(table, _)| !owners.contains_key(*table))
        .map(|(table, file)| format!("{table} ({file})"))
        .collect();
    assert!(
        unowned.is_empty(),
        "tables with no owner in ARCHITECTURE.md's ## Tables: {unowned:#?}"
    );
    let stale: Vec<&String> = owners
        .keys()
        .filter(|t| !created.contains_key(*t))
        .collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md's ## Tables names tables no migration creates: {stale:?}"
    );
    let src = Path::new(ROOT).join("src");
    let mut wrong = Vec::new();
    for path in rs_files(&src) {
        let rel = path.strip_prefix(&src).unwrap();
        let module = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        // The storage layer: the migrations, the snapshot, the audit timeline and an
        // agent's move to the trash name every layer's tables.
        if module == "state" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for table in sql_tables(line, &owners) {
                let owner = &owners[table];
                if *owner != module {
                    wrong.push(format!(
                        "{}:{}: `{module}` names `{owner}`'s table `{table}` in SQL",
                        rel.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "call a function of the table's owner instead (ARCHITECTURE.md, ## Tables):\n{}",
        wrong.join("\n")
    );
}

/// The files of each module directory and which of their siblings each one uses: `super::b`,
/// `crate::<dir>::b`, or an item the directory's `mod.rs` brings in from `b` (`pub use b::X`,
/// then `super::X`). `mod.rs` itself is the directory's face, not a node; a subdirectory is one
/// node with all its files. Tests (`#[cfg(test)] mod …` to the end of a file) are left out.
fn file_edges() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    /// The code lines of a file: comments and the trailing test module left out.
    fn code(text: &str) -> Vec<&str> {
        let lines: Vec<&str> = text.lines().collect();
        let mut out = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            if trimmed == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.trim_start().starts_with("mod "))
            {
                break;
            }
            if !trimmed.starts_with("//") {
                out.push(*line);
            }
        }
        out
    }
    fn ident(text: &str) -> &str {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("")
    }
    /// The first segments `prefix` leads to in `code`: `prefix::a::…` → `a`, `prefix::{a, b}` →
    /// `a`, `b`.
    fn after(code: &str, prefix: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, _) in code.match_indices(prefix) {
            let before = &code[..i];
            if before.ends_with("super::")
                || before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            {
                continue;
            }
            let rest = &code[i + prefix.len()..];
            match rest.strip_prefix('{') {
                Some(group) => out.extend(
                    group
                        .split('}')
                        .next()
                        .unwrap_or("")
                        .split(',')
                        .map(|item| ident(item.trim()).to_string()),
                ),
                None => out.push(ident(rest).to_string()),
            }
        }
        out.retain(|name| !name.is_empty() && name != "super" && name != "self");
        out
    }

    let src = Path::new(ROOT).join("src");
    let files = rs_files(&src);
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let dirs: BTreeSet<std::path::PathBuf> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs"))
        .map(|f| f.parent().unwrap().to_path_buf())
        .collect();
    for dir in dirs {
        let rel = dir.strip_prefix(&src).unwrap();
        let module_path: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let crate_prefix = format!("crate::{}::", module_path.join("::"));
        // The node each file belongs to: its stem, or the subdirectory it is in.
        let node_of = |file: &Path| -> Option<String> {
            let inner = file.strip_prefix(&dir).ok()?;
            let first = inner.components().next()?.as_os_str().to_string_lossy();
            let name = first.trim_end_matches(".rs").to_string();
            (name != "mod").then_some(name)
        };
        let nodes: BTreeSet<String> = files.iter().filter_map(|f| node_of(f)).collect();
        // What mod.rs brings in from each sibling: `use b::{X, y::Z}` → X, Z come from b.
        let mod_text = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        let mut from: BTreeMap<String, String> = BTreeMap::new();
        let mod_code = code(&mod_text).join("\n");
        for statement in mod_code.split(';') {
            let statement = statement.trim();
            let Some(at) = statement.find("use ") else {
                continue;
            };
            if !statement[..at]
                .split_whitespace()
                .all(|w| w == "pub" || w.starts_with("pub("))
            {
                continue;
            }
            let path = statement[at + "use ".len()..].trim();
            let path = path.strip_prefix("self::").unwrap_or(path);
            let sibling = ident(path);
            if !nodes.contains(sibling) {
                continue;
            }
            let rest = &path[sibling.len()..];
            for item in rest.split([',', '{', '}']) {
                let item = item.trim();
                let name = match item.split_once(" as ") {
                    Some((_, alias)) => alias.trim(),
                    None => item.rsplit("::").next().unwrap_or(""),
                };
                let name = ident(name);
                if !name.is_empty() && name != "self" {
                    from.insert(name.to_string(), sibling.to_string());
                }
            }
        }
        let edges = out.entry(module_path.join("/")).or_default();
        for file in files.iter().filter(|f| f.starts_with(&dir)) {
            let Some(node) = node_of(file) else {
                continue;
            };
            let direct = file.parent() == Some(dir.as_path());
            let text = std::fs::read_to_string(file).unwrap();
            let used = edges.entry(node.clone()).or_default();
            for line in code(&text) {
                let mut named = after(line, &crate_prefix);
                if direct {
                    named.extend(after(line, "super::"));
                }
                for name in named {
                    let target = if nodes.contains(&name) {
                        Some(name)
                    } else {
                        from.get(&name).cloned()
                    };
                    if let Some(target) = target
                        && target != node
                    {
                        used.insert(target);
                    }
                }
            }
        }
    }
    out
}

/// The circles in one directory's file graph: each strongly connected set of two or more files.
fn file_circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Two files are in one circle when each reaches the other.
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(node) = todo.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|node| (node, reach(node))).collect();
    let mut circles: Vec<BTreeSet<String>> = Vec::new();
    for (node, from_node) in &reached {
        let circle: BTreeSet<String> = from_node
            .iter()
            .filter(|other| reached.get(other).is_some_and(|r| r.contains(*node)))
            .cloned()
            .collect();
        if circle.len() > 1 && !circles.contains(&circle) {
            circles.push(circle);
        }
    }
    circles
}

/// The files of one module directory use one another one way: a circle between two files (a
/// uses b, b uses a) means a piece sits in the wrong file, and the layer test cannot see it.
#[test]
fn the_files_of_a_module_use_one_another_one_way() {
    let mut wrong = Vec::new();
    for (dir, edges) in file_edges() {
        for circle in file_circles(&edges) {
            let detail: Vec<String> = circle
                .iter()
                .map(|f| {
                    let uses: Vec<&str> = edges[f]
                        .iter()
                        .filter(|t| circle.contains(*t))
                        .map(String::as_str)
                        .collect();
                    format!("{f} → {}", uses.join(", "))
                })
                .collect();
            wrong.push(format!("src/{dir}/: {}", detail.join("; ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "files of one module that use each other: move the shared piece into a file both use \
         (or into mod.rs):\n{}",
        wrong.join("\n")
    );
}

/// Where a `serde_json::Value` may cross a module boundary: the protocol codecs, whose job is
/// JSON. Everywhere else a module takes and gives typed values (ARCHITECTURE.md, "Typed
/// boundaries").
const JSON_CODECS: &[&str] = &[
    // OpenClaw's own files are JSON; import/export read and write them.
    "openclaw/",
    // The A2A wire format.
    "a2a/wire.rs",
    // The platforms' wire formats, as the fakes serve them and the tests drive them.
    "fake_platform/",
    // The command line renders the controller's JSON answers; nothing calls it.
    "cli/",
    // JSON-RPC: the frame, and each area's params decoded into its typed requests.
    "rpc.rs",
    "manage/rpc.rs",
    "hub/operator.rs",
    "approvals/operator.rs",
    // MCP: tool definitions and input schemas, the typed results written in OpenClaw's
    // shapes, the `hub mcp` bridge's bodies.
    "hub/tools.rs",
    "hub/results.rs",
    "hub/mcp.rs",
    // An agent's tool call (`rawInput`) is whatever JSON its runtime sent: approvals match
    // rules over it and preview it.
    "approvals/policy.rs",
    "approvals/preview.rs",
    // The config as a JSON document: the schema's view, the plan's field diff, `--explain`.
    "config/yaml.rs",
    "plan/desired.rs",
    "plan/diff.rs",
    "routing/explain.rs",
    // JSON text columns of the state database.
    "state/records.rs",
];

/// `pub`/`pub(crate)` functions outside the codecs whose signature names `Value`:
/// `file::function`.
fn value_signatures() -> BTreeSet<String> {
    let src = Path::new(ROOT).join("src");
    let mut out = BTreeSet::new();
    for path in rs_files(&src) {
        let rel = relative(&src, &path);
        if JSON_CODECS.iter().any(|c| rel.starts_with(c)) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Tests inside the file may use JSON freely.
        let text = without_test_items(&text);
        let text = text.as_str();
        if !text.contains("serde_json") {
            continue;
        }
        for (at, _) in text.match_indices("fn ") {
            let before = &text[..at];
            let line_start = before.rfind('\n').map_or(0, |i| i + 1);
            // What stands before `fn` on its line: `pub`, `pub(crate)`, maybe `async`.
            let head = before[line_start..].trim();
            let head = head.strip_suffix("async").unwrap_or(head).trim_end();
            if head != "pub" && head != "pub(crate)" {
                continue;
            }
            let rest = &text[at + 3..];
            let end = rest.find(['{', ';']).unwrap_or(rest.len());
            let signature = &rest[..end];
            let name: String = signature
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let names_value = signature
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .any(|word| word == "Value" || word == "serde_json::Value");
            if names_value {
                out.insert(format!("{rel}::{name}"));
            }
        }
    }
    out
}

/// `text` without its `#[cfg(test)]`-gated items: a `mod tests { … }` block, a `mod x;` line,
/// a gated function or statement. The rest of the file, after them too, stays.
fn without_test_items(text: &str) -> String {
    const GATE: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(GATE) {
        out.push_str(&rest[..at]);
        let item = rest[at + GATE.len()..].trim_start();
        let item = skip_attributes(item);
        rest = &item[item_len(item)..];
    }
    out.push_str(rest);
    out
}

/// `text` after the outer attributes (`#[…]`) it starts with.
fn skip_attributes(mut text: &str) -> &str {
    while text.starts_with("#[") {
        let mut depth = 0usize;
        let mut end = text.len();
        for (i, c) in text.char_indices() {
            match c {
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        text = text[end..].trim_start();
    }
    text
}

/// The length of the item `text` starts with: up to its `;` (or, for an enum variant or a
/// match arm, its `,`) or its block's closing `}`.
/// Strings, characters and comments are read past, so a brace in them counts for nothing.
fn item_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i += text[i..].find('\n').unwrap_or(text.len() - i);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += text[i..].find("*/").map_or(text.len() - i, |e| e + 2);
                continue;
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'"' | b'#'))
                && !bytes[..i]
                    .last()
                    .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') =>
            {
                let hashes = text[i + 1..].bytes().take_while(|b| *b == b'#').count();
                let open = i + 1 + hashes;
                if bytes.get(open) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    i = text[open + 1..]
                        .find(&close)
                        .map_or(text.len(), |e| open + 1 + e + close.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A character literal (`'{'`, `'\''`); a lifetime's quote stands alone.
            b'\'' => {
                let close = if bytes.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|e| i + 2 + e)
                } else {
                    let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (bytes.get(i + 1 + c) == Some(&b'\'')).then_some(i + 1 + c)
                };
                if let Some(close) = close {
                    i = close;
                }
            }
            b'{' | b'(' | b'[' => depth += 1,
            // The bracket around the item (an enum's, a match's): the item ended before it.
            b'}' | b')' | b']' if depth == 0 => return i,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b')' | b']' => depth -= 1,
            b';' | b',' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    text.len()
}

#[test]
fn test_items_are_left_out_and_the_rest_of_the_file_is_read() {
    let text = "use a;\n#[cfg(test)]\nmod tests;\npub fn one() {}\n\
                #[cfg(test)]\n#[allow(x)]\nmod more {\n    fn t() { let s = \"}\"; let c = '}'; \
                let r = r#\"}\"#; } // }\n    fn u<'a>(x: &'a str) {}\n}\npub fn two() {}\n";
    let kept = without_test_items(text);
    assert_eq!(kept, "use a;\n\npub fn one() {}\n\npub fn two() {}\n");
    let variant =
        "enum E {\n    A(u8),\n    #[cfg(test)]\n    B(Vec<(u8, u8)>),\n}\npub fn f() {}\n";
    assert_eq!(
        without_test_items(variant),
        "enum E {\n    A(u8),\n    \n}\npub fn f() {}\n"
    );
    let last = "match x {\n    #[cfg(test)]\n    Some(y) => { f(y) }\n}\npub fn g() {}";
    assert_eq!(
        without_test_items(last),
        "match x {\n    \n}\npub fn g() {}"
    );
}

#[test]
fn no_json_value_crosses_a_module_boundary() {
    let found = value_signatures();
    assert!(
        found.is_empty(),
        "these functions take or give a serde_json::Value across a module boundary; give them \
         a typed parameter or result (or, for a protocol codec, name its file in JSON_CODECS):\n  {}",
        found
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

/// The files whose lazily set values are caches of what they compute themselves (a probe of
/// the host, a compiled schema, a file's lines, the mount table, a binding's roles, constant
/// schemas): nothing outside sets them, so they hide no wire.
const CACHES: &[&str] = &[
    "config/schema.rs",
    "config/source.rs",
    "hub/tools.rs",
    "routing/index.rs",
    "sandbox/host.rs",
    // The one runtime that drives the PostgreSQL connections' sockets, made at first use.
    "state/db/postgres.rs",
    "trash/guard.rs",
];

/// A value set after construction (a `OnceLock`, `OnceCell`, `LazyLock`), a cyclic `Arc`, or a
/// `set_*` that takes a trait object: each is a way one part reaches another behind the
/// constructors' backs, which the layer test cannot see.
const LATE_BOUND: &[&str] = &[
    "OnceLock",
    "OnceCell",
    "LazyLock",
    "lazy_static",
    "once_cell",
    "new_cyclic",
];

/// What each `src/` file says about late-bound values (comments and tests aside): the
/// [`LATE_BOUND`] words it uses, and the `set_*` functions that take an `Arc<dyn …>`.
fn late_bound() -> BTreeMap<String, (BTreeSet<&'static str>, Vec<String>)> {
    let src = Path::new(ROOT).join("src");
    let mut out = BTreeMap::new();
    for path in rs_files(&src) {
        let rel = relative(&src, &path);
        if rel.ends_with("/tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // A test module inside the file may do as it likes (a `#[cfg(test)] mod tests;`
        // declared at the top is no reason to skip the rest).
        let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let words: BTreeSet<&str> = LATE_BOUND
            .iter()
            .copied()
            .filter(|w| code.contains(w))
            .collect();
        let mut setters = Vec::new();
        for (at, _) in code.match_indices("fn set_") {
            let rest = &code[at + 3..];
            let signature = &rest[..rest.find(['{', ';']).unwrap_or(rest.len())];
            let compact: String = signature.split_whitespace().collect();
            if compact.contains("Arc<dyn") || compact.contains("Door") {
                setters.push(signature.split('(').next().unwrap_or(signature).to_string());
            }
        }
        if !words.is_empty() || !setters.is_empty() {
            out.insert(rel, (words, setters));
        }
    }
    out
}

#[test]
fn no_part_is_wired_after_it_is_built() {
    let found = late_bound();
    let mut wrong = Vec::new();
    for (file, (words, setters)) in &found {
        if !words.is_empty() && !CACHES.contains(&file.as_str()) {
            wrong.push(format!(
                "src/{file}: {}",
                words.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
        for setter in setters {
            wrong.push(format!(
                "src/{file}: fn {setter} sets a trait object after construction"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "a value set after construction wires one part to another behind the composition root \
         (src/controller/wiring.rs): give it to the constructor, or, where two parts need each \
         other, a channel made first whose receiver the upper part serves. A cache of what the \
         file computes itself belongs in CACHES.\n{}",
        wrong.join("\n")
    );
    let stale: Vec<&&str> = CACHES
        .iter()
        .filter(|c| found.get(**c).is_none_or(|(w, _)| w.is_empty()))
        .collect();
    assert!(
        stale.is_empty(),
        "these files hold no lazily set value any more; take them out of CACHES: {stale:?}"
    );
}
