//! The live transcript (`GET /console/conversations/live?key=&after=`): server-sent events,
//! one `line` event per transcript line newer than `after`. The Access store says which
//! session each committed append was for (a tokio broadcast channel, no polling); for the
//! session watched, the new lines are read with `sessions/history`, the service the page
//! itself was rendered from.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast::error::RecvError;

use super::Console;
use crate::hub::Hub;
use crate::hub::operator::{HistoryParams, HubAnswer, HubRequest};

/// How many of the newest lines a read looks at first: a message and its reply fit.
const FIRST_READ: usize = 8;
/// The most one read looks at.
const READ: usize = 200;

#[derive(serde::Deserialize)]
pub(super) struct LiveQuery {
    #[serde(default)]
    key: String,
    #[serde(default)]
    after: i64,
}

/// One line as the script gets it (it shows the text with `textContent`, never as HTML).
#[derive(serde::Serialize)]
struct LineEvent<'a> {
    id: i64,
    provenance: &'a str,
    at: &'a str,
    text: &'a str,
}

struct Watch {
    hub: Arc<Hub>,
    appends: tokio::sync::broadcast::Receiver<Arc<str>>,
    key: String,
    after: i64,
    ready: VecDeque<Event>,
    /// Read once at the start: what was appended between the page and this stream.
    first: bool,
}

impl Watch {
    /// The session's lines after `self.after`, queued as events: the newest few read first,
    /// more only when all of those are new (a burst, or a stream that fell behind).
    async fn read(&mut self) {
        let mut limit = FIRST_READ;
        let messages = loop {
            let request = HubRequest::SessionsHistory(HistoryParams {
                session_key: self.key.clone(),
                limit: Some(limit),
                cursor: None,
                all: false,
            });
            let Ok(HubAnswer::History(history)) = self.hub.operator(request).await else {
                return;
            };
            let all_new = history.messages.first().is_some_and(|m| m.id > self.after);
            if history.messages.len() < limit || !all_new || limit >= READ {
                break history.messages;
            }
            limit = (limit * 5).min(READ);
        };
        let after = self.after;
        for m in messages.iter().filter(|m| m.id > after) {
            let line = LineEvent {
                id: m.id,
                provenance: m.provenance.as_str(),
                at: &m.at,
                text: &m.text,
            };
            if let Ok(event) = Event::default().event("line").json_data(&line) {
                self.ready.push_back(event.id(m.id.to_string()));
            }
            self.after = m.id;
        }
    }
}

pub(super) async fn stream(
    State(console): State<Arc<Console>>,
    Query(q): Query<LiveQuery>,
) -> Response {
    if q.key.trim().is_empty() {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "which session? `key` is empty (agent:main:main, say)",
        )
            .into_response();
    }
    let watch = Watch {
        hub: console.sources.hub.clone(),
        appends: console.sources.access.store().transcript_appends(),
        key: q.key.trim().to_string(),
        after: q.after,
        ready: VecDeque::new(),
        first: true,
    };
    let events = futures_util::stream::unfold(watch, |mut w| async move {
        loop {
            if let Some(event) = w.ready.pop_front() {
                return Some((Ok::<Event, Infallible>(event), w));
            }
            if std::mem::take(&mut w.first) {
                w.read().await;
                continue;
            }
            match w.appends.recv().await {
                Ok(key) if *key == *w.key => w.read().await,
                Ok(_) => {}
                // Missed some: read anyway.
                Err(RecvError::Lagged(_)) => w.read().await,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
