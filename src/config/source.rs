//! The three config files as read from disk: their text and span trees, kept beside the typed
//! config so that any later stage can turn a JSON pointer back into `file:line:col`.

use std::borrow::Cow;
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
    /// `None` for an empty file or one that did not parse, and for a file whose tree was
    /// never whole (see `let_go`).
    pub root: Option<Node>,
    /// `Some` for a file loaded without its whole tree ([`super::load_lean`]).
    pub let_go: Option<Box<LetGo>>,
}

/// What a file loaded without its whole tree keeps, to look into it again.
#[derive(Debug, Clone)]
pub struct LetGo {
    /// The file's list (`/bindings`) and each of its items' spans in the whole tree.
    list: String,
    spans: Vec<Span>,
    /// The tree with the list empty.
    rest: Node,
    /// The items that the loader's question picked out, by index ([`super::Flag`]).
    flagged: Vec<usize>,
    /// The text parsed again, the first time a lookup is not inside one item of the list.
    whole: OnceLock<Option<Node>>,
    /// Where each line starts (byte offsets), made for the first item looked up.
    lines: OnceLock<Vec<usize>>,
}

impl LetGo {
    pub(super) fn new(list: String, spans: Vec<Span>, rest: Node, flagged: Vec<usize>) -> LetGo {
        LetGo {
            list,
            spans,
            rest,
            flagged,
            whole: OnceLock::new(),
            lines: OnceLock::new(),
        }
    }

    /// The list's pointer.
    pub fn list(&self) -> &str {
        &self.list
    }

    /// The file's tree without the list's items.
    pub fn rest(&self) -> &Node {
        &self.rest
    }

    /// The indices of the items the loader picked out.
    pub fn flagged(&self) -> &[usize] {
        &self.flagged
    }

    /// The item of the list that `pointer` is in, parsed again from its own lines (from its
    /// `-` to the next item's, or for the last item, to where the whole tree ends it), and the
    /// rest of the pointer; `None` for a pointer outside the items, or an item whose lines do
    /// not give back its span.
    fn item<'p>(&self, text: &str, pointer: &'p str) -> Option<(Node, &'p str)> {
        let rest = pointer
            .strip_prefix(self.list.as_str())?
            .strip_prefix('/')?;
        let (index, rest) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let i: usize = index.parse().ok()?;
        let span = self.spans.get(i)?;
        let end = self
            .spans
            .get(i + 1)
            .map_or(span.end.line, |next| next.start.line);
        if end <= span.start.line {
            return None;
        }
        let lines = self.lines.get_or_init(|| {
            std::iter::once(0)
                .chain(text.match_indices('\n').map(|(at, _)| at + 1))
                .collect()
        });
        let from = *lines.get(usize::try_from(span.start.line).ok()?.checked_sub(1)?)?;
        let to = *lines.get(usize::try_from(end).ok()?.checked_sub(1)?)?;
        let item = yaml::parse_item(text.get(from..to)?, span.start.line, *span)?;
        Some((item, rest))
    }
}

impl SourceFile {
    pub fn new(kind: FileKind, path: PathBuf, text: String) -> SourceFile {
        SourceFile {
            kind,
            path,
            text,
            root: None,
            let_go: None,
        }
    }

    /// The file's span tree: its own, or where it was never whole, the text parsed again (once).
    pub fn tree(&self) -> Option<&Node> {
        match (&self.root, &self.let_go) {
            (Some(root), _) => Some(root),
            (None, Some(let_go)) => let_go
                .whole
                .get_or_init(|| yaml::parse(&self.text).ok().flatten())
                .as_ref(),
            (None, None) => None,
        }
    }

    /// Whether a lookup parsed the whole text again, for a file loaded without its tree (for the tests
    /// that hold a lookup to one item's parse).
    #[doc(hidden)]
    pub fn parsed_whole_again(&self) -> bool {
        self.let_go
            .as_ref()
            .is_some_and(|l| l.whole.get().is_some())
    }

    /// Where to look `pointer` up: a tree and the pointer within it. That is the file's tree,
    /// or where it was never whole and `pointer` is inside one item of its list, that item alone,
    /// parsed again from its lines (a lookup in a large file costs one item's parse).
    pub fn subtree<'p>(&self, pointer: &'p str) -> Option<(Cow<'_, Node>, &'p str)> {
        if self.root.is_none()
            && let Some((item, rest)) = self.let_go.as_ref()?.item(&self.text, pointer)
        {
            return Some((Cow::Owned(item), rest));
        }
        self.tree().map(|root| (Cow::Borrowed(root), pointer))
    }

    /// The location of the node at `pointer`, or of its nearest existing ancestor.
    pub fn locate(&self, pointer: &str) -> Location {
        let found = self.subtree(pointer);
        let mut span = found.as_ref().map(|(r, _)| r.span).unwrap_or_default();
        if let Some((root, pointer)) = &found {
            let mut node = &**root;
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
        let key_span = self
            .subtree(parent)
            .and_then(|(root, parent)| Some(root.pointer(parent)?.entry(&key)?.key_span));
        match key_span {
            Some(span) => self.location(pointer, span),
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
