//! `openclaw.json` as read: JSON5 text → [`Value`], a small tree that keeps object keys in file
//! order and refuses what OpenClaw would read differently than it looks.
//!
//! The grammar is the `json5` crate's (pinned). Around it: a size limit checked before parsing,
//! a nesting limit checked by a scan before the recursive parser can run out of stack, and
//! duplicate keys refused (JSON5 lets the last one win silently; a migration must not guess
//! which one the operator meant).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// The largest `openclaw.json` import reads (the same bound as a deepcli config file).
pub const MAX_BYTES: u64 = crate::config::MAX_FILE_BYTES;

/// How deeply objects and arrays may nest. OpenClaw's own configs stay under 12.
pub const MAX_DEPTH: usize = 64;

/// A JSON5 value. Numbers keep what JavaScript would see: a double, except that integers the
/// parser read exactly stay integers so ids print without a fraction.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn entries(&self) -> &[(String, Value)] {
        match self {
            Value::Object(entries) => entries,
            _ => &[],
        }
    }

    pub fn items(&self) -> &[Value] {
        match self {
            Value::Array(items) => items,
            _ => &[],
        }
    }

    /// A string, or a number as JavaScript's `String(n)` writes it (ids are often numbers in
    /// hand-written configs; OpenClaw turns them into strings that way).
    pub fn as_id(&self) -> Option<String> {
        match self {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) if i.unsigned_abs() <= MAX_SAFE_INTEGER => Some(i.to_string()),
            Value::Int(i) => Some(js_number(*i as f64)),
            Value::Float(f) => Some(js_number(*f)),
            _ => None,
        }
    }

    /// What kind of value this is, for reports that must not show the value itself.
    pub fn shape(&self) -> String {
        match self {
            Value::Null => "null".into(),
            Value::Bool(_) => "boolean".into(),
            Value::Int(_) | Value::Float(_) => "number".into(),
            Value::Str(_) => "string".into(),
            Value::Array(items) => {
                format!(
                    "array of {}",
                    crate::plural::plural(items.len(), "item", "items")
                )
            }
            Value::Object(entries) => {
                let keys: Vec<&str> = entries.iter().take(4).map(|(k, _)| k.as_str()).collect();
                let more = if entries.len() > 4 { ", …" } else { "" };
                format!("object {{{}{more}}}", keys.join(", "))
            }
        }
    }

    /// From JSON (an export, read back as OpenClaw reads it).
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => n
                .as_i64()
                .map(Value::Int)
                .unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN))),
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Value::Array(items.iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// To JSON (for the JSON-RPC answer and tests); non-finite numbers become null.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
            }
            Value::Str(s) => s.clone().into(),
            Value::Array(items) => items.iter().map(Value::to_json).collect(),
            Value::Object(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// 2^53 − 1: the largest integer a JavaScript number holds exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// `String(n)` for the numbers configs hold (JavaScript switches to exponents only past 1e21).
fn js_number(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{f:.0}")
    } else {
        f.to_string()
    }
}

/// Why a text is not an `openclaw.json` import can read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Json5Error {
    #[error("the file is {size} bytes; import reads at most {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("the file is not UTF-8 text")]
    NotUtf8,
    #[error("objects and arrays nest deeper than {limit} levels (line {line})")]
    TooDeep { limit: usize, line: usize },
    #[error("not JSON5{}: {message}", at(*line, *column))]
    Syntax {
        message: String,
        line: Option<usize>,
        column: Option<usize>,
    },
    #[error("the top level is {shape}, not an object")]
    NotAnObject { shape: String },
}

fn at(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

/// Parses `openclaw.json` bytes.
pub fn parse_bytes(bytes: &[u8]) -> Result<Value, Json5Error> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Json5Error::TooLarge {
            size: bytes.len() as u64,
            limit: MAX_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Json5Error::NotUtf8)?;
    parse(text)
}

/// Parses JSON5 text whose top level must be an object.
pub fn parse(text: &str) -> Result<Value, Json5Error> {
    if text.len() as u64 > MAX_BYTES {
        return Err(Json5Error::TooLarge {
            size: text.len() as u64,
            limit: MAX_BYTES,
        });
    }
    // JSON5 text may start with a byte order mark; the parser does not skip it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    check_depth(text)?;
    let value: Value = json5::from_str(text).map_err(|e| syntax_error(text, &e))?;
    match value {
        Value::Object(_) => Ok(value),
        other => Err(Json5Error::NotAnObject {
            shape: other.shape(),
        }),
    }
}

/// A parser error where the problem is. The parser places an error that met the end of the
/// text at the start of the value it was reading (an unclosed object at its `{`, which may be
/// the first line): the problem is where the text ends, so that is the position, and the
/// message says where the unclosed value began.
fn syntax_error(text: &str, e: &json5::Error) -> Json5Error {
    use json5::ErrorCode;
    let position = e.position();
    let unclosed = match e.code() {
        Some(ErrorCode::EofParsingObject) => Some("an object"),
        Some(ErrorCode::EofParsingArray) => Some("an array"),
        Some(ErrorCode::EofParsingString) => Some("a string"),
        Some(ErrorCode::EofParsingComment) => Some("a comment"),
        Some(ErrorCode::EofParsingEscapeSequence) => Some("an escape sequence"),
        Some(
            ErrorCode::EofParsingBool
            | ErrorCode::EofParsingIdentifier
            | ErrorCode::EofParsingNull
            | ErrorCode::EofParsingNumber
            | ErrorCode::EofParsingValue,
        ) => Some("a value"),
        _ => None,
    };
    let (message, position) = match unclosed {
        Some(what) => {
            let opened = position
                .map(|p| {
                    format!(
                        " (it opened at line {}, column {})",
                        p.line + 1,
                        p.column + 1
                    )
                })
                .unwrap_or_default();
            // Just past the last character that is not white space: where the value should
            // have been closed.
            let end = json5::Position::from_offset(text.trim_end().len(), text);
            (format!("the text ends inside {what}{opened}"), Some(end))
        }
        None => (
            match position {
                Some(p) => e.to_string().replace(&format!(" at {p}"), ""),
                None => e.to_string(),
            },
            position,
        ),
    };
    Json5Error::Syntax {
        message,
        line: position.map(|p| p.line + 1),
        column: position.map(|p| p.column + 1),
    }
}

/// Counts bracket nesting outside strings and comments, so the recursive parser never meets a
/// text that would exhaust the stack. Anything odd (an unclosed string) is left to the parser.
fn check_depth(text: &str) -> Result<(), Json5Error> {
    let bytes = text.as_bytes();
    let (mut depth, mut line, mut i) = (0usize, 1usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => line += 1,
            b'"' | b'\'' => {
                let quote = bytes[i];
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    if i < bytes.len() && bytes[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    if bytes[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(Json5Error::TooDeep {
                        limit: MAX_DEPTH,
                        line,
                    });
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON5 value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries: Vec<(String, Value)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key `{key}` (JSON5 keeps the last one silently; remove one of them)"
                )));
            }
            let value = map.next_value()?;
            entries.push((key, value));
        }
        Ok(Value::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_comments_trailing_commas_and_unquoted_keys() {
        let v = parse("// top\n{a: 1, /* x */ 'b': [true, null,], c: 'x',}").unwrap();
        assert_eq!(v.get("a"), Some(&Value::Int(1)));
        assert_eq!(v.get("b").unwrap().items().len(), 2);
        assert_eq!(v.get("c").unwrap().as_str(), Some("x"));
    }

    #[test]
    fn duplicate_keys_are_refused_with_a_position() {
        let e = parse("{\n  a: 1,\n  b: {c: 1, c: 2},\n}").unwrap_err();
        match e {
            Json5Error::Syntax { message, line, .. } => {
                assert!(message.contains("duplicate key `c`"), "{message}");
                assert_eq!(line, Some(3));
            }
            other => panic!("{other:?}"),
        }
    }

    /// first-hour.md 6.5: an unclosed object was reported at its `{` (line 1, column 11); the
    /// problem is where the text ends.
    #[test]
    fn an_unclosed_object_is_reported_where_the_text_ends() {
        let e = parse("{\"agents\": {\"list\": [{\"id\": \"main\"}],\n  \"bindings\": []\n\n")
            .unwrap_err();
        let Json5Error::Syntax {
            message,
            line,
            column,
        } = e
        else {
            panic!("{e:?}");
        };
        assert_eq!((line, column), (Some(2), Some(17)), "{message}");
        assert_eq!(
            message,
            "the text ends inside an object (it opened at line 1, column 12)"
        );
        let e = parse("{a: [1, 2").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("not JSON5 (line 1, column 10): the text ends inside an array"),
            "{e}"
        );
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        let text = format!("{{a: {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(parse(&text), Err(Json5Error::TooDeep { .. })));
        // Brackets in strings and comments do not count.
        let text = format!("{{a: '{}', // {}\n}}", "[".repeat(100), "{".repeat(100));
        assert!(parse(&text).is_ok());
    }

    #[test]
    fn numbers_become_ids_as_javascript_prints_them() {
        let v = parse("{a: 123456789012345678, b: 42, c: 1.5, d: 0x10}").unwrap();
        assert_eq!(v.get("a").unwrap().as_id().unwrap(), "123456789012345680");
        assert_eq!(v.get("b").unwrap().as_id().unwrap(), "42");
        assert_eq!(v.get("c").unwrap().as_id().unwrap(), "1.5");
        assert_eq!(v.get("d").unwrap().as_id().unwrap(), "16");
    }
}
