//! YAML text → a tree of [`Node`]s, each with its source span.
//!
//! This is the only place that reads YAML. It keeps what a validator needs and what the usual
//! loaders throw away: a span for every node, the YAML type of every scalar (`42` is an integer,
//! `"42"` a string), and hard failures for duplicate keys, alias bombs, deep nesting and multiple
//! documents — each a [`YamlError`] with a position, never a panic.
//!
//! It must not know about deepcli's config shape: that is for `schema` and `model`.

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span as RawSpan, Tag};
pub use smol_str::SmolStr;

pub mod de;
mod parallel;

/// Deepest nesting accepted. deepcli's files need six levels; anything near this bound is a
/// mistake or an attack, and keeping it small keeps every recursive walk of the tree shallow.
pub const MAX_DEPTH: usize = 64;

/// Most nodes that aliases may add by expansion, in one file. Real configs use a handful of
/// anchors; "billion laughs" documents need millions.
pub const MAX_ALIAS_NODES: usize = 100_000;

pub use crate::span::{Pos, Span};

fn span_of(raw: RawSpan) -> Span {
    Span {
        start: pos(raw.start),
        end: pos(raw.end),
    }
}

fn pos(marker: saphyr_parser::Marker) -> Pos {
    Pos {
        line: u32::try_from(marker.line()).unwrap_or(u32::MAX),
        column: u32::try_from(marker.col() + 1).unwrap_or(u32::MAX),
    }
}

/// Sequences this long are converted [`Node::to_json`] on two threads.
const PARALLEL_ITEMS: usize = 8192;

/// A YAML node with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub span: Span,
    pub value: Value,
}

/// A YAML value, typed by the YAML 1.2 core schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(SmolStr),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// One `key: value` pair of a mapping. Keys are strings (a scalar key of another type is kept
/// as its text, the way JSON would have to), with the key's own span for diagnostics.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: SmolStr,
    pub key_span: Span,
    pub value: Node,
}

/// Why a YAML text could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub kind: YamlErrorKind,
    pub message: String,
    pub span: Span,
    /// A second place the error involves (the first of two duplicate keys).
    pub related: Option<Span>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlErrorKind {
    Syntax,
    Tab,
    DuplicateKey,
    AliasLimit,
    TooDeep,
    MultipleDocuments,
    UnsupportedKey,
    UnsupportedTag,
}

impl Node {
    /// The node at a JSON pointer (`/bindings/3/match`), if there is one.
    pub fn pointer(&self, pointer: &str) -> Option<&Node> {
        let mut node = self;
        for token in pointer_tokens(pointer) {
            node = node.child(&token)?;
        }
        Some(node)
    }

    /// The direct child named by one pointer token: a mapping key or a sequence index.
    pub fn child(&self, token: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|e| e.key == token).map(|e| &e.value),
            Value::Seq(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        }
    }

    /// The entry of a mapping with this key.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    /// The node as JSON, for schema validation and typed decoding. Keeps YAML types.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            // NaN and infinities have no JSON form; keep their YAML spelling so a schema error
            // names what was written.
            // JSON Schema counts 4.0 as an integer; make it one so typed decoding agrees.
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => J::from(*f as i64),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or_else(|| J::String(f.to_string())),
            Value::String(s) => J::String(s.to_string()),
            Value::Seq(items) if items.len() >= PARALLEL_ITEMS => {
                // A long list (bindings) is converted in halves side by side.
                let (front, back) = items.split_at(items.len() / 2);
                let convert = |items: &[Node]| items.iter().map(Node::to_json).collect::<Vec<_>>();
                let (mut front, back) = crate::threads::join(|| convert(front), || convert(back));
                front.extend(back);
                J::Array(front)
            }
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|e| (e.key.to_string(), e.value.to_json()))
                    .collect(),
            ),
        }
    }

    /// A short name of the node's YAML type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "number",
            Value::String(_) => "string",
            Value::Seq(_) => "sequence",
            Value::Map(_) => "mapping",
        }
    }

    fn count(&self) -> usize {
        1 + match &self.value {
            Value::Seq(items) => items.iter().map(Node::count).sum(),
            Value::Map(entries) => entries.iter().map(|e| e.value.count()).sum(),
            _ => 0,
        }
    }
}

/// Splits a JSON pointer into unescaped tokens (`~1` is `/`, `~0` is `~`).
pub fn pointer_tokens(pointer: &str) -> impl Iterator<Item = Cow<'_, str>> {
    pointer.split('/').skip(1).map(|token| {
        if token.contains('~') {
            Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(token)
        }
    })
}

/// Escapes one JSON pointer token.
pub fn escape_pointer_token(token: &str) -> Cow<'_, str> {
    if token.contains(['~', '/']) {
        Cow::Owned(token.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(token)
    }
}

/// Parses one YAML document. An empty text (or one of only comments) is `Ok(None)`.
///
/// A large file whose bulk is one block sequence (the list of bindings.yaml) is parsed on
/// several threads ([`parallel`]) into the same tree, spans included. Whatever that cannot
/// vouch for, errors included, is parsed whole, so an error is always the whole parse's.
pub fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    let parsed = match parallel::parse(text) {
        Some(root) => Ok(Some(root)),
        None => run(text).map(|parsed| parsed.root),
    };
    inside(text, parsed)
}

/// One item of a block sequence parsed again on its own: `lines` are the lines from its `-` to
/// the next item's, the first of them line `first_line` of the file, and `span` is where the
/// whole file's tree has the item. `None` where they do not give back that item.
pub fn parse_item(lines: &str, first_line: u32, span: Span) -> Option<Node> {
    parallel::item(lines, first_line, span)
}

/// A large file parsed without ever holding its longest block sequence whole: each item goes,
/// as soon as it is parsed, to the function the parse was given, on the thread that parsed it.
/// The spans are those [`parse`] gives.
#[derive(Debug)]
pub struct Streamed<T> {
    /// The file's tree, with that sequence empty.
    pub root: Node,
    /// The sequence's pointer (`/bindings`).
    pub list: String,
    /// What the function made of each item, in order.
    pub items: Vec<T>,
    /// Each item's span.
    pub spans: Vec<Span>,
}

/// Whether [`parse`] may cut `text` in pieces (and [`parse_streamed`] stream it): it is large
/// enough for threads to pay.
pub fn may_cut(text: &str) -> bool {
    text.len() >= parallel::MIN_BYTES
}

/// `text` parsed as [`parse`] parses it, but the items of its longest block sequence are handed
/// to `each` (with their index) instead of kept. `None` where [`parse`] would not cut the text
/// in pieces (a small file, tabs, an alias into another piece, …), where it does not end with
/// a line break, and where it does not parse: then the caller parses it whole, for its tree or
/// its error.
pub fn parse_streamed<T: Send>(
    text: &str,
    each: &(dyn Fn(usize, Node) -> T + Sync),
) -> Option<Streamed<T>> {
    parallel::streamed(text, each)
}

/// Keeps every position inside `text`. Where a text does not end with a line break, the
/// scanner ends it on the line after its last one: the nodes that end there (the root and its
/// last child, that child's last child, …) and an error found there are put just after the
/// last character instead.
fn inside(text: &str, parsed: Result<Option<Node>, YamlError>) -> Result<Option<Node>, YamlError> {
    if text.is_empty() || text.ends_with(['\n', '\r']) {
        return parsed;
    }
    let end = end_of(text);
    let clamp = |pos: &mut Pos| *pos = (*pos).min(end);
    match parsed {
        Ok(mut root) => {
            let mut node = root.as_mut();
            while let Some(n) = node {
                clamp(&mut n.span.start);
                clamp(&mut n.span.end);
                node = match &mut n.value {
                    Value::Seq(items) => items.last_mut(),
                    Value::Map(entries) => entries.last_mut().map(|e| {
                        clamp(&mut e.key_span.start);
                        clamp(&mut e.key_span.end);
                        &mut e.value
                    }),
                    _ => None,
                };
            }
            Ok(root)
        }
        Err(mut e) => {
            clamp(&mut e.span.start);
            clamp(&mut e.span.end);
            if let Some(related) = &mut e.related {
                clamp(&mut related.start);
                clamp(&mut related.end);
            }
            Err(e)
        }
    }
}

/// The whole-file parse, never cut in pieces: what [`parse`] must always agree with. For the
/// equivalence test of the public loading path (`tests/loader.rs`).
#[doc(hidden)]
pub fn parse_whole(text: &str) -> Result<Option<Node>, YamlError> {
    inside(text, run(text).map(|parsed| parsed.root))
}

/// Whether [`parse`] cuts `text` in pieces on this machine, so that the same test knows it
/// tested the cut.
#[doc(hidden)]
pub fn is_cut(text: &str) -> bool {
    parallel::parse(text).is_some()
}

/// One parse of a text, with what the limits of a larger tree it becomes part of need.
struct Parsed {
    root: Option<Node>,
    /// Nodes added by alias expansion.
    alias_nodes: usize,
    /// The deepest nesting of collections (1: the root is one).
    depth: usize,
}

fn run(text: &str) -> Result<Parsed, YamlError> {
    build(text, Builder::default()).map(|(parsed, _)| parsed)
}

/// [`run`], but the outermost sequence that starts on `line` hands each of its items to `sink`
/// as soon as the item is complete, instead of keeping it: in the tree it is empty. Also says
/// where that sequence starts and how many items it had, if there was one.
fn run_streaming(
    text: &str,
    line: u32,
    sink: &mut dyn FnMut(Node),
) -> Result<(Parsed, Option<(Pos, usize)>), YamlError> {
    let builder = Builder {
        stream: Some(Stream {
            line,
            open: None,
            start: None,
            items: 0,
            sink,
        }),
        ..Builder::default()
    };
    build(text, builder)
}

fn build<'s>(
    text: &str,
    mut builder: Builder<'s>,
) -> Result<(Parsed, Option<(Pos, usize)>), YamlError> {
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| scan_error(text, &e))?;
        builder.push(event, span_of(span))?;
    }
    let streamed = builder.stream.and_then(|s| Some((s.start?, s.items)));
    let parsed = Parsed {
        root: builder.root,
        alias_nodes: builder.alias_nodes,
        depth: builder.depth,
    };
    Ok((parsed, streamed))
}

/// Where the items of one sequence go instead of into the tree ([`run_streaming`]).
struct Stream<'s> {
    /// The sequence is the first to start on this line: the outermost one there.
    line: u32,
    /// Its frame's index in the stack while it is open.
    open: Option<usize>,
    /// Where it starts, once it has started.
    start: Option<Pos>,
    /// Items handed to the sink.
    items: usize,
    sink: &'s mut dyn FnMut(Node),
}

/// A mapping or sequence under construction. Its items or entries so far are the tail of the
/// builder's shared [`Builder::items`] or [`Builder::entries`] from `first` on (a frame's
/// children are complete before the next sibling starts), so that each collection is
/// allocated once, at its exact size, when it ends.
enum Frame {
    Seq {
        anchor: usize,
        start: Pos,
        first: usize,
    },
    Map {
        anchor: usize,
        start: Pos,
        first: usize,
        pending_key: Option<(SmolStr, Span)>,
        /// Key → entry index (from `first`), built once a mapping grows past [`INDEXED_MAP`]
        /// entries so that duplicate detection stays linear on huge mappings.
        index: Option<HashMap<SmolStr, usize>>,
    },
}

/// Below this many entries a linear key scan beats hashing.
const INDEXED_MAP: usize = 32;

#[derive(Default)]
struct Builder<'s> {
    stack: Vec<Frame>,
    /// The items of every open sequence, innermost last.
    items: Vec<Node>,
    /// The entries of every open mapping, innermost last.
    entries: Vec<Entry>,
    anchors: Vec<(usize, Node)>,
    alias_nodes: usize,
    /// The deepest the stack has been.
    depth: usize,
    documents: usize,
    root: Option<Node>,
    stream: Option<Stream<'s>>,
}

impl Builder<'_> {
    fn push(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => Ok(()),
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(error(
                        YamlErrorKind::MultipleDocuments,
                        "a config file holds one YAML document, this is a second one".into(),
                        span,
                    ));
                }
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                let value = scalar(&text, style, tag.as_deref(), span)?;
                self.finish(Node { span, value }, anchor)
            }
            Event::SequenceStart(anchor, tag) => {
                collection_tag(tag.as_deref(), span)?;
                self.open(span)?;
                self.depth = self.depth.max(self.stack.len() + 1);
                if let Some(stream) = &mut self.stream
                    && stream.start.is_none()
                    && span.start.line == stream.line
                {
                    stream.open = Some(self.stack.len());
                    stream.start = Some(span.start);
                }
                self.stack.push(Frame::Seq {
                    anchor,
                    start: span.start,
                    first: self.items.len(),
                });
                Ok(())
            }
            Event::MappingStart(anchor, tag) => {
                collection_tag(tag.as_deref(), span)?;
                self.open(span)?;
                self.depth = self.depth.max(self.stack.len() + 1);
                self.stack.push(Frame::Map {
                    anchor,
                    start: span.start,
                    first: self.entries.len(),
                    pending_key: None,
                    index: None,
                });
                Ok(())
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else {
                    return Ok(());
                };
                if let Some(stream) = &mut self.stream
                    && stream.open == Some(self.stack.len())
                {
                    stream.open = None;
                }
                let (anchor, node) = match frame {
                    Frame::Seq {
                        anchor,
                        start,
                        first,
                    } => (
                        anchor,
                        Node {
                            span: Span {
                                start,
                                end: span.end,
                            },
                            value: Value::Seq(self.items.drain(first..).collect()),
                        },
                    ),
                    Frame::Map {
                        anchor,
                        start,
                        first,
                        ..
                    } => (
                        anchor,
                        Node {
                            span: Span {
                                start,
                                end: span.end,
                            },
                            value: Value::Map(self.entries.drain(first..).collect()),
                        },
                    ),
                };
                self.finish(node, anchor)
            }
            Event::Alias(id) => {
                let Some((_, target)) = self.anchors.iter().rev().find(|(a, _)| *a == id) else {
                    return Err(error(
                        YamlErrorKind::Syntax,
                        "alias to an unknown anchor".into(),
                        span,
                    ));
                };
                self.alias_nodes += target.count();
                if self.alias_nodes > MAX_ALIAS_NODES {
                    return Err(error(
                        YamlErrorKind::AliasLimit,
                        format!(
                            "aliases expand to more than {MAX_ALIAS_NODES} nodes; this looks like an alias bomb"
                        ),
                        span,
                    ));
                }
                let mut node = target.clone();
                node.span = span;
                self.finish(node, 0)
            }
        }
    }

    fn open(&self, span: Span) -> Result<(), YamlError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(error(
                YamlErrorKind::TooDeep,
                format!("nesting deeper than {MAX_DEPTH} levels"),
                Span::at(span.start),
            ));
        }
        Ok(())
    }

    /// Attaches a completed node to its parent (or makes it the root).
    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), YamlError> {
        if anchor != 0 {
            self.anchors.push((anchor, node.clone()));
        }
        if let Some(stream) = &mut self.stream
            && stream.open.is_some_and(|open| open + 1 == self.stack.len())
        {
            stream.items += 1;
            (stream.sink)(node);
            return Ok(());
        }
        match self.stack.last_mut() {
            None => {
                self.root = Some(node);
                Ok(())
            }
            Some(Frame::Seq { .. }) => {
                self.items.push(node);
                Ok(())
            }
            Some(Frame::Map {
                first,
                pending_key,
                index,
                ..
            }) => match pending_key.take() {
                None => {
                    let key = key_text(&node)?;
                    let entries = &self.entries[*first..];
                    let earlier = match index {
                        Some(index) => index.get(&key).map(|&i| &entries[i]),
                        None => entries.iter().find(|e| e.key == key),
                    };
                    if let Some(first) = earlier {
                        return Err(YamlError {
                            kind: YamlErrorKind::DuplicateKey,
                            message: format!("duplicate key `{key}` in this mapping"),
                            span: node.span,
                            related: Some(first.key_span),
                        });
                    }
                    *pending_key = Some((key, node.span));
                    Ok(())
                }
                Some((key, key_span)) => {
                    let entries = &self.entries[*first..];
                    if let Some(index) = index {
                        index.insert(key.clone(), entries.len());
                    } else if entries.len() + 1 >= INDEXED_MAP {
                        let mut built: HashMap<SmolStr, usize> = entries
                            .iter()
                            .enumerate()
                            .map(|(i, e)| (e.key.clone(), i))
                            .collect();
                        built.insert(key.clone(), entries.len());
                        *index = Some(built);
                    }
                    self.entries.push(Entry {
                        key,
                        key_span,
                        value: node,
                    });
                    Ok(())
                }
            },
        }
    }
}

fn key_text(node: &Node) -> Result<SmolStr, YamlError> {
    match &node.value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(SmolStr::default()),
        Value::Bool(b) => Ok(smol_str::format_smolstr!("{b}")),
        Value::Int(i) => Ok(smol_str::format_smolstr!("{i}")),
        Value::Float(f) => Ok(smol_str::format_smolstr!("{f}")),
        Value::Seq(_) | Value::Map(_) => Err(error(
            YamlErrorKind::UnsupportedKey,
            "a mapping key must be a plain value, not a sequence or mapping".into(),
            node.span,
        )),
    }
}

/// Mappings and sequences take no tags: `!!map`/`!!seq` say nothing, anything else (`!!set`,
/// `!custom`) asks for a meaning deepcli does not give.
fn collection_tag(tag: Option<&Tag>, span: Span) -> Result<(), YamlError> {
    match tag {
        Some(tag)
            if !(tag.is_yaml_core_schema() && matches!(tag.suffix.as_str(), "map" | "seq")) =>
        {
            Err(error(
                YamlErrorKind::UnsupportedTag,
                format!("unsupported tag `{tag}`: config files use plain YAML values"),
                span,
            ))
        }
        _ => Ok(()),
    }
}

fn error(kind: YamlErrorKind, message: String, span: Span) -> YamlError {
    YamlError {
        kind,
        message,
        span,
        related: None,
    }
}

fn scan_error(text: &str, e: &ScanError) -> YamlError {
    let at = pos(*e.marker());
    // The scanner notices a tab where it breaks the structure, which can be past it (the end
    // of the previous token): point at the tab itself when one indents this or the next line.
    let first = (at.line as usize).saturating_sub(1);
    let tab = text
        .lines()
        .enumerate()
        .skip(first)
        .take(2)
        .find_map(|(i, line)| {
            let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
            indent.find('\t').map(|col| Pos {
                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                column: u32::try_from(indent[..col].chars().count() + 1).unwrap_or(u32::MAX),
            })
        });
    match tab {
        Some(tab) => error(
            YamlErrorKind::Tab,
            "a tab indents this line".into(),
            Span::at(tab),
        ),
        None if e.info().contains("tab") => {
            error(YamlErrorKind::Tab, e.info().to_string(), Span::at(at))
        }
        // The scanner's own bound on flow nesting, met before ours when it reads ahead.
        None if e.info().contains("recursion limit") => error(
            YamlErrorKind::TooDeep,
            format!("nesting deeper than {MAX_DEPTH} levels"),
            Span::at(at),
        ),
        None => error(YamlErrorKind::Syntax, e.info().to_string(), Span::at(at)),
    }
}

/// Just after the last character of `text`, with lines broken where YAML breaks them (`\n`,
/// `\r\n`, a lone `\r`).
fn end_of(text: &str) -> Pos {
    let mut end = Pos { line: 1, column: 1 };
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let lone_cr = c == '\r' && chars.peek() != Some(&'\n');
        if c == '\n' || lone_cr {
            end.line = end.line.saturating_add(1);
            end.column = 1;
        } else if c != '\r' {
            end.column = end.column.saturating_add(1);
        }
    }
    end
}

/// Resolves a scalar by the YAML 1.2 core schema: only plain scalars can be null, booleans or
/// numbers; quoted and block scalars are strings. `!!str` and friends override.
fn scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
    span: Span,
) -> Result<Value, YamlError> {
    if let Some(tag) = tag {
        if !tag.is_yaml_core_schema() {
            return Err(error(
                YamlErrorKind::UnsupportedTag,
                format!("unsupported tag `{tag}`: config files use plain YAML values"),
                span,
            ));
        }
        let value = match tag.suffix.as_str() {
            "str" => Some(Value::String(text.into())),
            "null" => plain_null(text).then_some(Value::Null),
            "bool" => plain_bool(text).map(Value::Bool),
            "int" => plain_int(text).map(Value::Int),
            "float" => plain_float(text)
                .or_else(|| plain_int(text).map(|i| i as f64))
                .map(Value::Float),
            _ => None,
        };
        return value.ok_or_else(|| {
            error(
                YamlErrorKind::UnsupportedTag,
                format!("`{text}` is not a valid `{tag}` value"),
                span,
            )
        });
    }
    if style != ScalarStyle::Plain {
        return Ok(Value::String(text.into()));
    }
    Ok(if plain_null(text) {
        Value::Null
    } else if let Some(b) = plain_bool(text) {
        Value::Bool(b)
    } else if let Some(i) = plain_int(text) {
        Value::Int(i)
    } else if let Some(f) = plain_float(text) {
        Value::Float(f)
    } else {
        Value::String(text.into())
    })
}

fn plain_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn plain_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn plain_int(text: &str) -> Option<i64> {
    let (digits, radix) = if let Some(hex) = text.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(oct) = text.strip_prefix("0o") {
        (oct, 8)
    } else {
        let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
        if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        return text.parse().ok();
    };
    if digits.is_empty() {
        return None;
    }
    i64::from_str_radix(digits, radix).ok()
}

fn plain_float(text: &str) -> Option<f64> {
    // Most plain scalars are words: every float starts with a sign, a dot or a digit.
    if !text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '-' | '+' | '.')) {
        return None;
    }
    match text {
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    // The core schema's float: [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac_part {
        Some(f) => digits(int_part) && digits(f) && !(int_part.is_empty() && f.is_empty()),
        None => !int_part.is_empty() && digits(int_part),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    (mantissa_ok && exponent_ok)
        .then(|| text.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Node {
        parse(text).expect("parses").expect("not empty")
    }

    #[test]
    fn scalars_keep_their_yaml_types() {
        let node = load("a: 42\nb: '42'\nc: true\nd: ~\ne: 1.5\nf: 0x1f\ng: 1_000\nh: !!str 7\n");
        let json = node.to_json();
        assert_eq!(json["a"], serde_json::json!(42));
        assert_eq!(json["b"], serde_json::json!("42"));
        assert_eq!(json["c"], serde_json::json!(true));
        assert_eq!(json["d"], serde_json::Value::Null);
        assert_eq!(json["e"], serde_json::json!(1.5));
        assert_eq!(json["f"], serde_json::json!(31));
        assert_eq!(json["g"], serde_json::json!("1_000"));
        assert_eq!(json["h"], serde_json::json!("7"));
    }

    #[test]
    fn every_node_has_a_span() {
        let node = load("bindings:\n  - agentId: main\n    match: {channel: cli}\n");
        let m = node.pointer("/bindings/0/match/channel").unwrap();
        assert_eq!(
            m.span.start,
            Pos {
                line: 3,
                column: 22
            }
        );
        let entry = node.pointer("/bindings/0").unwrap().entry("match").unwrap();
        assert_eq!(entry.key_span.start, Pos { line: 3, column: 5 });
    }

    #[test]
    fn duplicate_keys_are_rejected_at_the_second_key() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(e.kind, YamlErrorKind::DuplicateKey);
        assert_eq!(e.span.start, Pos { line: 3, column: 1 });
        assert_eq!(e.related.unwrap().start, Pos { line: 1, column: 1 });
    }

    #[test]
    fn alias_bombs_are_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                [prev.as_str(); 10].join(", ")
            ));
        }
        assert_eq!(parse(&text).unwrap_err().kind, YamlErrorKind::AliasLimit);
    }

    #[test]
    fn small_aliases_expand() {
        let node = load("x: &d {a: 1}\ny: *d\n");
        assert_eq!(node.to_json()["y"]["a"], serde_json::json!(1));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = "[".repeat(100_000);
        let e = parse(&text).unwrap_err();
        assert_eq!(e.kind, YamlErrorKind::TooDeep, "{e:?}");
    }

    #[test]
    fn empty_and_comment_only_files_are_empty() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# nothing\n").unwrap(), None);
    }

    #[test]
    fn tabs_in_indentation_are_named() {
        let e = parse("a:\n\tb: 1\n").unwrap_err();
        assert_eq!(e.kind, YamlErrorKind::Tab);
        assert_eq!(e.span.start, Pos { line: 2, column: 1 });
        let e = parse("bindings:\n  - agentId: main\n\tmatch: {channel: cli}\n").unwrap_err();
        assert_eq!(
            (e.kind, e.span.start),
            (YamlErrorKind::Tab, Pos { line: 3, column: 1 })
        );
    }

    #[test]
    fn second_document_is_an_error() {
        let e = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(e.kind, YamlErrorKind::MultipleDocuments);
    }

    #[test]
    fn a_long_list_converts_in_order() {
        let n = PARALLEL_ITEMS + 7;
        let text: String = (0..n).map(|i| format!("- {{a: {i}}}\n")).collect();
        let expected: Vec<serde_json::Value> =
            (0..n).map(|i| serde_json::json!({ "a": i })).collect();
        assert_eq!(load(&text).to_json(), serde_json::Value::Array(expected));
    }

    #[test]
    fn pointers_unescape() {
        let node = load("\"a/b\": {\"c~d\": 1}\n");
        assert!(node.pointer("/a~1b/c~0d").is_some());
    }
}
