//! Loading a config directory: the three YAML files → one [`Config`].
//!
//! The pipeline per file is read (size and UTF-8 checks) → [`yaml::parse`] (span tree) →
//! misplaced top-level keys → JSON Schema (item by item, [`schema::validate`]) → typed decoding
//! straight from the tree ([`yaml::de`]). No stage makes a JSON copy of the whole file. Every failure is a diagnostic with a
//! position; nothing here panics on input. An item that fails the schema (one agent, one binding,
//! one account) is left out of the typed config and the collection it belongs to is marked
//! [`Completeness`]-incomplete, so the semantic rules can still run on the rest without reporting
//! references to the missing item as dangling.
//!
//! This module reads the files it is given and nothing else: no state, no network.

pub mod model;
pub mod paths;
pub mod resolve;
pub mod schema;
pub mod source;
pub mod yaml;

use std::path::{Path, PathBuf};

pub use resolve::{Account, Agent, Binding, Channel, Config};
pub use source::{FileKind, SourceFile, Sources};

use crate::diagnostic::{Diagnostic, Location, rules};
use yaml::{Pos, Span, YamlErrorKind};

/// Files larger than this are refused before they are read.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// What loading needs besides the directory.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The state directory: relative workspace and agentDir paths live under it.
    pub state_dir: PathBuf,
    /// What `~` means in paths; `None` leaves `~` paths as written.
    pub home: Option<PathBuf>,
}

impl LoadOptions {
    /// The state dir default (`~/.deepcli`) and `$HOME`.
    pub fn from_env() -> LoadOptions {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let state_dir = home
            .as_ref()
            .map_or_else(|| PathBuf::from(".deepcli"), |h| h.join(".deepcli"));
        LoadOptions { state_dir, home }
    }
}

/// Which collections lost items to schema errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completeness {
    pub agents: bool,
    pub channels: bool,
    pub bindings: bool,
}

impl Completeness {
    pub fn all() -> Completeness {
        Completeness {
            agents: true,
            channels: true,
            bindings: true,
        }
    }
}

/// The outcome of loading: the config (as much of it as was valid) and what was found wrong.
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub diagnostics: Vec<Diagnostic>,
}

/// Why a directory could not be loaded at all (as opposed to loading with diagnostics).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("config directory `{}` does not exist", .0.display())]
    NotFound(PathBuf),
    #[error("`{}` is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot read config directory `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// That `dir` is a directory, as [`load`] checks it first.
fn is_dir(dir: &Path) -> Result<(), LoadError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(LoadError::NotADirectory(dir.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(LoadError::NotFound(dir.to_path_buf()))
        }
        Err(source) => Err(LoadError::Io {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Whether `dir` is a config directory [`load`] can read, and holds any of the three files:
/// what `deepcli up` checks before it creates anything. Reads no file.
pub fn check_dir(dir: &Path) -> Result<bool, LoadError> {
    is_dir(dir)?;
    std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    Ok(FileKind::ALL
        .iter()
        .any(|k| std::fs::symlink_metadata(dir.join(k.file_name())).is_ok()))
}

/// Loads and schema-checks the config directory `dir`. Semantic rules are not run here: see
/// `crate::validate`.
pub fn load(dir: &Path, options: &LoadOptions) -> Result<Loaded, LoadError> {
    load_with(dir, options, None)
}

/// A question asked of each binding of a bindings.yaml loaded by [`load_lean`], on the thread
/// that parsed it: whether a later stage should look at that binding again. The file keeps
/// the indices of those it picks out ([`source::LetGo::flagged`]).
pub type Flag = dyn Fn(&yaml::Node) -> bool + Sync;

/// [`load`] for a stage that only reports what it finds (`deepcli validate`). A bindings.yaml
/// that is parsed in pieces ([`yaml::parse_streamed`]) never has its whole tree: each binding is
/// schema-checked, decoded and asked `flag` on the thread that parsed it, then freed. The file
/// keeps its text, each binding's span, and the tree without the bindings
/// ([`SourceFile::let_go`]): a lookup afterwards parses again only the binding it is in
/// ([`SourceFile::subtree`]). The diagnostics and the config are [`load`]'s.
pub fn load_lean(dir: &Path, options: &LoadOptions, flag: &Flag) -> Result<Loaded, LoadError> {
    load_with(dir, options, Some(flag))
}

fn load_with(dir: &Path, options: &LoadOptions, lean: Option<&Flag>) -> Result<Loaded, LoadError> {
    is_dir(dir)?;
    let mut texts = Vec::new();
    let mut unreadable = Vec::new();
    for kind in FileKind::ALL {
        let path = dir.join(kind.file_name());
        match read(&path) {
            Ok(None) => {}
            Ok(Some(text)) => texts.push((kind, path, text)),
            Err(d) => unreadable.push((kind, path, *d)),
        }
    }
    let any_file = !texts.is_empty() || !unreadable.is_empty();
    let Loaded {
        mut config,
        mut diagnostics,
    } = parse_texts(dir, texts, any_file, options, lean);
    // A file that could not be read still counts as a file, with nothing known of its content.
    for (kind, path, d) in unreadable {
        mark_incomplete(&mut config.complete, kind);
        config
            .sources
            .files
            .push(SourceFile::new(kind, path, String::new()));
        diagnostics.push(d);
    }
    Ok(Loaded {
        config,
        diagnostics,
    })
}

/// Loads from texts already in memory (tests, fuzzing, management edits that validate a
/// would-be file before writing it). `path`s are used only for messages.
/// A text over [`MAX_FILE_BYTES`] is `file-too-large`, as the file would be once written.
pub fn load_texts(
    dir: &Path,
    texts: Vec<(FileKind, PathBuf, String)>,
    options: &LoadOptions,
) -> Loaded {
    let any_file = !texts.is_empty();
    let (texts, too_large): (Vec<_>, Vec<_>) = texts
        .into_iter()
        .partition(|(_, _, text)| text.len() as u64 <= MAX_FILE_BYTES);
    let Loaded {
        mut config,
        mut diagnostics,
    } = parse_texts(dir, texts, any_file, options, None);
    for (kind, path, text) in too_large {
        mark_incomplete(&mut config.complete, kind);
        diagnostics.push(file_too_large(&path, text.len() as u64));
        config
            .sources
            .files
            .push(SourceFile::new(kind, path, String::new()));
    }
    Loaded {
        config,
        diagnostics,
    }
}

fn parse_texts(
    dir: &Path,
    texts: Vec<(FileKind, PathBuf, String)>,
    any_file: bool,
    options: &LoadOptions,
    lean: Option<&Flag>,
) -> Loaded {
    let mut diagnostics = Vec::new();
    let mut sources = Sources::default();
    let mut decoded = resolve::Decoded::default();
    let mut complete = Completeness::all();
    // The files side by side, each on a thread of its own but the last (bindings.yaml when
    // there is one, usually the largest), which runs here; their outcomes are taken in order.
    let loaded: Vec<FileLoad> = std::thread::scope(|scope| {
        let mut texts = texts;
        let last = texts.pop();
        let others: Vec<_> = texts
            .into_iter()
            .map(|(kind, path, text)| {
                scope.spawn(move || load_file(kind, path, text, options, lean))
            })
            .collect();
        let last = last.map(|(kind, path, text)| load_file(kind, path, text, options, lean));
        let mut loaded: Vec<FileLoad> = others
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect();
        loaded.extend(last);
        loaded
    });
    for file in loaded {
        if !file.complete {
            mark_incomplete(&mut complete, file.source.kind);
        }
        diagnostics.extend(file.diagnostics);
        decoded.take(file.decoded, file.source.kind);
        sources.files.push(file.source);
    }
    if !any_file {
        diagnostics.push(
            Diagnostic::new(
                rules::NOTHING_DECLARED,
                format!(
                    "`{}` has none of agents.yaml, channels.yaml, bindings.yaml: nothing is declared",
                    dir.display()
                ),
            )
            .hint("point --config at the directory that holds your config files; `validate` fails on it unless --allow-empty says a hub of only the implicit agent `main` is meant"),
        );
    }
    let config = resolve::resolve(dir, sources, decoded, complete, options);
    Loaded {
        config,
        diagnostics,
    }
}

/// One file loaded on its own: its tree, what was found wrong, what it decoded to.
struct FileLoad {
    source: SourceFile,
    diagnostics: Vec<Diagnostic>,
    decoded: resolve::Decoded,
    /// No item of the file was left out.
    complete: bool,
}

/// One file's pipeline: parse, misplaced keys, schema, typed decoding; for agents.yaml, the
/// agents resolved.
fn load_file(
    kind: FileKind,
    path: PathBuf,
    text: String,
    options: &LoadOptions,
    lean: Option<&Flag>,
) -> FileLoad {
    let mut load = FileLoad {
        source: SourceFile::new(kind, path, text),
        diagnostics: Vec::new(),
        decoded: resolve::Decoded::default(),
        complete: true,
    };
    // The size first: the schema's first use compiles it, which a small file's parse should
    // not wait for.
    if kind == FileKind::Bindings
        && let Some(flag) = lean
        && yaml::may_cut(&load.source.text)
        && let Some(check) = schema::item_check(kind, BINDINGS)
        && let Some(streamed) = stream_bindings(&load.source.text, &check, flag)
    {
        load_streamed(&mut load, &check, streamed);
        return load;
    }
    let file = &mut load.source;
    match yaml::parse(&file.text) {
        Ok(root) => file.root = root,
        Err(e) => {
            load.diagnostics.push(yaml_diagnostic(file, &e));
            load.complete = false;
            return load;
        }
    }
    let skip = misplaced_keys(file, &mut load.diagnostics);
    let schema_errors = schema::validate(file, &skip);
    let poisoned = poisoned(kind, &schema_errors);
    load.diagnostics.extend(schema_errors);
    match load.decoded.decode(file, &skip, &poisoned) {
        Ok(incomplete) => load.complete = !incomplete,
        Err(d) => {
            load.diagnostics.push(*d);
            load.complete = false;
        }
    }
    if kind == FileKind::Agents {
        load.decoded.resolve_agents(options);
    }
    load
}

/// The list [`load_lean`] streams.
const BINDINGS: &str = "/bindings";

/// What [`load_lean`] makes of one binding on the thread that parsed it, and whether its flag
/// picked it out.
struct StreamedBinding {
    item: StreamedItem,
    flagged: bool,
}

enum StreamedItem {
    Spec(model::BindingSpec),
    /// An empty item (`-`), which decoding skips.
    Null,
    /// Kept for its diagnostics.
    Invalid(yaml::Node),
    Undecodable(yaml::de::DeError),
}

/// bindings.yaml parsed with each binding checked, decoded and flagged as it is parsed; `None`
/// where it is not parsed in pieces, or its longest list is not `/bindings`.
fn stream_bindings(
    text: &str,
    check: &schema::ItemCheck<'_>,
    flag: &Flag,
) -> Option<yaml::Streamed<StreamedBinding>> {
    let each = |_: usize, node: yaml::Node| {
        let flagged = flag(&node);
        let item = if !check.is_valid(&node) {
            StreamedItem::Invalid(node)
        } else if matches!(node.value, yaml::Value::Null) {
            StreamedItem::Null
        } else {
            match yaml::de::from_node(&node) {
                Ok(spec) => StreamedItem::Spec(spec),
                Err(e) => StreamedItem::Undecodable(e),
            }
        };
        StreamedBinding { item, flagged }
    };
    yaml::parse_streamed(text, &each).filter(|s| s.list == BINDINGS)
}

/// The rest of [`load_file`] for a streamed bindings.yaml, in the same order: misplaced keys and
/// the schema on the tree without the bindings, then each invalid binding's errors (placed by
/// parsing it again), then the decoded bindings, or none where the file has an error above
/// them or a binding that could not be decoded.
fn load_streamed(
    load: &mut FileLoad,
    check: &schema::ItemCheck<'_>,
    streamed: yaml::Streamed<StreamedBinding>,
) {
    let file = &mut load.source;
    file.root = Some(streamed.root);
    let skip = misplaced_keys(file, &mut load.diagnostics);
    let above = schema::validate(file, &skip);
    // No binding is in this tree: an error here is above them, which takes the whole file
    // ([`poisoned`]).
    let whole = !above.is_empty();
    load.diagnostics.extend(above);
    let mut flagged = Vec::new();
    let mut invalid = Vec::new();
    let mut undecodable = None;
    // Collected in place: the bindings take the memory of what was streamed.
    let bindings: Vec<resolve::Binding> = streamed
        .items
        .into_iter()
        .enumerate()
        .filter_map(|(index, StreamedBinding { item, flagged: f })| {
            if f {
                flagged.push(index);
            }
            match item {
                StreamedItem::Spec(spec) => return Some(resolve::Binding { index, spec }),
                StreamedItem::Null => {}
                StreamedItem::Invalid(node) => invalid.push((index, node)),
                StreamedItem::Undecodable(e) => {
                    undecodable.get_or_insert(e);
                }
            }
            None
        })
        .collect();
    if let Some(rest) = file.root.take() {
        file.let_go = Some(Box::new(source::LetGo::new(
            streamed.list,
            streamed.spans,
            rest,
            flagged,
        )));
    }
    for (index, node) in &invalid {
        let errors = check.errors(file, &format!("{BINDINGS}/{index}"), node);
        load.diagnostics.extend(errors);
    }
    load.complete = !whole && invalid.is_empty() && undecodable.is_none();
    if whole {
        return;
    }
    match undecodable {
        Some(e) => load.diagnostics.push(*resolve::undecodable(file, &e)),
        None => load.decoded = resolve::Decoded::of_bindings(bindings),
    }
}

fn mark_incomplete(complete: &mut Completeness, kind: FileKind) {
    match kind {
        FileKind::Agents => complete.agents = false,
        FileKind::Channels => complete.channels = false,
        FileKind::Bindings => complete.bindings = false,
    }
}

/// `file-too-large` for a file of `len` bytes at `path`.
fn file_too_large(path: &Path, len: u64) -> Diagnostic {
    Diagnostic::new(
        rules::FILE_TOO_LARGE,
        format!(
            "the file is {len} bytes; config files are limited to {MAX_FILE_BYTES} bytes (16 MiB)"
        ),
    )
    .hint("split generated content out of the config, or check that this is the right file")
    .at(Location {
        file: path.to_path_buf(),
        pointer: String::new(),
        span: Span {
            start: Pos { line: 1, column: 1 },
            end: Pos { line: 1, column: 1 },
        },
    })
}

/// Reads one file; `Ok(None)` when it does not exist.
fn read(path: &Path) -> Result<Option<String>, Box<Diagnostic>> {
    let whole_file = || Location {
        file: path.to_path_buf(),
        pointer: String::new(),
        span: Span {
            start: Pos { line: 1, column: 1 },
            end: Pos { line: 1, column: 1 },
        },
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Box::new(
                Diagnostic::new(rules::UNREADABLE_FILE, format!("cannot read the file: {e}"))
                    .at(whole_file()),
            ));
        }
    };
    if meta.len() > MAX_FILE_BYTES {
        return Err(Box::new(file_too_large(path, meta.len())));
    }
    let bytes = std::fs::read(path).map_err(|e| {
        Box::new(
            Diagnostic::new(rules::UNREADABLE_FILE, format!("cannot read the file: {e}"))
                .at(whole_file()),
        )
    })?;
    decode_utf8(bytes).map(Some).map_err(|(line, column)| {
        Box::new(
            Diagnostic::new(
                rules::NON_UTF8,
                "the file is not valid UTF-8 text".to_string(),
            )
            .hint("save the file as UTF-8 (YAML files must be Unicode text)")
            .at(Location {
                file: path.to_path_buf(),
                pointer: String::new(),
                span: Span {
                    start: Pos { line, column },
                    end: Pos { line, column },
                },
            }),
        )
    })
}

/// UTF-8 text without a leading BOM; on failure, the line and column of the first bad byte.
pub fn decode_utf8(bytes: Vec<u8>) -> Result<String, (u32, u32)> {
    match String::from_utf8(bytes) {
        Ok(mut text) => {
            if text.starts_with('\u{feff}') {
                text.drain(..'\u{feff}'.len_utf8());
            }
            Ok(text)
        }
        Err(e) => {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            // Safe to decode: this prefix is exactly the valid part.
            let prefix = std::str::from_utf8(valid).unwrap_or_default();
            let line = prefix.matches('\n').count() + 1;
            let column = prefix.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            Err((
                u32::try_from(line).unwrap_or(u32::MAX),
                u32::try_from(column).unwrap_or(u32::MAX),
            ))
        }
    }
}

fn yaml_diagnostic(file: &SourceFile, e: &yaml::YamlError) -> Diagnostic {
    let (rule, hint) = match e.kind {
        YamlErrorKind::Syntax => (
            rules::YAML_SYNTAX,
            "check indentation, colons and quotes near this position",
        ),
        YamlErrorKind::Tab => (
            rules::YAML_TAB,
            "YAML indents with spaces only: replace the tab with spaces",
        ),
        YamlErrorKind::DuplicateKey => (
            rules::DUPLICATE_KEY,
            "a YAML loader would silently keep only the last value: remove or rename one",
        ),
        YamlErrorKind::AliasLimit => (
            rules::ALIAS_LIMIT,
            "write the values out instead of nesting aliases",
        ),
        YamlErrorKind::TooDeep => (
            rules::YAML_TOO_DEEP,
            "config files need only a few levels of nesting",
        ),
        YamlErrorKind::MultipleDocuments => (
            rules::YAML_SYNTAX,
            "remove the `---` separator and everything after it, or merge the documents",
        ),
        YamlErrorKind::UnsupportedKey => (rules::YAML_SYNTAX, "use a plain string as the key"),
        YamlErrorKind::UnsupportedTag => (
            rules::YAML_SYNTAX,
            "remove the tag; write the value plainly",
        ),
    };
    let mut d = Diagnostic::new(rule, e.message.clone())
        .hint(hint)
        .at(file.location("", e.span));
    if let Some(first) = e.related {
        d = d.related(file.location("", first), "first defined here");
    }
    d
}

/// A top-level key that belongs in another file (`bindings:` in agents.yaml) is reported as
/// such and left out (returned), so the schema does not report it a second time as unknown.
fn misplaced_keys(file: &SourceFile, out: &mut Vec<Diagnostic>) -> Vec<String> {
    let Some(yaml::Node {
        value: yaml::Value::Map(entries),
        ..
    }) = &file.root
    else {
        return Vec::new();
    };
    let mut misplaced = Vec::new();
    for entry in entries {
        let key = &entry.key;
        let Some(owner) = FileKind::owning(key).filter(|owner| *owner != file.kind) else {
            continue;
        };
        out.push(
            Diagnostic::new(
                rules::WRONG_FILE,
                format!(
                    "`{key}` belongs in {}, not {}",
                    owner.file_name(),
                    file.kind.file_name()
                ),
            )
            .hint(format!("move the `{key}:` block to {}", owner.file_name()))
            .at(file.locate_key(&format!("/{key}"))),
        );
        misplaced.push(key.to_string());
    }
    misplaced
}

/// The items that schema errors point into (one agent, binding, channel or account): they are
/// left out of decoding so that the rest can be decoded ([`resolve::Poisoned`]). An error above
/// item level (the root, `agents.defaults`, `session`) takes the whole file.
fn poisoned(kind: FileKind, errors: &[Diagnostic]) -> resolve::Poisoned {
    if errors.is_empty() {
        return resolve::Poisoned::Nothing;
    }
    let mut items: Vec<String> = Vec::new();
    for d in errors {
        let pointer = d.location.as_ref().map_or("", |l| l.pointer.as_str());
        match item_pointer(kind, pointer) {
            Some(item) => items.push(item),
            None => return resolve::Poisoned::Whole,
        }
    }
    items.sort();
    items.dedup();
    resolve::Poisoned::Items(items)
}

/// The pointer of the item an error pointer falls in, if it falls in one.
fn item_pointer(kind: FileKind, pointer: &str) -> Option<String> {
    let tokens: Vec<_> = yaml::pointer_tokens(pointer).collect();
    let depth = match (kind, tokens.first().map(|t| t.as_ref())) {
        (FileKind::Agents, Some("agents")) if tokens.get(1).map(|t| t.as_ref()) == Some("list") => {
            3
        }
        (FileKind::Channels, Some("channels"))
            if tokens.get(2).map(|t| t.as_ref()) == Some("accounts") =>
        {
            4
        }
        (FileKind::Channels, Some("channels")) => 2,
        (FileKind::Bindings, Some("bindings")) => 2,
        _ => return None,
    };
    if tokens.len() < depth {
        return None;
    }
    Some(
        tokens[..depth]
            .iter()
            .map(|t| format!("/{}", yaml::escape_pointer_token(t)))
            .collect(),
    )
}
