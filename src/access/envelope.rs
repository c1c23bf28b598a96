//! The envelope (access.md, "Envelope"): `POST /v1/inbound`'s body, parsed once and checked
//! field by field, every unknown and missing field named in one refusal.

use serde::Deserialize;
use serde_json::Value;

use super::AccessError;
use crate::routing::{RouteInput, input};

/// `POST /v1/inbound`'s body (access.md, "Envelope"): the route input's fields (as
/// `deepcli route --batch` reads them) plus the message's own.
#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    pub route: RouteInput,
    pub thread_id: Option<String>,
    pub message_id: String,
    pub sender: Option<Value>,
    pub text: String,
    /// What the inbound policy reads: sender id, `isBot`, `mentions`, `replyToSenderId`.
    pub facts: EnvelopeFacts,
}

/// The fields an envelope has beyond the route input.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageFields {
    #[serde(default, deserialize_with = "input::optional_string_or_integer")]
    thread_id: Option<String>,
    #[serde(deserialize_with = "input::string_or_integer")]
    message_id: String,
    #[serde(default)]
    sender: Option<Value>,
    text: String,
    #[serde(default)]
    mentions: Option<Value>,
    #[serde(default)]
    reply_to_sender_id: Option<Value>,
}

const MESSAGE_FIELDS: [&str; 6] = [
    "threadId",
    "messageId",
    "sender",
    "text",
    "mentions",
    "replyToSenderId",
];

/// Parses an envelope; a 400 names the field that is wrong. Unknown fields are refused (a typo
/// does not pass silently) and reported together with the missing ones, each unknown one with
/// the field it was probably meant to be.
pub(crate) fn parse_envelope(body: &[u8]) -> Result<Envelope, AccessError> {
    let refuse = |e: serde_json::Error| {
        let message = e.to_string();
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m)
            .to_string();
        let field = message
            .split('`')
            .nth(1)
            .filter(|_| message.contains("field"))
            .map(str::to_string);
        AccessError::BadEnvelope { message, field }
    };
    let mut fields: serde_json::Map<String, Value> =
        serde_json::from_slice(body).map_err(refuse)?;
    check_field_names(&fields)?;
    let own: serde_json::Map<String, Value> = MESSAGE_FIELDS
        .iter()
        .filter_map(|k| Some((k.to_string(), fields.remove(*k)?)))
        .collect();
    let message = MessageFields::deserialize(Value::Object(own)).map_err(refuse)?;
    let facts = facts(
        message.sender.as_ref(),
        message.mentions.as_ref(),
        message.reply_to_sender_id.as_ref(),
    )?;
    let route = RouteInput::deserialize(Value::Object(fields)).map_err(refuse)?;
    for (field, value) in [
        ("channel", &route.channel),
        ("messageId", &message.message_id),
    ] {
        if value.trim().is_empty() {
            return Err(AccessError::bad_field(field, format!("`{field}` is empty")));
        }
    }
    Ok(Envelope {
        route,
        thread_id: message.thread_id,
        message_id: message.message_id,
        sender: message.sender,
        text: message.text,
        facts,
    })
}

/// Every unknown and every missing field of an envelope, in one refusal.
fn check_field_names(fields: &serde_json::Map<String, Value>) -> Result<(), AccessError> {
    const REQUIRED: [&str; 3] = ["channel", "messageId", "text"];
    let known = || {
        input::ROUTE_INPUT_FIELDS
            .iter()
            .chain(&MESSAGE_FIELDS)
            .copied()
    };
    let mut problems = Vec::new();
    let mut first = None;
    for name in fields.keys().filter(|k| !known().any(|f| f == k.as_str())) {
        // Only a field the envelope lacks can be what a typo meant.
        let meant = crate::suggest::closest(name, known().filter(|f| !fields.contains_key(*f)));
        problems.push(match meant {
            Some(meant) => format!("unknown field `{name}` (did you mean `{meant}`?)"),
            None => format!("unknown field `{name}`"),
        });
        first.get_or_insert_with(|| name.clone());
    }
    for name in REQUIRED.iter().filter(|f| !fields.contains_key(**f)) {
        problems.push(format!("missing field `{name}`"));
        first.get_or_insert_with(|| name.to_string());
    }
    if problems.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = known().map(|f| format!("`{f}`")).collect();
    Err(AccessError::BadEnvelope {
        message: format!(
            "{}; an envelope's fields are {}",
            problems.join("; "),
            all.join(", ")
        ),
        field: first,
    })
}

/// At most this many ids in `mentions`.
pub(super) const MAX_MENTIONS: usize = 1000;

/// What an envelope says about its sender and mentions, checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvelopeFacts {
    pub sender_id: Option<String>,
    pub sender_name: Option<String>,
    pub is_bot: bool,
    pub mentions: Vec<String>,
    pub reply_to_sender_id: Option<String>,
}

/// Reads the policy fields of an envelope: `sender` (an object: `id` a string or an integer,
/// `isBot` a boolean, `name` and anything else kept as given), `mentions` (ids, at most
/// [`MAX_MENTIONS`]) and `replyToSenderId`. A field of the wrong shape is a 400 naming it.
fn facts(
    sender: Option<&Value>,
    mentions: Option<&Value>,
    reply_to: Option<&Value>,
) -> Result<EnvelopeFacts, AccessError> {
    let mut out = EnvelopeFacts::default();
    match sender {
        None | Some(Value::Null) => {}
        Some(Value::Object(s)) => {
            out.sender_id = id_text(s.get("id"), "sender.id")?;
            out.sender_name = s.get("name").and_then(Value::as_str).map(str::to_string);
            out.is_bot = match s.get("isBot") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    return Err(AccessError::bad_field(
                        "sender.isBot",
                        format!("`sender.isBot` must be true or false, not {other}"),
                    ));
                }
            };
        }
        Some(other) => {
            return Err(AccessError::bad_field(
                "sender",
                format!(
                    "`sender` must be an object like {{\"id\": \"u-7\", \"name\": \"Ada\", \"isBot\": false}}, not {}",
                    shape(other)
                ),
            ));
        }
    }
    match mentions {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            if items.len() > MAX_MENTIONS {
                return Err(AccessError::bad_field(
                    "mentions",
                    format!(
                        "`mentions` lists {} ids; at most {MAX_MENTIONS} are taken",
                        items.len()
                    ),
                ));
            }
            for (i, item) in items.iter().enumerate() {
                match id_text(Some(item), "mentions")? {
                    Some(id) => out.mentions.push(id),
                    None => {
                        return Err(AccessError::bad_field(
                            "mentions",
                            format!("`mentions[{i}]` is null: list the mentioned user ids"),
                        ));
                    }
                }
            }
        }
        Some(other) => {
            return Err(AccessError::bad_field(
                "mentions",
                format!(
                    "`mentions` must be a list of user ids, like [\"U123\"], not {}",
                    shape(other)
                ),
            ));
        }
    }
    out.reply_to_sender_id = id_text(reply_to, "replyToSenderId")?;
    Ok(out)
}

/// An id: a non-empty string, or an integer kept as its exact decimal text.
fn id_text(value: Option<&Value>, field: &str) -> Result<Option<String>, AccessError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(n.to_string())),
        Some(other) => Err(AccessError::bad_field(
            field.split('[').next().unwrap_or(field),
            format!(
                "`{field}` must be a non-empty string or an integer, not {}",
                shape(other)
            ),
        )),
    }
}

fn shape(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(s) if s.trim().is_empty() => "an empty string",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policy_fields_of_the_wrong_shape_are_refused_by_name() {
        let field = |r: Result<EnvelopeFacts, AccessError>| match r {
            Err(AccessError::BadEnvelope { field, message }) => {
                (field.unwrap_or_default(), message)
            }
            other => panic!("{other:?}"),
        };
        let (f, m) = field(facts(Some(&json!("u-7")), None, None));
        assert_eq!(f, "sender");
        assert!(m.contains("must be an object"), "{m}");
        let (f, _) = field(facts(Some(&json!({"id": ["x"]})), None, None));
        assert_eq!(f, "sender.id");
        let (f, _) = field(facts(Some(&json!({"id": "u", "isBot": "yes"})), None, None));
        assert_eq!(f, "sender.isBot");
        let (f, m) = field(facts(None, Some(&json!("U1")), None));
        assert_eq!(f, "mentions");
        assert!(m.contains("a list of user ids"), "{m}");
        let (f, m) = field(facts(None, Some(&json!(["U1", {"id": 2}])), None));
        assert_eq!(f, "mentions");
        assert!(m.contains("`mentions`"), "{m}");
        let (f, _) = field(facts(None, Some(&json!(["U1", ""])), None));
        assert_eq!(f, "mentions");
        let (f, _) = field(facts(None, Some(&json!([null])), None));
        assert_eq!(f, "mentions");
        let many: Vec<String> = (0..=MAX_MENTIONS).map(|i| format!("U{i}")).collect();
        let (f, m) = field(facts(None, Some(&json!(many)), None));
        assert_eq!(f, "mentions");
        assert!(m.contains("at most 1000"), "{m}");
        let (f, _) = field(facts(None, None, Some(&json!(1.5))));
        assert_eq!(f, "replyToSenderId");
        let ok = facts(
            Some(&json!({"id": 42, "name": "Ada", "isBot": true, "extra": 1})),
            Some(&json!(["U1", 7])),
            Some(&json!("B1")),
        )
        .unwrap();
        assert_eq!(ok.sender_id.as_deref(), Some("42"));
        assert!(ok.is_bot);
        assert_eq!(ok.mentions, ["U1", "7"]);
        assert_eq!(ok.reply_to_sender_id.as_deref(), Some("B1"));
    }
}
