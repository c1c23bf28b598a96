//! Credentials written into the config, recognised by their shape wherever a string is stored
//! (config.md, `inline-secret` and `possible-secret`), and the scrubbing that keeps every
//! flagged value out of every message.
//!
//! The field rules (`channels.rs`, `agents.rs`) know which fields hold secrets; this rule asks
//! [`crate::credentials`] what secrets look like, so it walks every string of the three span trees — mapping keys
//! included, items the schema dropped included — and needs no field names. Pure: it reads
//! only the trees it is given.

use std::borrow::Cow;
use std::collections::HashSet;

use super::Context;
use crate::config::model::Secret;
use crate::config::yaml::{self, Node, Value, escape_pointer_token};
use crate::config::{FileKind, Sources};
use crate::credentials::{Certainty, credential};
use crate::diagnostic::{Diagnostic, Rule, rules};

/// Walks every string of the three files and reports credential-shaped ones that the field
/// rules have not already reported (in `reported`).
pub(super) fn check(cx: &Context<'_>, reported: &[Diagnostic], out: &mut Vec<Diagnostic>) {
    let reported: HashSet<(FileKind, String)> = reported
        .iter()
        .filter(|d| d.rule == rules::INLINE_SECRET || d.rule == rules::EMPTY_SECRET)
        .filter_map(|d| {
            let l = d.location.as_ref()?;
            let kind = FileKind::ALL
                .into_iter()
                .find(|k| l.file.file_name().is_some_and(|n| n == k.file_name()))?;
            Some((kind, l.pointer.clone()))
        })
        .collect();
    for file in &cx.config.sources.files {
        let mut walk = Walk {
            cx,
            kind: file.kind,
            reported: &reported,
            out,
        };
        match (&file.root, &file.let_go) {
            (Some(root), _) => walk.node(root, &mut Vec::new()),
            // A file loaded without its tree: what is left of it, and the items that
            // [`worth_a_look`] picked out, each parsed again.
            (None, Some(let_go)) => {
                walk.node(let_go.rest(), &mut Vec::new());
                for &index in let_go.flagged() {
                    let pointer = format!("{}/{index}", let_go.list());
                    let Some((tree, rest)) = file.subtree(&pointer) else {
                        continue;
                    };
                    // The binding parsed again alone, or where that did not give it back, in
                    // the whole file parsed again.
                    let Some(item) = tree.pointer(rest) else {
                        continue;
                    };
                    let mut path: Vec<Step<'_>> =
                        yaml::pointer_tokens(let_go.list()).map(Step::Key).collect();
                    path.push(Step::Index(index));
                    walk.node(item, &mut path);
                }
            }
            (None, None) => {}
        }
    }
}

/// Whether `node` holds a string, key or value, that [`credential`] picks out: the question
/// [`crate::config::load_lean`] asks of each binding, whose tree it does not keep.
pub(super) fn worth_a_look(node: &Node) -> bool {
    match &node.value {
        Value::String(text) => credential(text).is_some(),
        Value::Seq(items) => items.iter().any(worth_a_look),
        Value::Map(entries) => entries
            .iter()
            .any(|e| credential(&e.key).is_some() || worth_a_look(&e.value)),
        Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => false,
    }
}

struct Walk<'a, 'b> {
    cx: &'a Context<'b>,
    kind: FileKind,
    reported: &'a HashSet<(FileKind, String)>,
    out: &'a mut Vec<Diagnostic>,
}

/// One step from the root: a mapping key or a sequence index. The pointer is spelled out only
/// for a finding.
enum Step<'n> {
    Key(Cow<'n, str>),
    Index(usize),
}

fn pointer(path: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in path {
        out.push('/');
        match step {
            Step::Key(key) => out.push_str(&escape_pointer_token(key)),
            Step::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

impl Walk<'_, '_> {
    fn node<'n>(&mut self, node: &'n Node, path: &mut Vec<Step<'n>>) {
        match &node.value {
            Value::String(text) => self.text(text, path, false),
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    self.node(item, path);
                    path.pop();
                }
            }
            Value::Map(entries) => {
                for entry in entries {
                    path.push(Step::Key(Cow::Borrowed(&entry.key)));
                    self.text(&entry.key, path, true);
                    self.node(&entry.value, path);
                    path.pop();
                }
            }
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {}
        }
    }

    fn text(&mut self, text: &str, path: &[Step<'_>], key: bool) {
        let Some(found) = credential(text) else {
            return;
        };
        let pointer = pointer(path);
        let pointer = pointer.as_str();
        if !key && self.reported.contains(&(self.kind, pointer.to_string())) {
            return;
        }
        // `"${VAR}"` is a reference wherever it is written.
        if matches!(Secret::from_text(text), Secret::Ref(_)) {
            return;
        }
        let (parent, name) = pointer.rsplit_once('/').unwrap_or_default();
        let (rule, verb): (&'static Rule, _) = match found.certainty {
            Certainty::Credential => (rules::INLINE_SECRET, "holds what looks like"),
            Certainty::Possible => (rules::POSSIBLE_SECRET, "looks like"),
        };
        let place = if key {
            format!("a key of {}", crate::config::schema::describe(parent))
        } else {
            crate::config::schema::describe(pointer)
        };
        let message = format!("{place} {verb} {}", found.what);
        let env_value = !key && parent.ends_with("/runtime/env");
        let hint = match (found.certainty, found.in_url, env_value) {
            (Certainty::Credential, true, _) => "take the credential out of the URL (replies are signed with the account's webhookSecret; a runtime's env takes references), and rotate it: it is in your git history".to_string(),
            (Certainty::Credential, false, true) => {
                let name = crate::config::yaml::pointer_tokens(&format!("/{name}"))
                    .next()
                    .unwrap_or_default()
                    .into_owned();
                format!(
                    "write `{name}: {{source: env, id: {name}}}` or `\"${{{name}}}\"`, and rotate the credential: it is in your git history"
                )
            }
            (Certainty::Credential, false, false) => "deepcli stores and prints this string as written: remove the credential (secret fields and `runtime.env` take references such as `{source: env, id: VAR}`), and rotate it: it is in your git history".to_string(),
            (Certainty::Possible, _, _) => "if it is a credential, move it out of the config (secret fields and `runtime.env` take references such as `{source: env, id: VAR}`) and rotate it; deepcli stores and prints this string as written".to_string(),
        };
        let location = if key {
            self.cx.at_key(self.kind, pointer)
        } else {
            self.cx.at(self.kind, pointer)
        };
        self.out.push(
            Diagnostic::new(rule, message)
                .hint(hint)
                .at(location)
                .redacted(),
        );
    }
}

/// What replaces a secret quoted in a message.
const MASK: &str = "<redacted>";

/// Takes the value of every redacted finding out of every message, hint and related note:
/// other rules (the schema's "`…` is not a valid value", an unknown agent id) quote what was
/// written.
pub(crate) fn scrub(diagnostics: &mut [Diagnostic], sources: &Sources) {
    let mut secrets: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.redact)
        .filter_map(|d| secret_text(d, sources))
        // Too short to be a credential, and too likely to hide ordinary words.
        .filter(|s| s.trim().len() >= 4)
        .collect();
    if secrets.is_empty() {
        return;
    }
    // Longest first, so a secret that contains another is masked whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    let mask = |text: &mut String| {
        for secret in &secrets {
            if text.contains(secret.as_str()) {
                *text = mask_word(text, secret);
            }
        }
    };
    for d in diagnostics {
        mask(&mut d.message);
        if let Some(hint) = &mut d.hint {
            mask(hint);
        }
        for r in &mut d.related {
            mask(&mut r.message);
        }
    }
}

/// `text` with every occurrence of `secret` that is not part of a longer word masked: a
/// short inline value (`test`) must not cut into `latest`.
fn mask_word(text: &str, secret: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(secret) {
        let end = at + secret.len();
        let inside = word(rest[..at].chars().next_back()) || word(rest[end..].chars().next());
        out.push_str(&rest[..at]);
        out.push_str(if inside { secret } else { MASK });
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The string a redacted finding points at: the scalar, or the mapping key.
fn secret_text(d: &Diagnostic, sources: &Sources) -> Option<String> {
    let l = d.location.as_ref()?;
    let file = sources.by_path(&l.file)?;
    let (root, pointer) = file.subtree(&l.pointer)?;
    if let Some(node) = root.pointer(pointer)
        && node.span == l.span
    {
        return match &node.value {
            Value::String(s) => Some(s.to_string()),
            _ => None,
        };
    }
    let (_, last) = l.pointer.rsplit_once('/')?;
    crate::config::yaml::pointer_tokens(&format!("/{last}"))
        .next()
        .map(|t| t.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_secret_is_masked_but_not_the_words_that_contain_it() {
        assert_eq!(
            mask_word("`test` is not the latest test: test", "test"),
            "`<redacted>` is not the latest <redacted>: <redacted>"
        );
        assert_eq!(mask_word("no secret here", "test"), "no secret here");
    }
}
