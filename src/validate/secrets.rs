//! Credentials written into the config, recognised by their shape wherever a string is stored
//! (config.md, `inline-secret` and `possible-secret`), and the scrubbing that keeps every
//! flagged value out of every message.
//!
//! The field rules (`channels.rs`, `agents.rs`) know which fields hold secrets; this rule knows
//! what secrets look like, so it walks every string of the three span trees — mapping keys
//! included, items the schema dropped included — and needs no field names. Pure: it reads
//! only the trees it is given.

use std::borrow::Cow;
use std::collections::HashSet;

use super::Context;
use crate::config::model::Secret;
use crate::config::yaml::{self, Node, Value, escape_pointer_token};
use crate::config::{FileKind, Sources};
use crate::diagnostic::{Diagnostic, Rule, rules};

/// How sure a shape is that the text is a credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Certainty {
    /// A provider's documented token format, a private key, a password in a URL: an error.
    Credential,
    /// Usually a credential, sometimes not (a JWT, a bearer header, a `token=` parameter): a
    /// warning.
    Possible,
}

/// A credential-shaped part of a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// What it looks like, for the message: "a GitHub token (`ghp_…`)".
    pub what: &'static str,
    pub certainty: Certainty,
    /// A password in a URL: the fix is to take it out, not to reference it.
    pub in_url: bool,
}

impl Found {
    const fn credential(what: &'static str) -> Found {
        Found {
            what,
            certainty: Certainty::Credential,
            in_url: false,
        }
    }

    const fn possible(what: &'static str) -> Found {
        Found {
            what,
            certainty: Certainty::Possible,
            in_url: false,
        }
    }
}

/// A token that starts with a fixed prefix: the prefix at a word boundary, then at least
/// `min` body characters.
struct Prefixed {
    prefix: &'static str,
    body: fn(u8) -> bool,
    min: usize,
    /// Formats of a fixed length: a longer run is something else.
    max: usize,
    /// The body must hold a digit and a letter: random tokens do, words and names rarely.
    mixed: bool,
    found: Found,
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn alnum_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

fn alnum_under(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn upper_digit(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

/// Provider token formats, most specific prefix first (`sk-ant-` before `sk-`).
const PREFIXED: &[Prefixed] = &[
    Prefixed {
        prefix: "sk-ant-",
        body: base64url,
        min: 20,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("an Anthropic API key (`sk-ant-…`)"),
    },
    Prefixed {
        prefix: "sk-",
        body: base64url,
        min: 20,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("an OpenAI-style API key (`sk-…`)"),
    },
    Prefixed {
        prefix: "sk_live_",
        body: alnum,
        min: 16,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Stripe secret key (`sk_live_…`)"),
    },
    Prefixed {
        prefix: "sk_test_",
        body: alnum,
        min: 16,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Stripe secret key (`sk_test_…`)"),
    },
    Prefixed {
        prefix: "rk_live_",
        body: alnum,
        min: 16,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Stripe restricted key (`rk_live_…`)"),
    },
    Prefixed {
        prefix: "xoxb-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack bot token (`xoxb-…`)"),
    },
    Prefixed {
        prefix: "xoxp-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack user token (`xoxp-…`)"),
    },
    Prefixed {
        prefix: "xoxa-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack token (`xoxa-…`)"),
    },
    Prefixed {
        prefix: "xoxr-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack refresh token (`xoxr-…`)"),
    },
    Prefixed {
        prefix: "xoxs-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack token (`xoxs-…`)"),
    },
    Prefixed {
        prefix: "xoxe.xoxp-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack rotating token (`xoxe.xoxp-…`)"),
    },
    Prefixed {
        prefix: "xapp-",
        body: alnum_dash,
        min: 10,
        max: usize::MAX,
        mixed: true,
        found: Found::credential("a Slack app token (`xapp-…`)"),
    },
    Prefixed {
        prefix: "ghp_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub token (`ghp_…`)"),
    },
    Prefixed {
        prefix: "gho_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub OAuth token (`gho_…`)"),
    },
    Prefixed {
        prefix: "ghu_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub user-to-server token (`ghu_…`)"),
    },
    Prefixed {
        prefix: "ghs_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub app token (`ghs_…`)"),
    },
    Prefixed {
        prefix: "ghr_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub refresh token (`ghr_…`)"),
    },
    Prefixed {
        prefix: "github_pat_",
        body: alnum_under,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitHub fine-grained token (`github_pat_…`)"),
    },
    Prefixed {
        prefix: "glpat-",
        body: base64url,
        min: 20,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a GitLab token (`glpat-…`)"),
    },
    Prefixed {
        prefix: "AKIA",
        body: upper_digit,
        min: 16,
        max: 16,
        mixed: false,
        found: Found::credential("an AWS access key id (`AKIA…`)"),
    },
    Prefixed {
        prefix: "ASIA",
        body: upper_digit,
        min: 16,
        max: 16,
        mixed: false,
        found: Found::credential("an AWS temporary access key id (`ASIA…`)"),
    },
    Prefixed {
        prefix: "AIza",
        body: base64url,
        min: 35,
        max: 35,
        mixed: false,
        found: Found::credential("a Google API key (`AIza…`)"),
    },
    Prefixed {
        prefix: "hf_",
        body: alnum,
        min: 30,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("a Hugging Face token (`hf_…`)"),
    },
    Prefixed {
        prefix: "npm_",
        body: alnum,
        min: 36,
        max: usize::MAX,
        mixed: false,
        found: Found::credential("an npm token (`npm_…`)"),
    },
];

/// Query parameters that carry credentials in URLs.
const QUERY_CREDENTIALS: &[&str] = &[
    "token",
    "access_token",
    "accesstoken",
    "auth",
    "auth_token",
    "api_key",
    "apikey",
    "api-key",
    "key",
    "secret",
    "client_secret",
    "password",
    "passwd",
    "pwd",
    "sig",
    "signature",
];

/// The first credential-shaped part of `text`, the surest kind first.
pub(crate) fn credential(text: &str) -> Option<Found> {
    // Every shape is at least this long; most strings of a config are ids and names.
    if text.len() < 12 {
        return None;
    }
    let bytes = text.as_bytes();
    let mut possible = None;
    for i in 0..bytes.len() {
        // Shapes start at a word boundary: `task-…` holds no `sk-` key.
        if !may_start(bytes[i]) || (i > 0 && alnum_under(bytes[i - 1])) {
            continue;
        }
        let rest = &bytes[i..];
        if let Some(found) = prefixed(rest)
            .or_else(|| telegram(rest))
            .or_else(|| private_key(rest))
        {
            return Some(found);
        }
        if possible.is_none() {
            possible = jwt(rest).or_else(|| authorization(rest));
        }
    }
    match urls(text) {
        Some(found) if found.certainty == Certainty::Credential => Some(found),
        found => possible.or(found),
    }
}

/// Whether a shape can start with this byte: the first bytes of [`PREFIXED`], a Telegram
/// bot id, `-----BEGIN`, `eyJ`, `Bearer`/`Basic`. Most positions of most strings fail here.
fn may_start(b: u8) -> bool {
    matches!(
        b,
        b's' | b'r' | b'x' | b'g' | b'A' | b'h' | b'n' | b'-' | b'e' | b'B' | b'b' | b'0'..=b'9'
    )
}

fn run(bytes: &[u8], class: fn(u8) -> bool) -> usize {
    bytes.iter().take_while(|b| class(**b)).count()
}

fn prefixed(rest: &[u8]) -> Option<Found> {
    PREFIXED.iter().find_map(|p| {
        let body = rest.strip_prefix(p.prefix.as_bytes())?;
        let n = run(body, p.body);
        let body = &body[..n];
        let mixed = body.iter().any(u8::is_ascii_digit) && body.iter().any(u8::is_ascii_alphabetic);
        (n >= p.min && n <= p.max && (!p.mixed || mixed)).then_some(p.found)
    })
}

/// `<bot id>:<35 characters>`, as BotFather hands them out.
fn telegram(rest: &[u8]) -> Option<Found> {
    let digits = run(rest, |b| b.is_ascii_digit());
    if !(6..=12).contains(&digits) || rest.get(digits) != Some(&b':') {
        return None;
    }
    let secret = &rest[digits + 1..];
    let n = run(secret, base64url);
    let letters = secret[..n].iter().any(u8::is_ascii_alphabetic);
    (n >= 30 && letters).then_some(Found::credential(
        "a Telegram bot token (`<bot id>:<secret>`)",
    ))
}

/// `-----BEGIN … PRIVATE KEY-----`.
fn private_key(rest: &[u8]) -> Option<Found> {
    let label = rest.strip_prefix(b"-----BEGIN ")?;
    let end = label.windows(5).position(|w| w == b"-----")?;
    label[..end]
        .ends_with(b"PRIVATE KEY")
        .then_some(Found::credential(
            "a private key (`-----BEGIN … PRIVATE KEY-----`)",
        ))
}

/// A JSON Web Token: `eyJ<header>.eyJ<payload>.<signature>`.
fn jwt(rest: &[u8]) -> Option<Found> {
    if !rest.starts_with(b"eyJ") {
        return None;
    }
    let header = run(rest, base64url);
    if header < 10 || rest.get(header) != Some(&b'.') {
        return None;
    }
    let payload = &rest[header + 1..];
    let n = run(payload, base64url);
    (payload.starts_with(b"eyJ") && n >= 10 && payload.get(n) == Some(&b'.'))
        .then_some(Found::possible("a JSON Web Token (`eyJ….eyJ….…`)"))
}

/// `Bearer <token>` or `Basic <credentials>`, an `Authorization` header's value.
fn authorization(rest: &[u8]) -> Option<Found> {
    let value = ["Bearer ", "bearer ", "Basic ", "basic "]
        .iter()
        .find_map(|scheme| rest.strip_prefix(scheme.as_bytes()))?;
    let n = run(value, |b| {
        b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
    });
    (n >= 16).then_some(Found::possible(
        "an `Authorization` header value (`Bearer …`)",
    ))
}

/// Words that stand for a value rather than being one: `${VAR}`, `$VAR`, `<password>`,
/// `{{password}}`, `%s`, `****`.
fn placeholder(text: &str) -> bool {
    text.starts_with(['$', '<', '{', '%']) || text.chars().all(|c| c == '*')
}

/// A password in a URL's userinfo, a webhook URL whose path is its credential, or a
/// credential in the query.
fn urls(text: &str) -> Option<Found> {
    if !text.contains("://") {
        return None;
    }
    let mut possible = None;
    let mut from = 0;
    while let Some(at) = text[from..].find("://") {
        let after = from + at + 3;
        let scheme_ok = text[..from + at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        let end = text[after..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '>' | '`'))
            .map_or(text.len(), |n| after + n);
        let url = &text[after..end];
        from = after;
        if !scheme_ok {
            continue;
        }
        let authority_end = url.find(['/', '?', '#']).unwrap_or(url.len());
        let authority = &url[..authority_end];
        if let Some((userinfo, _host)) = authority.rsplit_once('@')
            && let Some((_user, password)) = userinfo.split_once(':')
            && !password.is_empty()
            && !placeholder(password)
        {
            return Some(Found {
                in_url: true,
                ..Found::credential("a URL with a password (`user:password@`)")
            });
        }
        let path = &url[authority_end..];
        let host = authority.rsplit('@').next().unwrap_or(authority);
        if (host == "hooks.slack.com" && path.starts_with("/services/") && path.len() > 30)
            || (matches!(host, "discord.com" | "discordapp.com")
                && path.starts_with("/api/webhooks/")
                && path.len() > 40)
        {
            return Some(Found {
                in_url: true,
                ..Found::credential("a webhook URL, whose path is its credential")
            });
        }
        if possible.is_none()
            && let Some((_, query)) = path.split_once('?')
        {
            let query = query.split('#').next().unwrap_or_default();
            let named = query.split('&').any(|pair| {
                pair.split_once('=').is_some_and(|(name, value)| {
                    QUERY_CREDENTIALS.contains(&name.to_ascii_lowercase().as_str())
                        && !value.is_empty()
                        && !placeholder(value)
                })
            });
            if named {
                possible = Some(Found {
                    in_url: true,
                    ..Found::possible("a URL with a credential in its query (`token=…`)")
                });
            }
        }
    }
    possible
}

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

    fn what(text: &str) -> Option<(Certainty, &'static str)> {
        credential(text).map(|f| (f.certainty, f.what))
    }

    #[test]
    fn provider_formats_are_credentials() {
        for text in [
            "sk-proj-EXAMPLE0example0EXAMPLE0example0",
            "sk-ant-api03-EXAMPLE0example0EXAMPLE0example0",
            "sk_live_EXAMPLE0example0EXAM",
            "xoxb-1234567890-EXAMPLE0example",
            "xoxp-1234567890-EXAMPLE0example",
            "xapp-1-A0EXAMPLE-1234567890-EXAMPLE",
            "ghp_EXAMPLE0example0EXAMPLE0example0EXAM",
            "github_pat_11EXAMPLE0example0EXAMPLE_EXAMPLE0example",
            "glpat-EXAMPLE0example0EXAM",
            "123456789:AAEXAMPLE0example0EXAMPLE0example0X",
            "AKIAIOSFODNN7EXAMPLE",
            "AIzaEXAMPLE0example0EXAMPLE0example0EXA",
            "https://user:pw0rd@example.com/",
            "https://hooks.slack.com/services/T0EXAMPLE/B0EXAMPLE/EXAMPLE0example0EXAMPLE0",
            "https://discord.com/api/webhooks/123456789012345678/EXAMPLE0example0EXAMPLE0example0",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "key: sk-proj-EXAMPLE0example0EXAMPLE0example0 (inside a text)",
        ] {
            assert_eq!(
                what(text).map(|w| w.0),
                Some(Certainty::Credential),
                "{text}"
            );
        }
    }

    #[test]
    fn a_quoted_secret_is_masked_but_not_the_words_that_contain_it() {
        assert_eq!(
            mask_word("`test` is not the latest test: test", "test"),
            "`<redacted>` is not the latest <redacted>: <redacted>"
        );
        assert_eq!(mask_word("no secret here", "test"), "no secret here");
    }

    #[test]
    fn the_most_specific_shape_names_it() {
        assert_eq!(
            what("sk-ant-api03-EXAMPLE0example0EXAMPLE0example0")
                .unwrap()
                .1,
            "an Anthropic API key (`sk-ant-…`)"
        );
    }

    #[test]
    fn bearer_values_jwts_and_query_tokens_are_possible() {
        for text in [
            "Bearer EXAMPLE0example0EXAMPLE0",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJFWEFNUExFIn0.EXAMPLE0example0",
            "http://cdn.example.com/a.png?size=1&token=EXAMPLE0example0",
        ] {
            assert_eq!(what(text).map(|w| w.0), Some(Certainty::Possible), "{text}");
        }
    }

    proptest::proptest! {
        /// Pieces of every shape, glued at random, with multi-byte characters between them.
        #[test]
        fn no_string_makes_it_panic(
            text in "(sk-|sk-ant-|xoxb-|xoxe.xoxp-|ghp_|github_pat_|AKIA|AIza|://|@|:|/|\\?|&|=|eyJ|\\.|Bearer |-----BEGIN |PRIVATE KEY-----|[0-9]{6,9}:|hooks.slack.com/services/|[a-zA-Z0-9_-]{1,40}|é|💥| ){0,24}"
        ) {
            let _ = credential(&text);
        }
    }

    #[test]
    fn ordinary_strings_are_not_credentials() {
        for text in [
            "",
            "sk-learn",
            "ask-anything-about-everything-ever-written-2024",
            "task-EXAMPLE0example0EXAMPLE0example0",
            "sk-not-a-real-key-but-a-long-name",
            "ghp_short",
            "AKIAshort",
            "AKIAIOSFODNN7EXAMPLEANDMORE",
            "anthropic/claude-sonnet-4",
            "http://127.0.0.1:9000/reply",
            "http://adapter:8080/reply",
            "http://user@host/x",
            "http://host/a:b@c",
            "http://user:@host/x",
            "http://user:${DB_PASSWORD}@db/app",
            "http://user:<password>@db/app",
            "postgres://db.internal/app",
            "http://cdn.example.com/a.png?size=64&key=",
            "user:name@example.com",
            "telegram:111111111",
            "-1001234567890",
            "123456789:short",
            "sha256:5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "123e4567-e89b-12d3-a456-426614174000",
            "Bearer $TOKEN",
            "the bearer of bad news is here",
            "-----BEGIN CERTIFICATE-----",
            "://",
            "a://",
            "ëëëëëëëëëëëëëëëë://ë:ë@ë",
        ] {
            assert_eq!(what(text), None, "{text}");
        }
    }
}
