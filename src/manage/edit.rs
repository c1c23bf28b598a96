//! Lossless edits of YAML text: splicing on the spans of the loader's own tree.
//!
//! Every operation parses the current text with [`crate::config::yaml::parse`] (the parser the
//! validator uses, so both agree on where a node is), finds the node by path, and replaces only
//! the bytes of that node — or inserts or removes whole lines for block-style entries and items.
//! Everything else (comments, key order, quoting, blank lines, the `$schema` modeline) is left
//! byte for byte. New nodes copy the indentation of their siblings.
//!
//! Block collections' end positions are not reliable in YAML event streams (a mapping "ends" at
//! the next token, past trailing comments), so the end of a block entry or item is found from
//! indentation: the lines after its first line that are indented deeper (or are blank or
//! comments) belong to it, up to the last such content line.
//!
//! It must not know the config's shape: callers name paths.

use crate::config::yaml::{self, Node, Pos, Value};

/// One step of a path into the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// Builds a path from keys and indices: `path!["agents", "list", 0]` is not available in
/// stable macros without effort, so a small helper does it.
pub fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

pub fn index(i: usize) -> Step {
    Step::Index(i)
}

/// A value to write. Strings are quoted only when YAML would read them as something else.
#[derive(Debug, Clone, PartialEq)]
pub enum Yaml {
    Str(String),
    Bool(bool),
    Int(i64),
    /// A block mapping (or `{}` when empty).
    Map(Vec<(String, Yaml)>),
    /// A flow mapping on one line: `{channel: telegram, accountId: work}`.
    FlowMap(Vec<(String, Yaml)>),
    /// A sequence, written in flow style on one line: `[a, b]`.
    Seq(Vec<Yaml>),
}

impl Yaml {
    pub fn str(s: impl Into<String>) -> Yaml {
        Yaml::Str(s.into())
    }

    fn is_block(&self) -> bool {
        matches!(self, Yaml::Map(entries) if !entries.is_empty())
    }
}

/// Why an edit could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("the file does not parse as YAML: {0}")]
    Parse(String),
    #[error("`{0}` is not in the file")]
    Missing(String),
    #[error("cannot edit `{path}`: {reason}")]
    Unsupported { path: String, reason: String },
}

/// The text of one YAML file being edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    pub text: String,
}

fn describe(path: &[Step]) -> String {
    if path.is_empty() {
        return "(the document)".to_string();
    }
    path.iter()
        .map(|s| match s {
            Step::Key(k) => k.clone(),
            Step::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn child<'n>(node: &'n Node, step: &Step) -> Option<&'n Node> {
    match (step, &node.value) {
        (Step::Key(k), Value::Map(entries)) => {
            entries.iter().find(|e| e.key == *k).map(|e| &e.value)
        }
        (Step::Index(i), Value::Seq(items)) => items.get(*i),
        _ => None,
    }
}

fn lookup<'n>(root: &'n Node, path: &[Step]) -> Option<&'n Node> {
    path.iter().try_fold(root, |node, step| child(node, step))
}

impl Doc {
    pub fn new(text: impl Into<String>) -> Doc {
        Doc { text: text.into() }
    }

    fn parse(&self) -> Result<Option<Node>, EditError> {
        yaml::parse(&self.text).map_err(|e| {
            EditError::Parse(format!(
                "{} at line {}, column {}",
                e.message, e.span.start.line, e.span.start.column
            ))
        })
    }

    /// The node at `path` (for reading values before editing them).
    pub fn get(&self, path: &[Step]) -> Result<Option<Node>, EditError> {
        Ok(self
            .parse()?
            .as_ref()
            .and_then(|root| lookup(root, path))
            .cloned())
    }

    // ---- positions -------------------------------------------------------------------------

    fn line_starts(&self) -> Vec<usize> {
        std::iter::once(0)
            .chain(self.text.match_indices('\n').map(|(i, _)| i + 1))
            .collect()
    }

    /// Byte offset of a 1-based line/column (columns count characters).
    fn offset(&self, pos: Pos) -> usize {
        let starts = self.line_starts();
        let line = (pos.line as usize).saturating_sub(1);
        let Some(&start) = starts.get(line) else {
            return self.text.len();
        };
        let rest = &self.text[start..];
        let col = (pos.column as usize).saturating_sub(1);
        rest.char_indices()
            .nth(col)
            .map_or(self.text.len(), |(i, _)| start + i)
    }

    /// 0-based line index of a byte offset.
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
    }

    fn line_text(&self, line: usize) -> &str {
        self.text.split('\n').nth(line).unwrap_or("")
    }

    fn line_count(&self) -> usize {
        self.text.split('\n').count()
    }

    /// Byte offset where line `line` starts (the text's length past the end).
    fn line_start(&self, line: usize) -> usize {
        self.line_starts()
            .get(line)
            .copied()
            .unwrap_or(self.text.len())
    }

    fn indent_of(line: &str) -> usize {
        line.len() - line.trim_start_matches(' ').len()
    }

    fn is_content(line: &str) -> bool {
        let t = line.trim();
        !t.is_empty() && !t.starts_with('#')
    }

    /// The line after the last line of a block node that starts on `first` at `indent`.
    /// `dash_continues`: lines starting with `- ` at `indent` still belong (a mapping entry
    /// whose value is a sequence written at the key's own indentation).
    fn block_end(&self, first: usize, indent: usize, dash_continues: bool) -> usize {
        let mut last = first;
        for l in first + 1..self.line_count() {
            let text = self.line_text(l);
            if !Self::is_content(text) {
                continue;
            }
            let ind = Self::indent_of(text);
            let rest = &text[ind..];
            if ind > indent
                || (dash_continues && ind == indent && (rest == "-" || rest.starts_with("- ")))
            {
                last = l;
                continue;
            }
            break;
        }
        last + 1
    }

    /// Extends a line range upward over comment lines at the same indentation directly above it
    /// (the comment that describes an entry goes with it).
    fn with_leading_comments(&self, first: usize, indent: usize) -> usize {
        let mut start = first;
        while start > 0 {
            let above = self.line_text(start - 1);
            if above.trim_start().starts_with('#') && Self::indent_of(above) == indent {
                start -= 1;
            } else {
                break;
            }
        }
        start
    }

    fn is_flow(&self, node: &Node) -> bool {
        let at = self.offset(node.span.start);
        matches!(self.text[at..].chars().next(), Some('{' | '['))
    }

    /// The byte offset of the `}`/`]` closing a flow collection.
    fn flow_close(&self, node: &Node) -> Option<usize> {
        let close = match node.value {
            Value::Map(_) => '}',
            _ => ']',
        };
        let from = match &node.value {
            Value::Map(entries) => entries.last().map(|e| self.value_end(&e.value)),
            Value::Seq(items) => items.last().map(|i| self.value_end(i)),
            _ => None,
        }
        .unwrap_or(self.offset(node.span.start) + 1);
        let mut in_comment = false;
        for (i, c) in self.text[from..].char_indices() {
            match c {
                '\n' => in_comment = false,
                '#' => in_comment = true,
                c if c == close && !in_comment => return Some(from + i),
                _ => {}
            }
        }
        None
    }

    /// End offset of a scalar or flow node.
    fn value_end(&self, node: &Node) -> usize {
        if matches!(node.value, Value::Map(_) | Value::Seq(_)) && self.is_flow(node) {
            return self.flow_close(node).map_or(self.text.len(), |c| c + 1);
        }
        self.offset(node.span.end)
    }

    /// Where a block sequence item starts: its `-`.
    fn dash_of(&self, item: &Node) -> Option<usize> {
        let at = self.offset(item.span.start);
        let before = &self.text[..at];
        let trimmed = before.trim_end_matches([' ', '\n', '\r']);
        trimmed.ends_with('-').then(|| trimmed.len() - 1)
    }

    fn column_of(&self, offset: usize) -> usize {
        let start = self.text[..offset].rfind('\n').map_or(0, |i| i + 1);
        self.text[start..offset].chars().count()
    }

    // ---- rendering ---------------------------------------------------------------------------

    fn splice(&mut self, from: usize, to: usize, with: &str) {
        self.text.replace_range(from..to, with);
    }

    /// Inserts whole lines before line `line` (at the end when past it).
    fn insert_lines(&mut self, line: usize, lines: &str) {
        if line >= self.line_count()
            || (line + 1 == self.line_count()
                && self.line_text(line).is_empty()
                && self.text.ends_with('\n'))
        {
            if !self.text.is_empty() && !self.text.ends_with('\n') {
                self.text.push('\n');
            }
            self.text.push_str(lines);
            return;
        }
        let at = self.line_start(line);
        self.text.insert_str(at, lines);
    }

    /// Removes lines `[from, to)`.
    fn remove_lines(&mut self, from: usize, to: usize) {
        let start = self.line_start(from);
        let end = self.line_start(to);
        self.text.replace_range(start..end, "");
    }

    // ---- operations --------------------------------------------------------------------------

    /// Sets the value at `path`, creating missing mappings on the way.
    pub fn set(&mut self, path: &[Step], value: &Yaml) -> Result<(), EditError> {
        let root = self.parse()?;
        let Some(root) = root else {
            return self.set_in_empty(path, value);
        };
        if path.is_empty() {
            return Err(EditError::Unsupported {
                path: describe(path),
                reason: "the whole document cannot be replaced".into(),
            });
        }
        if lookup(&root, path).is_some() {
            return self.replace_value(&root, path, value);
        }
        // Find the deepest existing ancestor; build the rest as nested mappings.
        let mut depth = path.len() - 1;
        while depth > 0 && lookup(&root, &path[..depth]).is_none() {
            depth -= 1;
        }
        let mut nested = value.clone();
        for step in path[depth + 1..].iter().rev() {
            let Step::Key(k) = step else {
                return Err(EditError::Missing(describe(path)));
            };
            nested = Yaml::Map(vec![(k.clone(), nested)]);
        }
        let Step::Key(k) = &path[depth] else {
            return Err(EditError::Missing(describe(path)));
        };
        let parent =
            lookup(&root, &path[..depth]).ok_or_else(|| EditError::Missing(describe(path)))?;
        match &parent.value {
            Value::Map(_) => self.insert_entry(parent, &path[..depth], k, &nested),
            Value::Null if depth > 0 => {
                self.replace_value(&root, &path[..depth], &Yaml::Map(vec![(k.clone(), nested)]))
            }
            _ => Err(EditError::Unsupported {
                path: describe(&path[..depth]),
                reason: format!("it is a {}, not a mapping", parent.type_name()),
            }),
        }
    }

    fn set_in_empty(&mut self, path: &[Step], value: &Yaml) -> Result<(), EditError> {
        let mut nested = value.clone();
        for step in path.iter().rev() {
            let Step::Key(k) = step else {
                return Err(EditError::Missing(describe(path)));
            };
            nested = Yaml::Map(vec![(k.clone(), nested)]);
        }
        let Yaml::Map(entries) = nested else {
            return Err(EditError::Missing(describe(path)));
        };
        let mut out = String::new();
        render_entries(&entries, 0, &mut out);
        self.insert_lines(self.line_count(), &out);
        Ok(())
    }

    /// Appends `item` to the sequence at `path` (created when missing).
    pub fn append(&mut self, path: &[Step], item: &Yaml) -> Result<(), EditError> {
        let root = self.parse()?;
        let seq = root.as_ref().and_then(|r| lookup(r, path));
        let Some(seq) = seq.filter(|s| matches!(s.value, Value::Seq(_))) else {
            // Missing, null or `[]`-less: write a one-item sequence.
            if let Some(node) = seq
                && !matches!(node.value, Value::Null)
            {
                return Err(EditError::Unsupported {
                    path: describe(path),
                    reason: format!("it is a {}, not a sequence", node.type_name()),
                });
            }
            return self.set_block_seq(path, item);
        };
        let Value::Seq(items) = &seq.value else {
            return Ok(());
        };
        if self.is_flow(seq) {
            let close = self
                .flow_close(seq)
                .ok_or_else(|| EditError::Missing(describe(path)))?;
            let text = render_flow(item);
            let insert = if items.is_empty() {
                text
            } else {
                format!(", {text}")
            };
            let at = match items.last() {
                Some(last) => self.value_end(last),
                None => close,
            };
            self.splice(at, at, &insert);
            return Ok(());
        }
        let Some(last) = items.last() else {
            return self.set_block_seq(path, item);
        };
        let dash = self.dash_of(last).ok_or_else(|| EditError::Unsupported {
            path: describe(path),
            reason: "cannot find the `-` of its last item".into(),
        })?;
        let indent = self.column_of(dash);
        let first = self.line_of(dash);
        let end = self.block_end(first, indent, false);
        // Items separated by blank lines get a blank line before the new one too.
        let spaced = items.len() >= 2 && {
            let prev_start = self.with_leading_comments(first, indent);
            prev_start > 0 && self.line_text(prev_start - 1).trim().is_empty()
        };
        let mut out = String::new();
        if spaced {
            out.push('\n');
        }
        render_item(item, indent, &mut out);
        self.insert_lines(end, &out);
        Ok(())
    }

    /// Writes `path: [item]` as a block sequence where there was none (or a null).
    fn set_block_seq(&mut self, path: &[Step], item: &Yaml) -> Result<(), EditError> {
        // A sequence value is written as a flow `[...]` by `set`; for items that are mappings a
        // block sequence reads better, so write the key with an empty flow list first and then
        // turn it into a block list.
        self.set(path, &Yaml::Seq(Vec::new()))?;
        let root = self.parse()?;
        let (parent_path, last) = path.split_at(path.len().saturating_sub(1));
        let Some(Step::Key(k)) = last.first() else {
            return Err(EditError::Missing(describe(path)));
        };
        let parent = root
            .as_ref()
            .and_then(|r| lookup(r, parent_path))
            .ok_or_else(|| EditError::Missing(describe(path)))?;
        let entry = parent
            .entry(k)
            .ok_or_else(|| EditError::Missing(describe(path)))?;
        let key_off = self.offset(entry.key_span.start);
        let indent = self.column_of(key_off);
        // Remove the `[]` and append the block items after the key line.
        let open = self.offset(entry.value.span.start);
        let close = self.value_end(&entry.value);
        let mut from = open;
        while from > 0 && self.text.as_bytes()[from - 1] == b' ' {
            from -= 1;
        }
        self.splice(from, close, "");
        let key_line = self.line_of(key_off);
        let mut out = String::new();
        render_item(item, indent + 2, &mut out);
        self.insert_lines(key_line + 1, &out);
        Ok(())
    }

    /// Replaces the value of an existing node.
    fn replace_value(&mut self, root: &Node, path: &[Step], value: &Yaml) -> Result<(), EditError> {
        let (parent_path, last) = path.split_at(path.len() - 1);
        let parent = lookup(root, parent_path).ok_or_else(|| EditError::Missing(describe(path)))?;
        let node = lookup(root, path).ok_or_else(|| EditError::Missing(describe(path)))?;
        let block_node = match &node.value {
            Value::Map(_) | Value::Seq(_) => !self.is_flow(node),
            Value::String(_) => {
                let at = self.offset(node.span.start);
                matches!(self.text[at..].chars().next(), Some('|' | '>'))
            }
            _ => false,
        };
        let inline = !value.is_block();
        match (&last[0], &parent.value) {
            (Step::Key(k), Value::Map(_)) if !self.is_flow(parent) => {
                let entry = parent
                    .entry(k)
                    .ok_or_else(|| EditError::Missing(describe(path)))?;
                let key_off = self.offset(entry.key_span.start);
                let indent = self.column_of(key_off);
                let key_line = self.line_of(key_off);
                let colon = self
                    .colon_after(self.offset(entry.key_span.end))
                    .ok_or_else(|| EditError::Unsupported {
                        path: describe(path),
                        reason: "cannot find the `:` after its key".into(),
                    })?;
                let seq_value = matches!(node.value, Value::Seq(_));
                let (from, to) = if matches!(node.value, Value::Null) {
                    // `key:` alone, `key: ~` or `key: null`, maybe with a comment.
                    let line_end = self.line_start(key_line + 1).min(self.text.len());
                    let rest = &self.text[colon + 1..line_end];
                    let ws = rest.len() - rest.trim_start_matches(' ').len();
                    let token = ["null", "Null", "NULL", "~"]
                        .iter()
                        .find(|t| rest[ws..].starts_with(*t))
                        .map_or(0, |t| ws + t.len());
                    (colon + 1, colon + 1 + token)
                } else if block_node {
                    let end_line = self.block_end(key_line, indent, seq_value);
                    let end = self.line_start(end_line);
                    let end = if self.text[..end].ends_with('\n') {
                        end - 1
                    } else {
                        end
                    };
                    (colon + 1, end.max(colon + 1))
                } else {
                    (
                        self.offset(node.span.start)
                            - self.spaces_before(self.offset(node.span.start), colon + 1),
                        self.value_end(node),
                    )
                };
                let mut out = String::new();
                if inline {
                    out.push(' ');
                    out.push_str(&render_flow(value));
                    self.splice(from, to, &out);
                } else {
                    let Yaml::Map(entries) = value else {
                        return Ok(());
                    };
                    let mut block = String::new();
                    render_entries(entries, indent + 2, &mut block);
                    if matches!(node.value, Value::Null) {
                        // Keep a trailing comment on the key line; the block goes below it.
                        self.splice(from, to, "");
                        let key_line = self.line_of(key_off);
                        self.insert_lines(key_line + 1, &block);
                    } else {
                        out.push('\n');
                        out.push_str(block.trim_end_matches('\n'));
                        self.splice(from, to, &out);
                    }
                }
                Ok(())
            }
            _ if !block_node => {
                let from = self.offset(node.span.start);
                let to = self.value_end(node);
                let text = render_flow(value);
                self.splice(from, to, &text);
                Ok(())
            }
            _ => Err(EditError::Unsupported {
                path: describe(path),
                reason: "a block value inside a flow collection or sequence".into(),
            }),
        }
    }

    fn spaces_before(&self, at: usize, floor: usize) -> usize {
        let mut n = 0;
        while at - n > floor && self.text.as_bytes()[at - n - 1] == b' ' {
            n += 1;
        }
        n
    }

    /// The `:` after a key (skipping a closing quote and spaces).
    fn colon_after(&self, key_end: usize) -> Option<usize> {
        let rest = &self.text[key_end..];
        let i = rest.find(':')?;
        rest[..i]
            .chars()
            .all(|c| c == ' ' || c == '"' || c == '\'')
            .then_some(key_end + i)
    }

    /// Inserts `key: value` as the last entry of the mapping `map` (at `map_path`).
    fn insert_entry(
        &mut self,
        map: &Node,
        map_path: &[Step],
        k: &str,
        value: &Yaml,
    ) -> Result<(), EditError> {
        let Value::Map(entries) = &map.value else {
            return Err(EditError::Missing(describe(map_path)));
        };
        if self.is_flow(map) {
            let close = self
                .flow_close(map)
                .ok_or_else(|| EditError::Missing(describe(map_path)))?;
            let text = format!("{}: {}", render_key(k), render_flow(value));
            let (at, insert) = match entries.last() {
                Some(last) => (self.value_end(&last.value), format!(", {text}")),
                None => (close, text),
            };
            self.splice(at, at, &insert);
            return Ok(());
        }
        let Some(last) = entries.last() else {
            return Err(EditError::Missing(describe(map_path)));
        };
        let key_off = self.offset(last.key_span.start);
        let indent = self.column_of(key_off);
        let first = self.line_of(key_off);
        let end = self.block_end(first, indent, matches!(last.value.value, Value::Seq(_)));
        // Entries separated by blank lines get a blank line before the new one too.
        let spaced = entries.len() >= 2 && {
            let start = self.with_leading_comments(first, indent);
            start > 0 && self.line_text(start - 1).trim().is_empty()
        };
        let mut out = String::new();
        if spaced {
            out.push('\n');
        }
        render_entries(&[(k.to_string(), value.clone())], indent, &mut out);
        self.insert_lines(end, &out);
        Ok(())
    }

    /// Removes the mapping entry or sequence item at `path`. An emptied collection becomes
    /// `{}` or `[]`.
    pub fn remove(&mut self, path: &[Step]) -> Result<(), EditError> {
        let root = self
            .parse()?
            .ok_or_else(|| EditError::Missing(describe(path)))?;
        let (parent_path, last) = path.split_at(path.len().saturating_sub(1));
        let Some(last) = last.first() else {
            return Err(EditError::Missing(describe(path)));
        };
        let parent =
            lookup(&root, parent_path).ok_or_else(|| EditError::Missing(describe(path)))?;
        let node = lookup(&root, path).ok_or_else(|| EditError::Missing(describe(path)))?;
        let (count, element_start) = match (&parent.value, last) {
            (Value::Map(entries), Step::Key(k)) => {
                let entry = entries
                    .iter()
                    .find(|e| e.key == *k)
                    .ok_or_else(|| EditError::Missing(describe(path)))?;
                (entries.len(), self.offset(entry.key_span.start))
            }
            (Value::Seq(items), Step::Index(_)) => (items.len(), self.offset(node.span.start)),
            _ => return Err(EditError::Missing(describe(path))),
        };
        if count == 1 && !parent_path.is_empty() {
            let empty = match parent.value {
                Value::Map(_) => Yaml::FlowMap(Vec::new()),
                _ => Yaml::Seq(Vec::new()),
            };
            return self.replace_value(&root, parent_path, &empty);
        }
        if self.is_flow(parent) {
            let end = self.value_end(node);
            let after = &self.text[end..];
            let ws = after.len() - after.trim_start().len();
            if after[ws..].starts_with(',') {
                let rest = &after[ws + 1..];
                let ws2 = rest.len() - rest.trim_start_matches(' ').len();
                self.splice(element_start, end + ws + 1 + ws2, "");
            } else {
                let before = &self.text[..element_start];
                let comma = before.rfind(',').unwrap_or(element_start);
                self.splice(comma, end, "");
            }
            return Ok(());
        }
        let (start, indent, dash_continues) = match last {
            Step::Index(_) => {
                let dash = self.dash_of(node).ok_or_else(|| EditError::Unsupported {
                    path: describe(path),
                    reason: "cannot find the item's `-`".into(),
                })?;
                (dash, self.column_of(dash), false)
            }
            Step::Key(_) => {
                let line_start = self.line_start(self.line_of(element_start));
                if self.text[line_start..element_start]
                    .trim_start()
                    .starts_with('-')
                {
                    return Err(EditError::Unsupported {
                        path: describe(path),
                        reason: "the entry shares its line with the item's `-`".into(),
                    });
                }
                (
                    element_start,
                    self.column_of(element_start),
                    matches!(node.value, Value::Seq(_)),
                )
            }
        };
        let first = self.line_of(start);
        let end = self.block_end(first, indent, dash_continues);
        let mut from = self.with_leading_comments(first, indent);
        // Do not leave two blank lines where one separated the removed entry.
        let blank_after = end >= self.line_count()
            || !Self::is_content(self.line_text(end)) && self.line_text(end).trim().is_empty();
        if from > 0 && self.line_text(from - 1).trim().is_empty() && blank_after {
            from -= 1;
        }
        self.remove_lines(from, end);
        Ok(())
    }

    /// Renames a key of the mapping at `map_path`, keeping its value and position.
    pub fn rename_key(&mut self, map_path: &[Step], old: &str, new: &str) -> Result<(), EditError> {
        let root = self
            .parse()?
            .ok_or_else(|| EditError::Missing(describe(map_path)))?;
        let map = lookup(&root, map_path).ok_or_else(|| EditError::Missing(describe(map_path)))?;
        let entry = map
            .entry(old)
            .ok_or_else(|| EditError::Missing(format!("{}.{old}", describe(map_path))))?;
        let from = self.offset(entry.key_span.start);
        let to = self.offset(entry.key_span.end);
        self.splice(from, to, &render_key(new));
        Ok(())
    }
}

// ---- rendering -------------------------------------------------------------------------------

/// Whether `s` can be written unquoted and still read back as this string.
fn plain_ok(s: &str) -> bool {
    let reserved = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
    ];
    !s.is_empty()
        && s.trim() == s
        && !reserved.contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err()
        && !s.starts_with(['-', '?', '0', '.', '+'])
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | ' ' | '@'))
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

pub fn render_scalar(s: &str) -> String {
    if plain_ok(s) {
        s.to_string()
    } else {
        // A JSON string is a valid YAML double-quoted scalar.
        serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
    }
}

fn render_key(k: &str) -> String {
    render_scalar(k)
}

pub fn render_flow(value: &Yaml) -> String {
    match value {
        Yaml::Str(s) => render_scalar(s),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Map(entries) | Yaml::FlowMap(entries) => {
            if entries.is_empty() {
                return "{}".into();
            }
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}: {}", render_key(k), render_flow(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        Yaml::Seq(items) => {
            let inner: Vec<String> = items.iter().map(render_flow).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// `key: value` lines at `indent`, nested block mappings below their key.
fn render_entries(entries: &[(String, Yaml)], indent: usize, out: &mut String) {
    for (k, v) in entries {
        out.push_str(&" ".repeat(indent));
        out.push_str(&render_key(k));
        out.push(':');
        if v.is_block() {
            out.push('\n');
            if let Yaml::Map(inner) = v {
                render_entries(inner, indent + 2, out);
            }
        } else {
            out.push(' ');
            out.push_str(&render_flow(v));
            out.push('\n');
        }
    }
}

/// `- item` at `indent`; a mapping item starts on the dash line.
fn render_item(item: &Yaml, indent: usize, out: &mut String) {
    match item {
        Yaml::Map(entries) if !entries.is_empty() => {
            let mut block = String::new();
            render_entries(entries, indent + 2, &mut block);
            out.push_str(&" ".repeat(indent));
            out.push_str("- ");
            out.push_str(&block[indent + 2..]);
        }
        other => {
            out.push_str(&" ".repeat(indent));
            out.push_str("- ");
            out.push_str(&render_flow(other));
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(steps: &[&str]) -> Vec<Step> {
        steps
            .iter()
            .map(|s| match s.parse::<usize>() {
                Ok(i) => Step::Index(i),
                Err(_) => Step::Key(s.to_string()),
            })
            .collect()
    }

    const BINDINGS: &str = "# yaml-language-server: $schema=x\n\nbindings:\n  # first\n  - agentId: main\n    match: {channel: cli}\n\n  # second\n  - agentId: research   # r\n    match:\n      channel: telegram\n      peer: {kind: group, id: \"-100\"}\n\n  - agentId: main\n    match: {channel: telegram}\n";

    #[test]
    fn append_item_keeps_everything_and_spacing() {
        let mut doc = Doc::new(BINDINGS);
        let item = Yaml::Map(vec![
            ("agentId".into(), Yaml::str("x")),
            (
                "match".into(),
                Yaml::FlowMap(vec![("channel".into(), Yaml::str("cli"))]),
            ),
        ]);
        doc.append(&p(&["bindings"]), &item).unwrap();
        assert_eq!(
            doc.text,
            format!("{BINDINGS}\n  - agentId: x\n    match: {{channel: cli}}\n")
        );
    }

    #[test]
    fn remove_item_takes_its_comment_and_one_blank_line() {
        let mut doc = Doc::new(BINDINGS);
        doc.remove(&p(&["bindings", "1"])).unwrap();
        assert_eq!(
            doc.text,
            "# yaml-language-server: $schema=x\n\nbindings:\n  # first\n  - agentId: main\n    match: {channel: cli}\n\n  - agentId: main\n    match: {channel: telegram}\n"
        );
    }

    #[test]
    fn remove_last_item_leaves_an_empty_list() {
        let mut doc = Doc::new("bindings:\n  - agentId: a\n    match: {channel: cli}\n# end\n");
        doc.remove(&p(&["bindings", "0"])).unwrap();
        assert_eq!(doc.text, "bindings: []\n# end\n");
    }

    #[test]
    fn flow_map_insert_and_scalar_replace() {
        let mut doc = Doc::new(BINDINGS);
        doc.set(
            &p(&["bindings", "2", "match", "accountId"]),
            &Yaml::str("work"),
        )
        .unwrap();
        assert!(
            doc.text
                .contains("match: {channel: telegram, accountId: work}\n")
        );
        doc.set(
            &p(&["bindings", "1", "match", "peer", "id"]),
            &Yaml::str("-200"),
        )
        .unwrap();
        assert!(doc.text.contains("peer: {kind: group, id: \"-200\"}"));
        doc.set(
            &p(&["bindings", "1", "match", "accountId"]),
            &Yaml::str("w"),
        )
        .unwrap();
        assert!(
            doc.text
                .contains("      peer: {kind: group, id: \"-200\"}\n      accountId: w\n\n"),
            "{}",
            doc.text
        );
    }

    #[test]
    fn set_creates_missing_parents() {
        let mut doc =
            Doc::new("agents:\n  list:\n    - id: main   # the main one\n      name: Main\n");
        doc.set(
            &p(&["agents", "list", "0", "identity", "name"]),
            &Yaml::str("Main Bot"),
        )
        .unwrap();
        assert_eq!(
            doc.text,
            "agents:\n  list:\n    - id: main   # the main one\n      name: Main\n      identity:\n        name: Main Bot\n"
        );
        doc.set(
            &p(&["agents", "list", "0", "identity", "emoji"]),
            &Yaml::str("🦀"),
        )
        .unwrap();
        assert!(
            doc.text
                .ends_with("        name: Main Bot\n        emoji: \"🦀\"\n"),
            "{}",
            doc.text
        );
    }

    #[test]
    fn append_to_missing_and_flow_sequences() {
        let mut doc = Doc::new("# c\n");
        doc.append(
            &p(&["bindings"]),
            &Yaml::Map(vec![("agentId".into(), Yaml::str("a"))]),
        )
        .unwrap();
        assert_eq!(doc.text, "# c\nbindings:\n  - agentId: a\n");
        let mut doc = Doc::new("tools:\n  agentToAgent: {allow: [main, research]}\n");
        doc.remove(&p(&["tools", "agentToAgent", "allow", "1"]))
            .unwrap();
        assert_eq!(doc.text, "tools:\n  agentToAgent: {allow: [main]}\n");
        doc.append(&p(&["tools", "agentToAgent", "allow"]), &Yaml::str("x"))
            .unwrap();
        assert_eq!(doc.text, "tools:\n  agentToAgent: {allow: [main, x]}\n");
        doc.remove(&p(&["tools", "agentToAgent", "allow", "0"]))
            .unwrap();
        assert_eq!(doc.text, "tools:\n  agentToAgent: {allow: [x]}\n");
    }

    #[test]
    fn remove_block_entry_and_rename() {
        let text = "channels:\n  telegram:\n    accounts:\n      # the bot\n      default:\n        botToken: \"${T}\"\n      work:\n        name: Work\n  cli: {}\n";
        let mut doc = Doc::new(text);
        doc.rename_key(&p(&["channels", "telegram", "accounts"]), "work", "other")
            .unwrap();
        assert!(doc.text.contains("      other:\n"));
        doc.remove(&p(&["channels", "telegram", "accounts", "default"]))
            .unwrap();
        assert_eq!(
            doc.text,
            "channels:\n  telegram:\n    accounts:\n      other:\n        name: Work\n  cli: {}\n"
        );
    }

    #[test]
    fn replace_null_value_with_block() {
        let mut doc = Doc::new("channels:\n  cli: {}\n  slack:   # later\n");
        doc.set(
            &p(&["channels", "slack", "accounts", "default", "botToken"]),
            &Yaml::str("${S}"),
        )
        .unwrap();
        assert_eq!(
            doc.text,
            "channels:\n  cli: {}\n  slack:   # later\n    accounts:\n      default:\n        botToken: \"${S}\"\n"
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(render_scalar("main"), "main");
        assert_eq!(render_scalar("calm and precise"), "calm and precise");
        assert_eq!(render_scalar("true"), "\"true\"");
        assert_eq!(render_scalar("123"), "\"123\"");
        assert_eq!(render_scalar("a: b"), "\"a: b\"");
        assert_eq!(render_scalar("~/agents/x"), "\"~/agents/x\"");
        assert_eq!(render_scalar("/tmp/x"), "/tmp/x");
    }
}
