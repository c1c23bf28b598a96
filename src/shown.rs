//! Text from config files and the state (ids, names, messages that quote them) as it is shown
//! to a person. A control character in an id — a carriage return, a newline, an escape — would
//! otherwise move the cursor or start a line of its own, and forge a line of a plan a reviewer
//! reads. Every human renderer passes such text through [`shown`]; JSON output is exact.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with control characters (C0, DEL, C1) and the Unicode line and paragraph separators
/// escaped: `\n`, `\r`, `\t`, `\u{1b}`. Borrowed when there is none.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Text of many lines (a transcript message, a system section) as shown: its line breaks
/// kept, every other control character escaped as [`shown`] does.
pub(crate) fn shown_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| shown(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A character [`shown`] escapes.
pub(crate) fn is_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_lines_keep_their_breaks_and_nothing_else() {
        assert_eq!(
            shown_lines("one\ntwo \u{1b}[2J\r"),
            "one\ntwo \\u{1b}[2J\\r"
        );
    }

    #[test]
    fn a_control_character_in_an_id_cannot_start_or_overwrite_a_line() {
        let forged = "group:g2\r  ~ routing plan\n- agentId: ws2 \u{1b}[1A\u{1b}[2K\u{2028}";
        let out = shown(forged);
        assert!(!out.contains(['\n', '\r', '\u{1b}', '\u{2028}']), "{out}");
        assert_eq!(
            out,
            "group:g2\\r  ~ routing plan\\n- agentId: ws2 \\u{1b}[1A\\u{1b}[2K\\u{2028}"
        );
        assert!(matches!(shown("ünïcode-ok"), Cow::Borrowed(_)));
    }
}
