//! What a credential looks like: the one recogniser deepcli has of secrets written where they
//! should not be. Provider token formats, private keys, Telegram bot tokens, JWTs, bearer
//! values, passwords and credentials in URLs, and deepcli's own operator and Hub session
//! tokens. The validator flags config strings with it (`validate/secrets.rs`, config.md
//! `inline-secret`, `possible-secret`); the Hub masks what agents read with it (hub.md,
//! "Redaction"). A leaf: pure, no I/O, and no input makes it panic.

use std::borrow::Cow;
use std::ops::Range;

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

    const fn in_url(self) -> Found {
        Found {
            in_url: true,
            ..self
        }
    }
}

/// Where a credential-shaped part of a string is (byte offsets: the secret itself, not the
/// `Bearer ` before it or the URL around it) and what it looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Span {
    pub range: Range<usize>,
    pub found: Found,
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

fn lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
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
    Prefixed {
        prefix: "dch_",
        body: lower_hex,
        min: 64,
        max: 64,
        mixed: false,
        found: Found::credential("a deepcli Hub session token (`dch_…`)"),
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

/// Every shape is at least this long.
const SHORTEST: usize = 12;

/// The first credential-shaped part of `text`, the surest kind first: a token format or key
/// anywhere, then a credential in a URL, then a possible one (a JWT, a bearer value), then a
/// possible one in a URL.
pub(crate) fn credential(text: &str) -> Option<Found> {
    // Most strings of a config are ids and names.
    if text.len() < SHORTEST {
        return None;
    }
    let found = spans(text);
    let first = |certainty, in_url| {
        found
            .iter()
            .find(|s| s.found.certainty == certainty && s.found.in_url == in_url)
            .map(|s| s.found)
    };
    first(Certainty::Credential, false)
        .or_else(|| first(Certainty::Credential, true))
        .or_else(|| first(Certainty::Possible, false))
        .or_else(|| first(Certainty::Possible, true))
}

/// Every credential-shaped part of `text`: the ones outside URLs in the order they start,
/// then the ones in URLs. Parts may overlap (a bearer value that is also an API key).
pub(crate) fn spans(text: &str) -> Vec<Span> {
    let mut out = Vec::new();
    if text.len() < SHORTEST {
        return out;
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        // Shapes start at a word boundary: `task-…` holds no `sk-` key.
        if !may_start(bytes[i]) || (i > 0 && alnum_under(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        if let Some((found, len)) = prefixed(rest)
            .or_else(|| telegram(rest))
            .or_else(|| private_key(rest))
            .or_else(|| operator_token(rest))
        {
            out.push(Span {
                range: i..i + len,
                found,
            });
            // Nothing inside a token or a key block is a second one.
            i += len.max(1);
            continue;
        }
        if let Some((found, range)) = jwt(rest).or_else(|| authorization(rest)) {
            out.push(Span {
                range: i + range.start..i + range.end,
                found,
            });
        }
        i += 1;
    }
    urls(text, &mut out);
    out
}

/// `text` with every credential-shaped part (and every occurrence of each of `also`, exact
/// values a caller knows to be secret) replaced by `mask`.
pub(crate) fn redact<'t>(text: &'t str, also: &[&str], mask: &str) -> Cow<'t, str> {
    let mut ranges: Vec<Range<usize>> = spans(text).into_iter().map(|s| s.range).collect();
    for secret in also.iter().filter(|s| !s.is_empty()) {
        ranges.extend(text.match_indices(secret).map(|(at, s)| at..at + s.len()));
    }
    if ranges.is_empty() {
        return Cow::Borrowed(text);
    }
    ranges.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for range in ranges {
        // Overlapping parts are masked once, as one.
        let start = range.start.max(done);
        if range.end <= start {
            continue;
        }
        out.push_str(&text[done..start]);
        out.push_str(mask);
        done = range.end;
    }
    out.push_str(&text[done..]);
    Cow::Owned(out)
}

/// Whether a shape can start with this byte: the first bytes of [`PREFIXED`], a Telegram
/// bot id, a hex digit, `-----BEGIN`, `eyJ`, `Bearer`/`Basic`. Most positions of most strings
/// fail here.
fn may_start(b: u8) -> bool {
    matches!(
        b,
        b's' | b'r' | b'x' | b'g' | b'A' | b'h' | b'n' | b'-' | b'e' | b'B' | b'b' | b'0'
            ..=b'9' | b'a' | b'c' | b'd' | b'f'
    )
}

fn run(bytes: &[u8], class: fn(u8) -> bool) -> usize {
    bytes.iter().take_while(|b| class(**b)).count()
}

fn prefixed(rest: &[u8]) -> Option<(Found, usize)> {
    PREFIXED.iter().find_map(|p| {
        let body = rest.strip_prefix(p.prefix.as_bytes())?;
        let n = run(body, p.body);
        let body = &body[..n];
        let mixed = body.iter().any(u8::is_ascii_digit) && body.iter().any(u8::is_ascii_alphabetic);
        (n >= p.min && n <= p.max && (!p.mixed || mixed)).then_some((p.found, p.prefix.len() + n))
    })
}

/// `<bot id>:<35 characters>`, as BotFather hands them out.
fn telegram(rest: &[u8]) -> Option<(Found, usize)> {
    let digits = run(rest, |b| b.is_ascii_digit());
    if !(6..=12).contains(&digits) || rest.get(digits) != Some(&b':') {
        return None;
    }
    let secret = &rest[digits + 1..];
    let n = run(secret, base64url);
    let letters = secret[..n].iter().any(u8::is_ascii_alphabetic);
    (n >= 30 && letters).then_some((
        Found::credential("a Telegram bot token (`<bot id>:<secret>`)"),
        digits + 1 + n,
    ))
}

/// `-----BEGIN … PRIVATE KEY-----`, through its `-----END … PRIVATE KEY-----` (to the end of
/// the text when that was cut off): the key is the block.
fn private_key(rest: &[u8]) -> Option<(Found, usize)> {
    let label = rest.strip_prefix(b"-----BEGIN ")?;
    let end = label.windows(5).position(|w| w == b"-----")?;
    if !label[..end].ends_with(b"PRIVATE KEY") {
        return None;
    }
    let body = b"-----BEGIN ".len() + end + 5;
    let len = rest[body..]
        .windows(9)
        .position(|w| w == b"-----END ")
        .and_then(|at| {
            let after = body + at + 9;
            let close = rest[after..].windows(5).position(|w| w == b"-----")?;
            Some(after + close + 5)
        })
        .unwrap_or(rest.len());
    Some((
        Found::credential("a private key (`-----BEGIN … PRIVATE KEY-----`)"),
        len,
    ))
}

/// deepcli's operator token as it makes one (`state/token.rs`): two version-4 UUIDs written
/// without dashes, 64 lowercase hex digits. A SHA-256 digest, also 64 hex digits, has those
/// version and variant digits by chance once in 4,096.
fn operator_token(rest: &[u8]) -> Option<(Found, usize)> {
    if run(rest, alnum_under) != 64 || !rest[..64].iter().all(|b| lower_hex(*b)) {
        return None;
    }
    let uuid = |at: usize| rest[at + 12] == b'4' && b"89ab".contains(&rest[at + 16]);
    (uuid(0) && uuid(32)).then_some((
        Found::credential("a deepcli operator token (64 hex digits)"),
        64,
    ))
}

/// A JSON Web Token: `eyJ<header>.eyJ<payload>.<signature>`.
fn jwt(rest: &[u8]) -> Option<(Found, Range<usize>)> {
    if !rest.starts_with(b"eyJ") {
        return None;
    }
    let header = run(rest, base64url);
    if header < 10 || rest.get(header) != Some(&b'.') {
        return None;
    }
    let payload = &rest[header + 1..];
    let n = run(payload, base64url);
    if !(payload.starts_with(b"eyJ") && n >= 10 && payload.get(n) == Some(&b'.')) {
        return None;
    }
    let signature = run(&payload[n + 1..], base64url);
    Some((
        Found::possible("a JSON Web Token (`eyJ….eyJ….…`)"),
        0..header + 1 + n + 1 + signature,
    ))
}

/// `Bearer <token>` or `Basic <credentials>`, an `Authorization` header's value (the value
/// is the secret).
fn authorization(rest: &[u8]) -> Option<(Found, Range<usize>)> {
    let scheme = ["Bearer ", "bearer ", "Basic ", "basic "]
        .iter()
        .find(|scheme| rest.starts_with(scheme.as_bytes()))?;
    let value = &rest[scheme.len()..];
    let n = run(value, |b| {
        b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
    });
    (n >= 16).then_some((
        Found::possible("an `Authorization` header value (`Bearer …`)"),
        scheme.len()..scheme.len() + n,
    ))
}

/// Words that stand for a value rather than being one: `${VAR}`, `$VAR`, `<password>`,
/// `{{password}}`, `%s`, `****`.
fn placeholder(text: &str) -> bool {
    text.starts_with(['$', '<', '{', '%']) || text.chars().all(|c| c == '*')
}

/// The credentials in `text`'s URLs, added to `out`: a password in a URL's userinfo, a webhook
/// URL's path (its credential), a credential-named query parameter's value.
fn urls(text: &str, out: &mut Vec<Span>) {
    if !text.contains("://") {
        return;
    }
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
            && let Some((user, password)) = userinfo.split_once(':')
            && !password.is_empty()
            && !placeholder(password)
        {
            let start = after + user.len() + 1;
            out.push(Span {
                range: start..start + password.len(),
                found: Found::credential("a URL with a password (`user:password@`)").in_url(),
            });
        }
        let path = &url[authority_end..];
        let host = authority.rsplit('@').next().unwrap_or(authority);
        if (host == "hooks.slack.com" && path.starts_with("/services/") && path.len() > 30)
            || (matches!(host, "discord.com" | "discordapp.com")
                && path.starts_with("/api/webhooks/")
                && path.len() > 40)
        {
            out.push(Span {
                range: after + authority_end..end,
                found: Found::credential("a webhook URL, whose path is its credential").in_url(),
            });
            continue;
        }
        if let Some(q) = path.find('?') {
            let query_at = after + authority_end + q + 1;
            let query = &path[q + 1..];
            let query = query.split('#').next().unwrap_or_default();
            let mut pair_at = query_at;
            for pair in query.split('&') {
                if let Some((name, value)) = pair.split_once('=')
                    && QUERY_CREDENTIALS.contains(&name.to_ascii_lowercase().as_str())
                    && !value.is_empty()
                    && !placeholder(value)
                {
                    let start = pair_at + name.len() + 1;
                    out.push(Span {
                        range: start..start + value.len(),
                        found: Found::possible("a URL with a credential in its query (`token=…`)")
                            .in_url(),
                    });
                }
                pair_at += pair.len() + 1;
            }
        }
    }
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
            "dch_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "0123456789ab4def8123456789abcdef0123456789ab4defa123456789abcdef",
        ] {
            assert_eq!(
                what(text).map(|w| w.0),
                Some(Certainty::Credential),
                "{text}"
            );
        }
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
            "commit a87cc43e1f0b9d2c7a6e5f4d3c2b1a0f9e8d7c6b",
            "dch_0123456789abcdef",
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

    fn masked(text: &str) -> String {
        redact(text, &[], "[x]").into_owned()
    }

    #[test]
    fn redaction_masks_the_secret_part_and_keeps_the_rest() {
        // A bearer value that is also an API key: masked once.
        assert_eq!(
            masked("Authorization: Bearer sk-proj-EXAMPLE0example0EXAMPLE0example0 (sent)"),
            "Authorization: Bearer [x] (sent)"
        );
        // A key block whose end was cut off: masked to the end.
        assert_eq!(
            masked("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow"),
            "key:\n[x]"
        );
        assert_eq!(
            masked("a -----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY----- b"),
            "a [x] b"
        );
        // Each credential of a query; a webhook's path.
        assert_eq!(
            masked("see https://x.example/a?size=1&token=EXAMPLE0example0&key=abc#f é"),
            "see https://x.example/a?size=1&token=[x]&key=[x]#f é"
        );
        assert_eq!(
            masked("post to https://hooks.slack.com/services/T0EXAMPLE/B0EXAMPLE/EXAMPLE0example0"),
            "post to https://hooks.slack.com[x]"
        );
        // Exact values, and nothing at all.
        assert_eq!(
            redact("pw hunter2 and hunter2", &["hunter2", ""], "[x]"),
            "pw [x] and [x]"
        );
        let plain = "nothing to see: sha256:5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        assert!(matches!(redact(plain, &[], "[x]"), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        /// Redaction keeps every byte that is in no span and never cuts a character.
        #[test]
        fn redaction_never_panics_and_masks_whole_spans(
            text in "(sk-proj-|dch_|ghp_|://u:|@h/|\\?token=|&|eyJ|\\.|Bearer |-----BEGIN |PRIVATE KEY-----|-----END |[0-9]{6,9}:|[a-f0-9]{8,64}|[a-zA-Z0-9_-]{1,40}|é|💥| ){0,24}"
        ) {
            let out = redact(&text, &["💥é"], "[x]");
            if spans(&text).is_empty() && !text.contains("💥é") {
                proptest::prop_assert_eq!(out.as_ref(), text.as_str());
            }
        }
    }
}
