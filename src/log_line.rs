//! Text that goes into a log line. One event is one line, so every field is escaped: a caller's
//! channel name, an error that quotes the body, or an agent id cannot start a line of its own
//! (a forged entry) or drive the terminal that shows the log.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with backslashes, control characters (C0, DEL, C1) and the Unicode line and paragraph
/// separators escaped: `\\`, `\n`, `\r`, `\t`, `\u{1b}`. Borrowed when there is nothing to
/// escape.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// The field formatter of the human log format: tracing-subscriber's default writes a field's
/// text as it is (it escapes ANSI sequences, not line breaks), so each value goes through
/// [`escape`].
pub(crate) fn fields()
-> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        match field.name() {
            "message" => write!(writer, "{}", escape(&text)),
            name => write!(writer, "{name}={}", escape(&text)),
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn a_forged_line_stays_on_its_line() {
        let forged = "x\n2026-12-01T00:00:00Z 200 account=admin\r\u{1b}[2J\u{2028}";
        let escaped = escape(forged);
        assert!(
            !escaped.contains(['\n', '\r', '\u{1b}', '\u{2028}']),
            "{escaped}"
        );
        assert_eq!(
            escaped,
            "x\\n2026-12-01T00:00:00Z 200 account=admin\\r\\u{1b}[2J\\u{2028}"
        );
        assert_eq!(
            escape("a\\nb"),
            "a\\\\nb",
            "a literal backslash-n is not a newline"
        );
        assert!(matches!(escape("plain é"), std::borrow::Cow::Borrowed(_)));
    }
}
