//! Writing new YAML files for people to read and keep: block style, short leaf collections in
//! flow style, `# comments` above the entries they explain, strings quoted only where YAML
//! would read them as something else.
//!
//! The tree ([`Node`]) is what import builds; the schema gate ([`super::gate`]) prunes it before
//! it is written.

/// A YAML node with the comments of its entries.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Str(String),
    Bool(bool),
    Int(i64),
    Map(Vec<Entry>),
    Seq(Vec<Item>),
}

/// One `key: value` of a mapping, with the comment lines above it. A `None` value is a comment
/// that stands alone (for example a commented-out suggestion).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub value: Option<Node>,
    pub comment: Vec<String>,
}

/// One `- item` of a sequence, with the comment lines above it.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub value: Node,
    pub comment: Vec<String>,
}

impl Node {
    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    pub fn strs<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Node {
        Node::Seq(
            items
                .into_iter()
                .map(|s| Item {
                    value: Node::Str(s.into()),
                    comment: Vec::new(),
                })
                .collect(),
        )
    }

    pub fn map() -> Node {
        Node::Map(Vec::new())
    }

    /// Adds `key: value` to a mapping (no-op on other nodes).
    pub fn set(&mut self, key: impl Into<String>, value: Node) -> &mut Node {
        self.set_commented(key, value, Vec::new())
    }

    pub fn set_commented(
        &mut self,
        key: impl Into<String>,
        value: Node,
        comment: Vec<String>,
    ) -> &mut Node {
        if let Node::Map(entries) = self {
            entries.push(Entry {
                key: key.into(),
                value: Some(value),
                comment,
            });
        }
        self
    }

    /// A comment line standing alone at this point of a mapping.
    pub fn note(&mut self, lines: Vec<String>) {
        if let Node::Map(entries) = self {
            entries.push(Entry {
                key: String::new(),
                value: None,
                comment: lines,
            });
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Map(entries) => entries
                .iter_mut()
                .find(|e| e.key == key && e.value.is_some())
                .and_then(|e| e.value.as_mut()),
            _ => None,
        }
    }

    /// Removes `key` from a mapping and answers its value.
    pub fn take(&mut self, key: &str) -> Option<Node> {
        match self {
            Node::Map(entries) => {
                let i = entries
                    .iter()
                    .position(|e| e.key == key && e.value.is_some())?;
                entries.remove(i).value
            }
            _ => None,
        }
    }

    pub fn has(&self, key: &str) -> bool {
        matches!(self, Node::Map(entries) if entries.iter().any(|e| e.key == key && e.value.is_some()))
    }

    pub fn is_empty_map(&self) -> bool {
        matches!(self, Node::Map(entries) if entries.iter().all(|e| e.value.is_none()))
    }

    fn is_scalar(&self) -> bool {
        matches!(self, Node::Str(_) | Node::Bool(_) | Node::Int(_))
    }
}

/// The text of a file: the header comment lines, a blank line, then `root`'s entries.
pub fn render(header: &[String], root: &Node) -> String {
    let mut out = String::new();
    for line in header {
        comment_line(&mut out, 0, line);
    }
    if !header.is_empty() {
        out.push('\n');
    }
    if let Node::Map(entries) = root {
        write_entries(&mut out, entries, 0, true);
    }
    out
}

fn comment_line(out: &mut String, indent: usize, line: &str) {
    push_indent(out, indent);
    if line.is_empty() {
        out.push_str("#\n");
    } else {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn comments(out: &mut String, indent: usize, lines: &[String]) {
    for text in lines {
        for line in text.split('\n') {
            comment_line(out, indent, line);
        }
    }
}

fn write_entries(out: &mut String, entries: &[Entry], indent: usize, top: bool) {
    for (i, e) in entries.iter().enumerate() {
        // Top-level sections are separated by a blank line.
        if top && i > 0 {
            out.push('\n');
        }
        comments(out, indent, &e.comment);
        let Some(value) = &e.value else { continue };
        push_indent(out, indent);
        out.push_str(&scalar_text(&e.key));
        out.push(':');
        write_value(out, value, indent);
    }
}

/// Writes what follows `key:` (or `- `): a scalar or flow collection on the same line, a block
/// collection on the next lines.
fn write_value(out: &mut String, value: &Node, indent: usize) {
    if let Some(flow) = flow(value) {
        out.push(' ');
        out.push_str(&flow);
        out.push('\n');
        return;
    }
    out.push('\n');
    match value {
        Node::Map(entries) => write_entries(out, entries, indent + 2, false),
        Node::Seq(items) => write_items(out, items, indent + 2),
        _ => {}
    }
}

fn write_items(out: &mut String, items: &[Item], indent: usize) {
    for item in items {
        comments(out, indent, &item.comment);
        match &item.value {
            Node::Map(entries) if flow(&item.value).is_none() => {
                // The first entry's comments go above the dash; the entries follow it.
                let mut entries = entries.clone();
                if let Some(first) = entries.first_mut() {
                    comments(out, indent, &std::mem::take(&mut first.comment));
                }
                let mut block = String::new();
                write_entries(&mut block, &entries, indent + 2, false);
                push_indent(out, indent);
                out.push_str("- ");
                out.push_str(block.get(indent + 2..).unwrap_or(""));
            }
            value => {
                push_indent(out, indent);
                out.push('-');
                write_value(out, value, indent);
            }
        }
    }
}

/// The flow form of a node, when it is a scalar or a short collection of scalars.
fn flow(node: &Node) -> Option<String> {
    const WIDTH: usize = 72;
    let text = match node {
        Node::Str(s) => return Some(scalar_text(s)),
        Node::Bool(b) => return Some(b.to_string()),
        Node::Int(i) => return Some(i.to_string()),
        Node::Map(entries) if entries.iter().all(|e| e.value.is_none()) => {
            return Some("{}".into());
        }
        Node::Seq(items) if items.is_empty() => return Some("[]".into()),
        Node::Map(entries) => {
            if entries
                .iter()
                .any(|e| !e.comment.is_empty() || !e.value.as_ref().is_some_and(Node::is_scalar))
            {
                return None;
            }
            let parts: Vec<String> = entries
                .iter()
                .filter_map(|e| {
                    let v = flow(e.value.as_ref()?)?;
                    Some(format!("{}: {v}", scalar_text(&e.key)))
                })
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Node::Seq(items) => {
            if items
                .iter()
                .any(|i| !i.comment.is_empty() || !i.value.is_scalar())
            {
                return None;
            }
            let parts: Vec<String> = items.iter().filter_map(|i| flow(&i.value)).collect();
            format!("[{}]", parts.join(", "))
        }
    };
    (text.len() <= WIDTH).then_some(text)
}

/// A string as a YAML scalar: plain when YAML reads it back as the same string in block and
/// flow context alike, else double-quoted (JSON escapes are valid YAML escapes).
pub fn scalar_text(s: &str) -> String {
    if plain_ok(s) {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

fn plain_ok(s: &str) -> bool {
    const RESERVED: &[&str] = &["true", "false", "null", "yes", "no", "on", "off", "y", "n"];
    let Some(first) = s.chars().next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_' || first == '/' || first == '~')
        && s != "~"
        && !s.ends_with(' ')
        && !s.contains("  ")
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '~' | '@' | '+' | '-' | ' ')
        })
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a string holds, deepcli's own YAML reader reads back that string, as a
        /// block value, a flow list item and a key.
        #[test]
        fn every_string_reads_back_as_itself(s in "(?s:.{0,16})|\\PC{0,16}|[ -~]{0,16}|[@:#,\\[\\]{}&*!|>'\"%-]{1,4}") {
            prop_assume!(s != "a" && s != "b");
            let mut root = Node::map();
            root.set("a", Node::str(s.clone()));
            root.set("b", Node::strs([s.clone(), "x".to_string()]));
            root.set(s.clone(), Node::Bool(true));
            let text = render(&[], &root);
            let parsed = crate::config::yaml::parse(&text)
                .unwrap_or_else(|e| panic!("{text}: {e:?}"))
                .unwrap()
                .to_json();
            prop_assert_eq!(&parsed["a"], &serde_json::json!(s), "{}", text);
            prop_assert_eq!(&parsed["b"][0], &serde_json::json!(s), "{}", text);
            prop_assert_eq!(&parsed[s.as_str()], &serde_json::json!(true), "{}", text);
        }
    }

    #[test]
    fn strings_are_quoted_only_where_yaml_would_misread_them() {
        for plain in [
            "main",
            "anthropic/claude-opus-4",
            "~/agents/x",
            "a b",
            "per-peer",
        ] {
            assert_eq!(scalar_text(plain), plain);
        }
        for quoted in [
            "",
            "true",
            "No",
            "123",
            "-100",
            "@main",
            "a: b",
            "a #b",
            "x,y",
            "*",
            "~",
            " a",
            "a\nb",
            "telegram:1",
        ] {
            assert!(scalar_text(quoted).starts_with('"'), "{quoted}");
        }
    }

    #[test]
    fn control_and_odd_characters_read_back() {
        for s in [
            "\x7f",
            "\u{85}",
            "\u{feff}x",
            "\u{2028}",
            "a\tb",
            "\r\n",
            "\0",
            "\\",
        ] {
            let mut root = Node::map();
            root.set("a", Node::str(s));
            let text = render(&[], &root);
            let parsed = crate::config::yaml::parse(&text)
                .unwrap_or_else(|e| panic!("{s:?} → {text}: {e:?}"))
                .unwrap()
                .to_json();
            assert_eq!(parsed["a"], serde_json::json!(s), "{text}");
        }
    }

    #[test]
    fn renders_blocks_flows_and_comments() {
        let mut m = Node::map();
        let mut item = Node::map();
        item.set_commented(
            "agentId",
            Node::str("main"),
            vec!["from bindings[0]".into()],
        );
        let mut matcher = Node::map();
        matcher.set("channel", Node::str("telegram"));
        matcher.set("peer", {
            let mut p = Node::map();
            p.set("kind", Node::str("group"))
                .set("id", Node::str("-100"));
            p
        });
        item.set("match", matcher);
        m.set(
            "bindings",
            Node::Seq(vec![Item {
                value: item,
                comment: vec![],
            }]),
        );
        let text = render(&["header".into()], &m);
        assert_eq!(
            text,
            "# header\n\nbindings:\n  # from bindings[0]\n  - agentId: main\n    match:\n      channel: telegram\n      peer: {kind: group, id: \"-100\"}\n"
        );
    }
}
