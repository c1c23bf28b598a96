//! JSON-RPC 2.0 framing, transport-free: one body read once into its calls (a request or a
//! batch), each call answered by whoever the caller hands it to, the answers put back together
//! (a batch as an array, in order; a notification — no `id` — runs and gets no answer). What a
//! method means is not this module's business: the operator's areas (management, the Hub,
//! approvals) parse their own typed requests and map their own errors to an [`Error`].

use std::future::Future;

use serde_json::{Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;

/// The method prefix of the operator's methods (management.md).
pub const PREFIX: &str = "_mustang.agent/";

/// One call of a body: its id (none for a notification), method and params (an object; `{}`
/// when the request has none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    pub id: Option<Value>,
    pub method: String,
    pub params: Value,
}

/// A JSON-RPC error: its code, message and optional `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Error {
    pub fn new(code: i64, message: impl Into<String>) -> Error {
        Error {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Error {
        self.data = Some(data);
        self
    }

    /// `method` is not one of `methods` (which the error's `data` lists).
    pub fn method_not_found(method: &str, methods: &[&str]) -> Error {
        Error::new(METHOD_NOT_FOUND, format!("method not found: `{method}`"))
            .with_data(json!({ "methods": methods }))
    }

    pub fn internal(why: impl std::fmt::Display) -> Error {
        Error::new(INTERNAL_ERROR, format!("internal error: {why}"))
    }

    /// The `error` member of an answer.
    pub fn to_object(&self) -> Value {
        let mut err = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            err["data"] = data.clone();
        }
        err
    }

    /// Reads an answer's `error` member back.
    pub fn from_object(error: &Value) -> Error {
        Error {
            code: error["code"].as_i64().unwrap_or(INTERNAL_ERROR),
            message: error["message"]
                .as_str()
                .unwrap_or("the controller refused")
                .to_string(),
            data: error.get("data").cloned(),
        }
    }
}

/// One item of a body: a call to run, or already its answer (an invalid request; `None`: a
/// notification whose params are wrong, which is not answered).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    Call(Call),
    Answered(Option<Value>),
}

/// A body read once: its items, and whether they came as a batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Body {
    pub batch: bool,
    pub items: Vec<Item>,
}

/// Reads a body; `Err` is the whole answer (not JSON, an empty batch).
pub(crate) fn parse(body: &[u8]) -> Result<Body, Value> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| {
        answer_error(
            Value::Null,
            &Error::new(PARSE_ERROR, format!("parse error: {e}")),
        )
    })?;
    match parsed {
        Value::Array(items) if items.is_empty() => Err(answer_error(
            Value::Null,
            &Error::new(INVALID_REQUEST, "invalid request: an empty batch"),
        )),
        Value::Array(items) => Ok(Body {
            batch: true,
            items: items.into_iter().map(item).collect(),
        }),
        single => Ok(Body {
            batch: false,
            items: vec![item(single)],
        }),
    }
}

fn item(request: Value) -> Item {
    let invalid = |id: Value, message: &str| {
        Item::Answered(Some(answer_error(
            id,
            &Error::new(INVALID_REQUEST, message),
        )))
    };
    let Value::Object(mut obj) = request else {
        return invalid(Value::Null, "invalid request: not an object");
    };
    let id = obj.remove("id");
    let valid_id = matches!(
        id,
        None | Some(Value::Null | Value::Number(_) | Value::String(_))
    );
    let reply_id = id.clone().filter(|_| valid_id).unwrap_or(Value::Null);
    if obj.get("jsonrpc") != Some(&json!("2.0")) || !valid_id {
        return invalid(
            reply_id,
            "invalid request: needs \"jsonrpc\": \"2.0\" and a string or number id",
        );
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        return invalid(reply_id, "invalid request: no method");
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Item::Answered(id.map(|id| {
                answer_error(
                    id,
                    &Error::new(INVALID_PARAMS, "invalid params: params must be an object"),
                )
            }));
        }
    };
    Item::Call(Call { id, method, params })
}

fn answer_error(id: Value, error: &Error) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_object()})
}

/// The answer to a call with `id` (none for a notification: no answer).
pub(crate) fn answer(id: Option<Value>, outcome: Result<Value, Error>) -> Option<Value> {
    let id = id?;
    Some(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => answer_error(id, &e),
    })
}

impl Body {
    /// Puts the answers of this body's items back together: `None` when nothing is to be
    /// sent back (only notifications).
    fn assemble(batch: bool, answers: Vec<Option<Value>>) -> Option<Value> {
        let answers: Vec<Value> = answers.into_iter().flatten().collect();
        if batch {
            (!answers.is_empty()).then_some(Value::Array(answers))
        } else {
            answers.into_iter().next()
        }
    }
}

/// Answers a body, each call by `run`, in order. `None` when nothing is to be sent back.
pub(crate) fn handle(
    body: &[u8],
    mut run: impl FnMut(Call) -> Result<Value, Error>,
) -> Option<Value> {
    let body = match parse(body) {
        Ok(body) => body,
        Err(answer) => return Some(answer),
    };
    let answers = body
        .items
        .into_iter()
        .map(|item| match item {
            Item::Answered(answer) => answer,
            Item::Call(call) => {
                let id = call.id.clone();
                answer(id, run(call))
            }
        })
        .collect();
    Body::assemble(body.batch, answers)
}

/// [`handle`] with a `run` that awaits; the calls of a batch run one after the other.
pub(crate) async fn handle_async<F, Fut>(body: &[u8], mut run: F) -> Option<Value>
where
    F: FnMut(Call) -> Fut,
    Fut: Future<Output = Result<Value, Error>>,
{
    let body = match parse(body) {
        Ok(body) => body,
        Err(answer) => return Some(answer),
    };
    let mut answers = Vec::with_capacity(body.items.len());
    for item in body.items {
        answers.push(match item {
            Item::Answered(answer) => answer,
            Item::Call(call) => {
                let id = call.id.clone();
                answer(id, run(call).await)
            }
        });
    }
    Body::assemble(body.batch, answers)
}

/// A request for `method` (with the prefix) with `params`: what a client sends.
pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A single answer's error, or else its result (null when it has none).
pub(crate) fn outcome(answer: &Value) -> Result<Value, Error> {
    match answer.get("error") {
        Some(error) => Err(Error::from_object(error)),
        None => Ok(answer.get("result").cloned().unwrap_or(Value::Null)),
    }
}

/// Reads `params` into the type a method takes; an [`INVALID_PARAMS`]-kind message on failure.
pub(crate) fn params<T: serde::de::DeserializeOwned>(
    params: Value,
) -> Result<T, serde_json::Error> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(call: Call) -> Result<Value, Error> {
        match call.method.as_str() {
            "echo" => Ok(call.params),
            other => Err(Error::method_not_found(other, &["echo"])),
        }
    }

    fn code(answer: &Value) -> i64 {
        answer["error"]["code"].as_i64().unwrap_or(0)
    }

    #[test]
    fn a_body_that_is_not_json_is_a_parse_error() {
        let answer = handle(b"{nope", echo).unwrap();
        assert_eq!(code(&answer), PARSE_ERROR);
        assert_eq!(answer["id"], Value::Null);
    }

    #[test]
    fn malformed_requests_are_invalid_requests() {
        for body in [
            r#"[]"#,
            r#"5"#,
            r#"{"id":1,"method":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"echo"}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
        ] {
            let answer = handle(body.as_bytes(), echo).unwrap();
            assert_eq!(code(&answer), INVALID_REQUEST, "{body}: {answer}");
        }
        // The id is kept when it is one.
        let answer = handle(br#"{"jsonrpc":"2.0","id":"x"}"#, echo).unwrap();
        assert_eq!(answer["id"], "x");
    }

    #[test]
    fn params_that_are_not_an_object_are_invalid_params() {
        let answer = handle(
            br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#,
            echo,
        );
        assert_eq!(code(&answer.unwrap()), INVALID_PARAMS);
        // A notification is not answered, even when its params are wrong.
        let answer = handle(br#"{"jsonrpc":"2.0","method":"echo","params":[1]}"#, echo);
        assert_eq!(answer, None);
    }

    #[test]
    fn an_unknown_method_is_method_not_found_with_the_methods() {
        let answer = handle(br#"{"jsonrpc":"2.0","id":1,"method":"fly"}"#, echo).unwrap();
        assert_eq!(code(&answer), METHOD_NOT_FOUND);
        assert_eq!(answer["error"]["data"]["methods"], json!(["echo"]));
    }

    #[test]
    fn a_notification_runs_and_gets_no_answer() {
        let mut ran = Vec::new();
        let answer = handle(
            br#"{"jsonrpc":"2.0","method":"echo","params":{"a":1}}"#,
            |call| {
                ran.push(call.method.clone());
                echo(call)
            },
        );
        assert_eq!(answer, None);
        assert_eq!(ran, ["echo"]);
        let batch = handle(br#"[{"jsonrpc":"2.0","method":"echo"}]"#, echo);
        assert_eq!(batch, None, "an all-notification batch is not answered");
    }

    #[test]
    fn a_batch_is_answered_in_order_each_call_by_its_own_runner() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"method":"a/x","params":{"n":1}},
                        {"jsonrpc":"2.0","method":"b/y"},
                        {"jsonrpc":"2.0","id":2,"method":"b/y"},
                        {"jsonrpc":"2.0","id":3,"method":"c/z"}, 7]"#;
        let answer = handle(body, |call| match call.method.split_once('/') {
            Some(("a", _)) => Ok(json!({"area": "a", "params": call.params})),
            Some(("b", _)) => Ok(json!({"area": "b"})),
            _ => Err(Error::method_not_found(&call.method, &["a/x", "b/y"])),
        })
        .unwrap();
        let answers = answer.as_array().unwrap();
        assert_eq!(answers.len(), 4, "{answer}");
        assert_eq!(
            answers[0]["result"],
            json!({"area": "a", "params": {"n": 1}})
        );
        assert_eq!(answers[1]["id"], 2);
        assert_eq!(answers[1]["result"]["area"], "b");
        assert_eq!(code(&answers[2]), METHOD_NOT_FOUND);
        assert_eq!(code(&answers[3]), INVALID_REQUEST);
    }

    #[test]
    fn handle_async_answers_like_handle() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"method":"echo","params":{"n":1}},
                        {"jsonrpc":"2.0","method":"echo"},
                        {"jsonrpc":"2.0","id":2,"method":"no"}]"#;
        let sync = handle(body, echo);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let asynchronous = runtime.block_on(handle_async(body, |call| async move { echo(call) }));
        assert_eq!(sync, asynchronous);
    }

    #[test]
    fn an_answer_reads_back_into_its_outcome() {
        let ok = answer(Some(json!(1)), Ok(json!({"a": 1}))).unwrap();
        assert_eq!(outcome(&ok), Ok(json!({"a": 1})));
        let err = Error::new(-32002, "refused").with_data(json!({"hint": "h"}));
        let failed = answer(Some(json!(1)), Err(err.clone())).unwrap();
        assert_eq!(outcome(&failed), Err(err));
    }
}
