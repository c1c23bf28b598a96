//! The three config files as read from disk: their text and span trees, kept beside the typed
//! config so that any later stage can turn a JSON pointer back into `file:line:col`.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::yaml::{self, Node, Pos, Span};
use crate::diagnostic::Location;

/// Which of the three config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    Agents,
    Channels,
    Bindings,
}

impl FileKind {
    pub const ALL: [FileKind; 3] = [FileKind::Agents, FileKind::Channels, FileKind::Bindings];

    pub fn file_name(self) -> &'static str {
        match self {
            FileKind::Agents => "agents.yaml",
            FileKind::Channels => "channels.yaml",
            FileKind::Bindings => "bindings.yaml",
        }
    }

    /// The top-level keys this file may hold.
    pub fn top_keys(self) -> &'static [&'static str] {
        match self {
            FileKind::Agents => &["agents", "tools", "session"],
            FileKind::Channels => &["channels", "a2a"],
            FileKind::Bindings => &["bindings"],
        }
    }

    /// The file a top-level key belongs in.
    pub fn owning(key: &str) -> Option<FileKind> {
        FileKind::ALL
            .into_iter()
            .find(|kind| kind.top_keys().contains(&key))
    }

    /// `agents`, `channels` or `bindings`: the name of its schema.
    pub fn schema_name(self) -> &'static str {
        match self {
            FileKind::Agents => "agents",
            FileKind::Channels => "channels",
            FileKind::Bindings => "bindings",
        }
    }
}

/// One config file that exists on disk.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub kind: FileKind,
    pub path: PathBuf,
    pub text: String,
    /// `None` for an empty file or one that did not parse, and once the tree was let go.
    pub root: Option<Node>,
    /// `Some` once the tree was let go ([`Sources::let_go`]): the text parsed again, the first
    /// time a lookup needs the tree.
    pub reparsed: Option<OnceLock<Option<Node>>>,
}

impl SourceFile {
    pub fn new(kind: FileKind, path: PathBuf, text: String) -> SourceFile {
        SourceFile {
            kind,
            path,
            text,
            root: None,
            reparsed: None,
        }
    }

    /// The file's span tree: its own, or where that was let go, the text parsed again (once).
    pub fn tree(&self) -> Option<&Node> {
        match (&self.root, &self.reparsed) {
            (Some(root), _) => Some(root),
            (None, Some(again)) => again
                .get_or_init(|| yaml::parse(&self.text).ok().flatten())
                .as_ref(),
            (None, None) => None,
        }
    }

    /// The location of the node at `pointer`, or of its nearest existing ancestor.
    pub fn locate(&self, pointer: &str) -> Location {
        let root = self.tree();
        let mut span = root.map(|r| r.span).unwrap_or_default();
        if let Some(root) = root {
            let mut node = root;
            for token in yaml::pointer_tokens(pointer) {
                match node.child(&token) {
                    Some(child) => node = child,
                    None => break,
                }
                span = node.span;
            }
        }
        if span.start.line == 0 {
            span = Span {
                start: Pos { line: 1, column: 1 },
                end: Pos { line: 1, column: 1 },
            };
        }
        self.location(pointer, span)
    }

    /// The location of the *key* of the mapping entry at `pointer` (`/agents/list/0/id` → the
    /// `id` key), falling back to [`SourceFile::locate`].
    pub fn locate_key(&self, pointer: &str) -> Location {
        let (parent, last) = match pointer.rsplit_once('/') {
            Some(split) => split,
            None => return self.locate(pointer),
        };
        let key = yaml::pointer_tokens(&format!("/{last}"))
            .next()
            .map(|t| t.into_owned())
            .unwrap_or_default();
        let entry = self
            .tree()
            .and_then(|r| r.pointer(parent))
            .and_then(|p| p.entry(&key));
        match entry {
            Some(entry) => self.location(pointer, entry.key_span),
            None => self.locate(pointer),
        }
    }

    pub fn location(&self, pointer: &str, span: Span) -> Location {
        Location {
            file: self.path.clone(),
            pointer: pointer.to_string(),
            span,
        }
    }

    /// The text of a 1-based line, without its line break.
    pub fn line(&self, line: u32) -> Option<&str> {
        self.text.lines().nth((line as usize).checked_sub(1)?)
    }
}

/// The config files that were found, at most one of each kind.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub files: Vec<SourceFile>,
}

impl Sources {
    /// The config hash: the three files' names and texts (a missing file counts as absent,
    /// which differs from empty). Equal hashes mean equal configs, byte for byte.
    pub fn hash(&self) -> String {
        let mut hasher = crate::hash::Hasher::default();
        for kind in FileKind::ALL {
            hasher.part(kind.file_name().as_bytes());
            match self.get(kind) {
                Some(file) => hasher.part(b"present").part(file.text.as_bytes()),
                None => hasher.part(b"absent"),
            };
        }
        hasher.finish()
    }

    pub fn get(&self, kind: FileKind) -> Option<&SourceFile> {
        self.files.iter().find(|f| f.kind == kind)
    }

    /// The file at `path`, for renderers that show source lines.
    pub fn by_path(&self, path: &std::path::Path) -> Option<&SourceFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Locates `pointer` in the file of `kind`; a file that does not exist gets line 1.
    pub fn locate(&self, kind: FileKind, pointer: &str) -> Option<Location> {
        self.get(kind).map(|f| f.locate(pointer))
    }

    pub fn locate_key(&self, kind: FileKind, pointer: &str) -> Option<Location> {
        self.get(kind).map(|f| f.locate_key(pointer))
    }

    /// Takes the span tree of `kind`'s file out to free it, keeping its text: a lookup that
    /// needs the tree afterwards parses the text again ([`SourceFile::tree`]). For a stage that
    /// looks into the file only to place what it finds, and rarely finds anything.
    pub fn let_go(&mut self, kind: FileKind) -> Option<Node> {
        let file = self.files.iter_mut().find(|f| f.kind == kind)?;
        let root = file.root.take()?;
        file.reparsed = Some(OnceLock::new());
        Some(root)
    }

    /// Takes the span tree of `kind`'s file out, keeping its text (snippets, the hash): for a
    /// pipeline that has every position it needs from that file. A lookup in it afterwards
    /// finds the start of the file.
    pub fn take_tree(&mut self, kind: FileKind) -> Option<Node> {
        self.files
            .iter_mut()
            .find(|f| f.kind == kind)
            .and_then(|f| f.root.take())
    }
}
