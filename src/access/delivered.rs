//! What came of an envelope the door took: the response as recorded with its delivery (what
//! every redelivery is answered with, `duplicate: true`), and a typed reading of it made once.
//! The HTTP status is chosen from [`Delivery`] in `http.rs`; a platform adapter decides what to
//! post from it. Nothing outside this file looks into the response's JSON.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// What came of a delivery, as far as a caller acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// The agent answered (or an approval command was answered): `text` is the reply.
    Answered { text: String },
    /// The inbound policy held the message (policy.md); some gates answer it (a pairing code).
    /// Answered all the same: a platform must not hand it in again.
    Gated {
        reason: String,
        rule: Option<String>,
        reply: Option<String>,
    },
    /// Taken with no reply: nothing here prompts the agent (the route is the answer), or its
    /// turn's outcome is not known (`state: uncertain`).
    NotDelivered,
}

/// The names a delivery's one log line gives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RouteNames {
    #[serde(default, deserialize_with = "lenient")]
    pub channel: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub account_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub agent_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub matched_by: Option<String>,
}

/// A delivery's response: written as recorded, read once into [`Delivery`].
#[derive(Debug, Clone)]
pub(crate) struct Delivered {
    pub delivery: Delivery,
    /// A redelivery (or one that raced the first): answered with the first one's response.
    pub duplicate: bool,
    pub session_key: Option<String>,
    pub route: RouteNames,
    /// The response body, exactly as recorded.
    body: Box<RawValue>,
}

impl Serialize for Delivered {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.body.serialize(s)
    }
}

impl Delivered {
    /// The recorded response as JSON text.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        self.body.get()
    }

    /// The delivery whose response is `recorded` (JSON text, as the deliveries table keeps it).
    /// Text that is not JSON reads as an empty answer, as it always has.
    pub(crate) fn recorded(recorded: String) -> Delivered {
        let body = RawValue::from_string(recorded)
            .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"));
        let view: View = serde_json::from_str(body.get()).unwrap_or_default();
        let reply = view.reply.and_then(|r| r.text);
        let delivery = match view.gated {
            Some(gated) => Delivery::Gated {
                reason: gated.reason.unwrap_or_default(),
                rule: gated.rule,
                reply,
            },
            None => match reply {
                Some(text) => Delivery::Answered { text },
                None => Delivery::NotDelivered,
            },
        };
        Delivered {
            delivery,
            duplicate: view.duplicate == Some(true),
            session_key: view.session_key,
            route: view.route.unwrap_or_default(),
            body,
        }
    }

    /// The same response given to a redelivery: `duplicate: true`, everything else as it was.
    pub(crate) fn as_duplicate(&self) -> Delivered {
        let mut body: serde_json::Value = serde_json::from_str(self.body.get()).unwrap_or_default();
        body["duplicate"] = true.into();
        Delivered::recorded(body.to_string())
    }

    /// The reply text, if the response carries one (a duplicate's too).
    pub(crate) fn reply(&self) -> Option<&str> {
        match &self.delivery {
            Delivery::Answered { text } => Some(text),
            Delivery::Gated { reply, .. } => reply.as_deref(),
            Delivery::NotDelivered => None,
        }
    }
}

/// The fields of a response that decide what a caller does; any other shape reads as absent.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct View {
    #[serde(default, deserialize_with = "lenient")]
    route: Option<RouteNames>,
    #[serde(default, deserialize_with = "lenient")]
    session_key: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    reply: Option<ReplyView>,
    #[serde(default, deserialize_with = "lenient")]
    duplicate: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    gated: Option<GatedView>,
}

#[derive(Deserialize)]
struct ReplyView {
    #[serde(default, deserialize_with = "lenient")]
    text: Option<String>,
}

#[derive(Deserialize)]
struct GatedView {
    #[serde(default, deserialize_with = "lenient")]
    reason: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    rule: Option<String>,
}

/// A field of another shape than the one expected reads as absent, and never fails the
/// response around it.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: serde_json::Value) -> Delivered {
        Delivered::recorded(body.to_string())
    }

    #[test]
    fn a_response_is_read_once_into_what_came_of_it() {
        let answered = read(json!({
            "route": {"agentId": "a", "channel": "slack", "accountId": "w", "matchedBy": "default"},
            "sessionKey": "agent:a:main", "reply": {"text": "hi"}, "duplicate": false,
        }));
        assert_eq!(answered.delivery, Delivery::Answered { text: "hi".into() });
        assert!(!answered.duplicate);
        assert_eq!(answered.session_key.as_deref(), Some("agent:a:main"));
        assert_eq!(answered.route.channel.as_deref(), Some("slack"));
        assert_eq!(answered.route.matched_by.as_deref(), Some("default"));

        let gated = read(json!({
            "delivered": false, "gated": {"reason": "pairing-required", "rule": "dmPolicy"},
            "reply": {"text": "code 1234"}, "duplicate": false,
        }));
        assert_eq!(
            gated.delivery,
            Delivery::Gated {
                reason: "pairing-required".into(),
                rule: Some("dmPolicy".into()),
                reply: Some("code 1234".into())
            }
        );
        assert_eq!(gated.reply(), Some("code 1234"));
        let quiet = read(json!({"gated": {"reason": "mention"}, "reply": null}));
        assert!(matches!(
            quiet.delivery,
            Delivery::Gated { reply: None, .. }
        ));

        let note =
            read(json!({"reply": null, "duplicate": false, "delivered": false, "note": "x"}));
        assert_eq!(note.delivery, Delivery::NotDelivered);
        // A reply without text, a gate that is not an object: nothing to act on.
        assert_eq!(
            read(json!({"reply": {"text": 5}})).delivery,
            Delivery::NotDelivered
        );
        assert_eq!(
            read(json!({"gated": true})).delivery,
            Delivery::NotDelivered
        );
        assert_eq!(read(json!([1])).delivery, Delivery::NotDelivered);
    }

    #[test]
    fn a_duplicate_is_the_recorded_response_marked_so_byte_for_byte() {
        let first = read(
            json!({"route": {"agentId": "a"}, "reply": {"text": "hi"}, "duplicate": false, "z": 1.5}),
        );
        let again = first.as_duplicate();
        assert!(again.duplicate);
        assert_eq!(again.reply(), Some("hi"));
        assert_eq!(
            again.text(),
            r#"{"route":{"agentId":"a"},"reply":{"text":"hi"},"duplicate":true,"z":1.5}"#
        );
        assert_eq!(serde_json::to_string(&again).unwrap(), again.text());
        // A record that is not JSON answers as it always did.
        assert_eq!(
            Delivered::recorded("not json".into()).as_duplicate().text(),
            r#"{"duplicate":true}"#
        );
    }
}
