//! Parsing a large file on several threads when its bulk is one block sequence (the list of
//! bindings.yaml, the agents of agents.yaml).
//!
//! The sequence's items are cut, at whole lines, into pieces. Each piece after the first is
//! parsed on a thread of its own as a document of its own (a sequence at the same column);
//! the file without those pieces (the head) is parsed on the calling thread. The pieces' items
//! are then appended to the head's sequence, and lines renumbered to where they are in the
//! file (columns are unchanged: only whole lines move), which is the tree that parsing the
//! whole file gives, spans included. Only one thing differs: a node that ends where the next
//! token begins (a block mapping, a block scalar, an empty value) ends, in a piece, at the
//! piece's end instead, and in the head at the first token after the sequence. Those
//! positions, in the last item of each piece, are put where the next piece's first item
//! begins.
//!
//! A piece ends where the next begins or where the sequence does, at the first line after it
//! that is neither blank nor a comment: blank lines belong to the piece before, as they do to
//! a block scalar with `|+` in the whole file.
//!
//! A line at the items' column that starts with `- ` is an item of the sequence in block
//! context; where it is not (inside a quoted or flow scalar that runs over lines), the piece
//! before it does not parse, or a piece holds another number of items than it was cut with.
//! Either way, and for anything else this cannot vouch for (tabs and carriage returns, whose
//! errors and line breaks are the whole parse's; directives, which a piece would not see; an
//! alias whose anchor is in another piece; the depth and alias limits), `parse` says `None`
//! and the caller parses the file whole.

use super::{
    MAX_ALIAS_NODES, MAX_DEPTH, Node, Parsed, Pos, Span, Streamed, Value, run, run_streaming,
};

/// Files below this size are parsed whole: a thread would cost about what it saves.
pub(super) const MIN_BYTES: usize = 256 * 1024;

/// Most pieces one file is cut into.
const MAX_PIECES: usize = 4;

/// The file's tree, if it is large and has a sequence to cut.
pub(super) fn parse(text: &str) -> Option<Node> {
    if text.len() < MIN_BYTES {
        return None;
    }
    let pieces = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_PIECES);
    parse_in(text, pieces)
}

/// [`parse`] in `pieces` pieces, whatever the size of the file.
fn parse_in(text: &str, pieces: usize) -> Option<Node> {
    let cut = Cut::find(text, pieces)?;
    let head = cut.head(text);
    let (head, pieces) = std::thread::scope(|scope| {
        // Each piece's lines are put where they are in the file on its own thread.
        let pieces: Vec<_> = cut
            .pieces(text)
            .zip(&cut.pieces)
            .map(|(piece, &(_, line, _))| {
                scope.spawn(move || {
                    let mut parsed = run(piece).ok()?;
                    if let Some(root) = &mut parsed.root {
                        shift(root, line - 1);
                    }
                    Some(parsed)
                })
            })
            .collect();
        let head = run(&head).ok();
        let pieces: Option<Vec<Parsed>> = pieces
            .into_iter()
            .map(|p| p.join().ok().flatten())
            .collect();
        (head, pieces)
    });
    cut.assemble(head?, pieces?, cut.removed_lines(text))
}

/// [`super::parse_streamed`]: cut as [`parse`] cuts, each part parsed with its items handed on.
pub(super) fn streamed<T: Send>(
    text: &str,
    each: &(dyn Fn(usize, Node) -> T + Sync),
) -> Option<Streamed<T>> {
    if text.len() < MIN_BYTES {
        return None;
    }
    // At least two pieces, even on one core: what streaming is for is the memory.
    let pieces = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(2, MAX_PIECES);
    streamed_in(text, pieces, each)
}

/// [`streamed`] in `pieces` pieces, whatever the size of the file.
fn streamed_in<T: Send>(
    text: &str,
    pieces: usize,
    each: &(dyn Fn(usize, Node) -> T + Sync),
) -> Option<Streamed<T>> {
    // Without a line break at the end, positions at the end are put inside the text
    // (`super::inside`), in the last item too: which is gone by then.
    if !text.ends_with('\n') {
        return None;
    }
    let cut = Cut::find(text, pieces)?;
    let head = cut.head(text);
    let total = cut.first_items + cut.pieces.iter().map(|p| p.2).sum::<usize>();
    let (head, pieces) = std::thread::scope(|scope| {
        let mut first = cut.first_items;
        let pieces: Vec<_> = cut
            .pieces(text)
            .zip(&cut.pieces)
            .map(|(piece, &(_, line, count))| {
                let start = first;
                first += count;
                scope.spawn(move || Part::parse(piece, 1, line - 1, start, count, each))
            })
            .collect();
        // The head's list is the one the whole list is gathered in: sized for all of it.
        let head = Part::parse(&head, cut.first.1, 0, 0, total, each);
        let pieces: Option<Vec<Part<T>>> = pieces
            .into_iter()
            .map(|p| p.join().ok().flatten())
            .collect();
        (head, pieces)
    });
    cut.assemble_streamed(head?, pieces?, cut.removed_lines(text), each)
}

/// One part of a streamed parse: the head or a later piece.
struct Part<T> {
    parsed: Parsed,
    /// Where the streamed sequence starts and how many items it had.
    sequence: (Pos, usize),
    /// What `each` made of the items but the last, and their spans.
    items: Vec<T>,
    spans: Vec<Span>,
    /// The last item, whose end is only known once the next part is.
    last: Node,
}

impl<T> Part<T> {
    /// Parses `text`, streaming the sequence that starts on `line`, its items moved down by
    /// `shift_by` lines and numbered from `first`.
    fn parse(
        text: &str,
        line: u32,
        shift_by: u32,
        first: usize,
        capacity: usize,
        each: &(dyn Fn(usize, Node) -> T + Sync),
    ) -> Option<Part<T>> {
        let mut items = Vec::with_capacity(capacity);
        let mut spans = Vec::with_capacity(capacity);
        let mut last: Option<Node> = None;
        let mut sink = |mut node: Node| {
            if shift_by > 0 {
                shift(&mut node, shift_by);
            }
            if let Some(item) = last.replace(node) {
                spans.push(item.span);
                items.push(each(first + items.len(), item));
            }
        };
        let (mut parsed, sequence) = run_streaming(text, line, &mut sink).ok()?;
        if let Some(root) = &mut parsed.root {
            shift(root, shift_by);
        }
        let (start, count) = sequence?;
        let start = Pos {
            line: start.line + shift_by,
            ..start
        };
        Some(Part {
            parsed,
            sequence: (start, count),
            items,
            spans,
            last: last?,
        })
    }
}

/// Where a file's longest block sequence is cut.
#[derive(Debug)]
struct Cut {
    /// The column of the items' `-` (0-based).
    indent: usize,
    /// The first item: its line's byte offset and its line number.
    first: (usize, u32),
    /// Items of the first piece.
    first_items: usize,
    /// Each later piece: its first line's byte offset and number, and its items.
    pieces: Vec<(usize, u32, usize)>,
    /// Where the sequence's lines end (a byte offset).
    end: usize,
}

/// A block sequence of a file, as its lines show it.
struct Sequence {
    indent: usize,
    /// Each item's line: byte offset and line number.
    items: Vec<(usize, u32)>,
    end: usize,
}

impl Sequence {
    fn bytes(&self) -> usize {
        self.end - self.items[0].0
    }
}

impl Cut {
    fn find(text: &str, pieces: usize) -> Option<Cut> {
        let bytes = text.as_bytes();
        if pieces < 2 || memchr::memchr2(b'\t', b'\r', bytes).is_some() {
            return None;
        }
        let mut longest: Option<Sequence> = None;
        let mut open: Option<Sequence> = None;
        // The indentation of a `key:` line whose value starts on a later line.
        let mut key: Option<usize> = None;
        // Lines, as bytes: every byte looked at is ASCII.
        let mut next = 0;
        let mut number = 0u32;
        while next < bytes.len() {
            let start = next;
            next = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |at| start + at + 1);
            number += 1;
            let content = bytes[start..next]
                .strip_suffix(b"\n")
                .unwrap_or(&bytes[start..next]);
            let indent = content.iter().take_while(|&&b| b == b' ').count();
            let trimmed = &content[indent..];
            if trimmed.is_empty() || trimmed[0] == b'#' {
                continue;
            }
            if indent == 0 && trimmed[0] == b'%' {
                return None;
            }
            let item = trimmed == b"-" || trimmed.starts_with(b"- ");
            if let Some(seq) = &mut open {
                if indent > seq.indent {
                    continue;
                }
                if indent == seq.indent && item {
                    seq.items.push((start, number));
                    continue;
                }
                seq.end = start;
                let seq = open.take()?;
                if longest.as_ref().is_none_or(|l| l.bytes() < seq.bytes()) {
                    longest = Some(seq);
                }
            }
            if item && key.take().is_some_and(|k| indent >= k) {
                open = Some(Sequence {
                    indent,
                    items: vec![(start, number)],
                    end: text.len(),
                });
                continue;
            }
            key = (!item && trimmed.ends_with(b":")).then_some(indent);
        }
        if let Some(seq) = open
            && longest.as_ref().is_none_or(|l| l.bytes() < seq.bytes())
        {
            longest = Some(seq);
        }
        let seq = longest?;
        // Cut at the items nearest to equal shares of the bytes; never before the first (that
        // is no cut), so a long item and a short one are still two pieces.
        let first = seq.items[0];
        let mut cuts: Vec<usize> = (1..pieces)
            .map(|i| {
                let target = first.0 + seq.bytes() * i / pieces;
                let after = seq.items.partition_point(|&(at, _)| at < target);
                let before = after.saturating_sub(1);
                match seq.items.get(after) {
                    Some(&(at, _)) if before == 0 || at - target < target - seq.items[before].0 => {
                        after
                    }
                    _ => before,
                }
            })
            .filter(|&i| i > 0 && i < seq.items.len())
            .collect();
        cuts.dedup();
        let first_items = *cuts.first()?;
        let ends = cuts.iter().skip(1).copied().chain([seq.items.len()]);
        let pieces = cuts
            .iter()
            .zip(ends)
            .map(|(&from, to)| (seq.items[from].0, seq.items[from].1, to - from))
            .collect();
        Some(Cut {
            indent: seq.indent,
            first,
            first_items,
            pieces,
            end: seq.end,
        })
    }

    /// The file without the later pieces.
    fn head(&self, text: &str) -> String {
        [&text[..self.pieces[0].0], &text[self.end..]].concat()
    }

    /// How many lines the head lacks.
    fn removed_lines(&self, text: &str) -> u32 {
        let removed = &text.as_bytes()[self.pieces[0].0..self.end];
        let unended = !removed.is_empty() && !removed.ends_with(b"\n");
        let lines = memchr::memchr_iter(b'\n', removed).count() + usize::from(unended);
        u32::try_from(lines).unwrap_or(u32::MAX)
    }

    /// The text of each later piece.
    fn pieces<'t>(&self, text: &'t str) -> impl Iterator<Item = &'t str> {
        let ends = self.pieces.iter().skip(1).map(|p| p.0).chain([self.end]);
        self.pieces
            .iter()
            .zip(ends)
            .map(move |(&(start, _, _), end)| &text[start..end])
    }

    /// Where an item that starts on `line` has its `-`.
    fn dash(&self, line: u32) -> Pos {
        Pos {
            line,
            column: u32::try_from(self.indent + 1).unwrap_or(u32::MAX),
        }
    }

    fn assemble(&self, head: Parsed, pieces: Vec<Parsed>, removed: u32) -> Option<Node> {
        let mut root = head.root?;
        // What follows the sequence in the head follows the later pieces in the file.
        let gap = self.pieces[0].1;
        each_pos(&mut root, &mut |pos| {
            if pos.line >= gap {
                pos.line += removed;
            }
        });
        let (seq, depth) = find_sequence(&mut root, self.first.1, 1, &mut String::new())?;
        // Where the sequence ends: at the first token after it.
        let after = seq.span.end;
        let Value::Seq(items) = &mut seq.value else {
            return None;
        };
        if items.len() != self.first_items {
            return None;
        }
        let mut alias_nodes = head.alias_nodes;
        let mut ends_at = after;
        for (k, (piece, &(_, line, count))) in pieces.into_iter().zip(&self.pieces).enumerate() {
            // The last item before this piece ended at `ends_at`; it ends where this begins.
            let dash = self.dash(line);
            if let Some(last) = items.last_mut() {
                replace(last, ends_at, dash);
            }
            alias_nodes += piece.alias_nodes;
            if depth + piece.depth > MAX_DEPTH + 1 {
                return None;
            }
            let piece_root = piece.root?;
            if piece_root.span.start.line != line {
                return None;
            }
            let Value::Seq(piece_items) = piece_root.value else {
                return None;
            };
            if piece_items.len() != count {
                return None;
            }
            items.extend(piece_items);
            ends_at = piece_root.span.end;
            if k + 1 == self.pieces.len()
                && let Some(last) = items.last_mut()
            {
                replace(last, ends_at, after);
            }
        }
        (alias_nodes <= MAX_ALIAS_NODES).then_some(root)
    }
}

impl Cut {
    /// [`Cut::assemble`] for a streamed parse: the same checks, and the same ends put on the
    /// last item of each part, which is handed on here.
    fn assemble_streamed<T>(
        &self,
        head: Part<T>,
        pieces: Vec<Part<T>>,
        removed: u32,
        each: &(dyn Fn(usize, Node) -> T + Sync),
    ) -> Option<Streamed<T>> {
        let mut root = head.parsed.root?;
        let gap = self.pieces[0].1;
        let mut move_gap = |pos: &mut Pos| {
            if pos.line >= gap {
                pos.line += removed;
            }
        };
        each_pos(&mut root, &mut move_gap);
        let mut list = String::new();
        let (seq, depth) = find_sequence(&mut root, self.first.1, 1, &mut list)?;
        let after = seq.span.end;
        let empty = matches!(&seq.value, Value::Seq(items) if items.is_empty());
        if !empty || head.sequence != (seq.span.start, self.first_items) {
            return None;
        }
        let Part {
            mut items,
            mut spans,
            mut last,
            ..
        } = head;
        each_pos(&mut last, &mut move_gap);
        let mut alias_nodes = head.parsed.alias_nodes;
        let mut ends_at = after;
        for (piece, &(_, line, count)) in pieces.into_iter().zip(&self.pieces) {
            replace(&mut last, ends_at, self.dash(line));
            spans.push(last.span);
            items.push(each(items.len(), last));
            alias_nodes += piece.parsed.alias_nodes;
            if depth + piece.parsed.depth > MAX_DEPTH + 1 {
                return None;
            }
            let piece_root = piece.parsed.root?;
            let empty = matches!(&piece_root.value, Value::Seq(items) if items.is_empty());
            if !empty || piece.sequence != (piece_root.span.start, count) {
                return None;
            }
            if piece_root.span.start.line != line {
                return None;
            }
            items.extend(piece.items);
            spans.extend(piece.spans);
            last = piece.last;
            ends_at = piece_root.span.end;
        }
        replace(&mut last, ends_at, after);
        spans.push(last.span);
        items.push(each(items.len(), last));
        (alias_nodes <= MAX_ALIAS_NODES).then_some(Streamed {
            root,
            list,
            items,
            spans,
        })
    }
}

/// One item parsed from its own lines ([`super::parse_item`]): as a piece of the cut is, a
/// sequence at its column, renumbered to the file's lines. A node that ends where the next
/// token begins ends, in these lines, at their end: it is put where the whole tree ends the
/// item, and the item must then span exactly what it spans there.
pub(super) fn item(lines: &str, first_line: u32, span: super::Span) -> Option<Node> {
    let mut root = run(lines).ok()?.root?;
    shift(&mut root, first_line.checked_sub(1)?);
    let ends_at = root.span.end;
    let Value::Seq(items) = root.value else {
        return None;
    };
    let [mut item] = <[Node; 1]>::try_from(items).ok()?;
    replace(&mut item, ends_at, span.end);
    (item.span == span).then_some(item)
}

/// The outermost sequence that starts on `line` (where its first `-` is; an indentless one
/// starts after it), and its depth, found by following the nodes whose lines hold it.
/// `pointer` is extended to its pointer.
fn find_sequence<'n>(
    node: &'n mut Node,
    line: u32,
    depth: usize,
    pointer: &mut String,
) -> Option<(&'n mut Node, usize)> {
    if node.span.start.line == line && matches!(node.value, Value::Seq(_)) {
        return Some((node, depth));
    }
    let holds = |n: &Node| n.span.start.line <= line && line < n.span.end.line;
    pointer.push('/');
    let child = match &mut node.value {
        Value::Seq(items) => {
            let (i, item) = items.iter_mut().enumerate().find(|(_, n)| holds(n))?;
            pointer.push_str(&i.to_string());
            item
        }
        Value::Map(entries) => {
            let entry = entries.iter_mut().find(|e| holds(&e.value))?;
            pointer.push_str(&super::escape_pointer_token(&entry.key));
            &mut entry.value
        }
        _ => return None,
    };
    find_sequence(child, line, depth + 1, pointer)
}

/// Moves every position of `node` down by `lines`.
fn shift(node: &mut Node, lines: u32) {
    each_pos(node, &mut |pos| pos.line += lines);
}

/// Puts every position of `node` that is `from` at `to`.
fn replace(node: &mut Node, from: Pos, to: Pos) {
    each_pos(node, &mut |pos| {
        if *pos == from {
            *pos = to;
        }
    });
}

fn each_pos(node: &mut Node, f: &mut impl FnMut(&mut Pos)) {
    f(&mut node.span.start);
    f(&mut node.span.end);
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(|n| each_pos(n, f)),
        Value::Map(entries) => {
            for e in entries {
                f(&mut e.key_span.start);
                f(&mut e.key_span.end);
                each_pos(&mut e.value, f);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Items of every shape whose end the cut has to get right: nested block mappings, empty
    /// values, block scalars with each chomping, flow and quoted scalars over several lines,
    /// anchors and aliases, comments and blank lines, non-ASCII text.
    fn item(shape: u8, n: usize) -> String {
        match shape % 18 {
            0 => format!("- agentId: a{n}\n  match: {{channel: telegram, accountId: acct-{n}}}\n"),
            1 => format!(
                "- agentId: a{n}\n  match:\n    channel: slack\n    peer:\n      kind: direct\n      id: \"u{n}\"\n"
            ),
            2 => format!("- agentId: a{n}\n  comment:\n"),
            3 => format!("- agentId: a{n}\n  comment: |\n    line one\n    line two\n\n"),
            4 => format!("- agentId: a{n}\n  comment: |+\n    kept\n\n\n"),
            5 => format!("- agentId: a{n}\n  comment: >-\n    folded\n    text\n"),
            6 => "-\n".to_string(),
            7 => format!("- plain {n}\n"),
            8 => format!("- \"quoted\n  over lines {n}\"\n"),
            9 => format!("- [a{n}, b, {{c: d}}]\n"),
            10 => format!("- {{x: {n},\n   y: 2}}\n"),
            11 => "# a comment\n\n".to_string(),
            12 => format!("- &anchor{n} {{z: {n}}}\n"),
            13 => format!("- *anchor{}\n", n.saturating_sub(3)),
            14 => format!("- - nested {n}\n  - seq\n"),
            15 => format!("- key: value {n} # trailing\n"),
            16 => format!("- agentId: \"é{n}\"\n  name: 日本語\n"),
            _ => format!("- a: {n}\n  b:\n    - c\n    - d\n"),
        }
    }

    pub(super) fn document(shapes: &[u8], indent: usize, tail: u8, newline_at_end: bool) -> String {
        let pad = " ".repeat(indent);
        let mut text = String::from("# bindings\nversion: 1\nbindings:\n");
        for (n, &shape) in shapes.iter().enumerate() {
            for line in item(shape, n).split_inclusive('\n') {
                if line == "\n" {
                    text.push('\n');
                } else {
                    text.push_str(&pad);
                    text.push_str(line);
                }
            }
        }
        match tail % 4 {
            0 => {}
            1 => text.push_str("other: x\n"),
            2 => text.push_str("# trailing comment\n"),
            _ => text.push_str("after:\n  - one\n"),
        }
        if !newline_at_end {
            while text.ends_with('\n') {
                text.pop();
            }
        }
        text
    }

    /// A sequence of a long item and a short last one is cut too, however the bytes fall: the
    /// middle can be as near the first item as the second (a case proptest found).
    #[test]
    fn a_long_item_and_a_short_one_are_two_pieces() {
        for shapes in [[5u8, 6], [0, 6], [7, 6]] {
            for newline_at_end in [false, true] {
                let text = document(&shapes, 0, 0, newline_at_end);
                assert!(parse_in(&text, 2).is_some(), "not cut: {text}");
                assert_eq!(parse_in(&text, 2), run(&text).ok().and_then(|p| p.root));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Cut or whole, the same tree and spans; and the cut is taken where it can be.
        /// Streamed, the items handed on in order with their indices, and put back where the
        /// list was, the whole parse too; and streamed wherever it is cut, but for a text
        /// without a line break at its end.
        #[test]
        fn the_cut_and_the_streamed_parse_are_the_whole_parse(
            shapes in prop::collection::vec(0u8..18, 2..40),
            indent in prop::sample::select(vec![0usize, 2, 4]),
            tail in 0u8..4,
            newline_at_end in any::<bool>(),
            pieces in 2usize..=4,
            nested in any::<bool>(),
        ) {
            let text = nest(document(&shapes, indent, tail, newline_at_end), nested);
            let whole = run(&text).ok().and_then(|p| p.root);
            let cut = parse_in(&text, pieces);
            // Only an alias into another piece stops the cut of one sequence of two items,
            // or a sequence that starts with an empty item (its span is not where the lines
            // say: it is parsed whole).
            let items: Vec<u8> = shapes.iter().copied().filter(|&s| s != 11).collect();
            let empty_first = items.first() == Some(&6);
            if items.len() >= 2 && tail != 3 && !shapes.contains(&13) && !empty_first {
                prop_assert!(cut.is_some(), "not cut: {}", text);
            }
            let streamed = streamed_in(&text, pieces, &|i, node| (i, node));
            prop_assert_eq!(streamed.is_some(), newline_at_end && cut.is_some(), "{}", text);
            if let Some(cut) = cut {
                prop_assert_eq!(Some(cut), whole.clone(), "{}", text);
            }
            if let Some(streamed) = streamed {
                let spans: Vec<Span> = streamed.items.iter().map(|(_, n)| n.span).collect();
                prop_assert_eq!(&spans, &streamed.spans);
                for (at, (i, _)) in streamed.items.iter().enumerate() {
                    prop_assert_eq!(at, *i);
                }
                let items = streamed.items.into_iter().map(|(_, n)| n).collect();
                let mut root = streamed.root;
                put_back(&mut root, &streamed.list, items);
                prop_assert_eq!(Some(root), whole, "{}", text);
            }
        }
    }

    /// `text` one level down, under `root:`, when `nested`: what follows the list then starts
    /// past column 1, where the list's last item ends.
    fn nest(text: String, nested: bool) -> String {
        if !nested {
            return text;
        }
        let mut out = String::from("root:\n");
        for line in text.split_inclusive('\n') {
            if line != "\n" {
                out.push_str("  ");
            }
            out.push_str(line);
        }
        out
    }

    /// Puts `items` in the (empty) sequence at `pointer`.
    fn put_back(root: &mut Node, pointer: &str, items: Vec<Node>) {
        let mut node = root;
        for token in super::super::pointer_tokens(pointer) {
            node = match &mut node.value {
                Value::Map(entries) => {
                    &mut entries
                        .iter_mut()
                        .find(|e| e.key == *token)
                        .expect("key")
                        .value
                }
                Value::Seq(items) => &mut items[token.parse::<usize>().expect("index")],
                _ => panic!("no node at {pointer}"),
            };
        }
        assert_eq!(node.value, Value::Seq(Vec::new()));
        node.value = Value::Seq(items);
    }

    #[test]
    fn a_bindings_file_is_cut() {
        let shapes: Vec<u8> = (0..200).map(|i| [0, 1, 2, 3, 5, 15, 16][i % 7]).collect();
        for indent in [0, 2] {
            let text = document(&shapes, indent, 1, true);
            let cut = parse_in(&text, 3).expect("cut");
            assert_eq!(Some(cut), run(&text).unwrap().root);
        }
    }

    #[test]
    fn what_cannot_be_vouched_for_is_not_cut() {
        let shapes: Vec<u8> = (0..50).map(|i| (i % 2) as u8).collect();
        let plain = document(&shapes, 2, 0, true);
        assert!(parse_in(&plain, 2).is_some());
        // An alias to an anchor in another piece.
        let mut aliased = document(&[12], 2, 0, true);
        aliased.push_str(&plain["# bindings\nversion: 1\nbindings:\n".len()..]);
        aliased.push_str("  - *anchor0\n");
        assert!(parse_in(&aliased, 2).is_none());
        // A quoted scalar whose later line looks like an item.
        let quoted = plain.replacen("  - agentId: a30\n", "  - agentId: \"a30\n  - b\"\n", 1);
        assert!(parse_in(&quoted, 2).is_none());
        assert!(parse_in(&format!("%YAML 1.2\n---\n{plain}"), 2).is_none());
        assert!(parse_in(&plain.replace("a4\n", "a4\r\n"), 2).is_none());
        let stream = |text: &str| streamed_in(text, 2, &|_, node| node).is_some();
        assert!(stream(&plain));
        for text in [aliased, quoted, plain.replace("a4\n", "a4\r\n")] {
            assert!(!stream(&text));
        }
        assert!(!stream(plain.trim_end()));
        // An anchor on the list itself, and an alias to it after the list, where the head's list
        // would be only a part of it: such a list starts at its anchor, not at its first item,
        // so it is neither cut nor streamed.
        let anchored = plain.replacen("bindings:\n", "bindings: &all:\n", 1) + "copy: *all:\n";
        assert!(run(&anchored).is_ok(), "{anchored}");
        assert!(parse_in(&anchored, 2).is_none());
        assert!(!stream(&anchored));
    }
}
