//! The live transcript (`GET /console/conversations/live?key=&after=`): server-sent events,
//! one `line` event per transcript line newer than `after`. The Access store says which
//! session each committed append was for (a tokio broadcast channel, no polling).
//!
//! One reader per watched session (a [`Feed`]): it reads the session's new lines with
//! `sessions/history`, the service the page itself was rendered from, renders each once, and
//! fans the rendered line out to every viewer of that session. A viewer reads on its own only
//! when it opens (what was appended between its page and its stream) and when it fell behind
//! its feed. The feed ends with the first append after its last viewer left.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use super::Console;
use super::view::Line;
use crate::hub::Hub;
use crate::hub::operator::{HistoryParams, HubAnswer, HubRequest};

/// How many of the newest lines a read looks at first: a message and its reply fit.
const FIRST_READ: usize = 8;
/// The most one read looks at.
const READ: usize = 200;
/// Rendered lines a feed holds for a slow viewer before that viewer reads on its own.
const FEED_BUFFER: usize = 256;

#[derive(serde::Deserialize)]
pub(super) struct LiveQuery {
    #[serde(default)]
    key: String,
    #[serde(default)]
    after: i64,
}

/// A line rendered once for every viewer: its id and its event's JSON (`{id, provenance,
/// sender, senderKind, at, text}`; the script shows the text with `textContent`, never as
/// HTML).
#[derive(Debug)]
struct Rendered {
    id: i64,
    json: String,
}

impl Rendered {
    fn event(&self) -> Event {
        Event::default()
            .event("line")
            .id(self.id.to_string())
            .data(&self.json)
    }
}

/// The session's lines after `after`, rendered: the newest few read first, more only when all
/// of those are new (a burst, or a reader that fell behind). Empty when the read fails.
async fn read_after(hub: &Arc<Hub>, key: &str, after: i64) -> Vec<Rendered> {
    let mut limit = FIRST_READ;
    let messages = loop {
        let request = HubRequest::SessionsHistory(HistoryParams {
            session_key: key.to_string(),
            limit: Some(limit),
            cursor: None,
            all: false,
        });
        let Ok(HubAnswer::History(history)) = hub.operator(request).await else {
            return Vec::new();
        };
        let all_new = history.messages.first().is_some_and(|m| m.id > after);
        if history.messages.len() < limit || !all_new || limit >= READ {
            break history.messages;
        }
        limit = (limit * 5).min(READ);
    };
    messages
        .into_iter()
        .filter(|m| m.id > after)
        .filter_map(|m| {
            let id = m.id;
            let json = serde_json::to_string(&Line::of(m)).ok()?;
            Some(Rendered { id, json })
        })
        .collect()
}

/// The watched sessions' feeds, by session key.
#[derive(Default)]
pub(super) struct Feeds {
    by_key: Mutex<HashMap<String, broadcast::Sender<Arc<Rendered>>>>,
}

impl Feeds {
    /// A receiver of session `key`'s rendered lines, its feed started when none runs.
    fn watch(
        self: &Arc<Self>,
        hub: &Arc<Hub>,
        access: &crate::access::Access,
        key: &str,
        after: i64,
    ) -> Receiver {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(feed) = by_key.get(key) {
            return feed.subscribe();
        }
        let (feed, rx) = broadcast::channel(FEED_BUFFER);
        by_key.insert(key.to_string(), feed.clone());
        // Told of appends before the feed's first read: nothing falls between the two.
        let appended = access.store().transcript_appends();
        tokio::spawn(run_feed(
            self.clone(),
            hub.clone(),
            appended,
            key.to_string(),
            after,
            feed,
        ));
        rx
    }

    /// Forgets `key`'s feed when nobody watches it; whether it did. Under the lock a viewer
    /// subscribes under, so a viewer never joins a feed that is ending.
    fn forget_if_unwatched(&self, key: &str) -> bool {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        match by_key.get(key) {
            Some(feed) if feed.receiver_count() == 0 => {
                by_key.remove(key);
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Forgets `key`'s feed whoever watches it (the store is gone: the controller stops).
    fn forget(&self, key: &str) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        by_key.remove(key);
    }
}

type Receiver = broadcast::Receiver<Arc<Rendered>>;

/// One watched session's reader: each append to it read once and sent to every viewer.
async fn run_feed(
    feeds: Arc<Feeds>,
    hub: Arc<Hub>,
    mut appended: broadcast::Receiver<Arc<str>>,
    key: String,
    // Where its first viewer's page ended: a line appended after that and before the
    // viewer's own first read is in one of the two, whichever way they race.
    mut after: i64,
    feed: broadcast::Sender<Arc<Rendered>>,
) {
    loop {
        let read = match appended.recv().await {
            Ok(k) => *k == *key,
            // Missed some: read anyway.
            Err(RecvError::Lagged(_)) => true,
            Err(RecvError::Closed) => {
                feeds.forget(&key);
                return;
            }
        };
        if feed.receiver_count() == 0 && feeds.forget_if_unwatched(&key) {
            return;
        }
        if !read {
            continue;
        }
        for line in read_after(&hub, &key, after).await {
            after = line.id;
            // No viewer left: the next append ends the feed.
            let _ = feed.send(Arc::new(line));
        }
    }
}

/// One viewer: its backlog, then its feed's lines it has not sent yet.
struct Viewer {
    hub: Arc<Hub>,
    lines: Receiver,
    key: String,
    after: i64,
    ready: VecDeque<Event>,
    /// Read once at the start: what was appended between the page and this stream.
    first: bool,
}

impl Viewer {
    async fn catch_up(&mut self) {
        for line in read_after(&self.hub, &self.key, self.after).await {
            self.send(&line);
        }
    }

    fn send(&mut self, line: &Rendered) {
        if line.id > self.after {
            self.ready.push_back(line.event());
            self.after = line.id;
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
    let key = q.key.trim().to_string();
    let hub = console.sources.hub.clone();
    let lines = console
        .feeds
        .watch(&hub, &console.sources.access, &key, q.after);
    let viewer = Viewer {
        hub,
        lines,
        key,
        after: q.after,
        ready: VecDeque::new(),
        first: true,
    };
    let events = futures_util::stream::unfold(viewer, |mut v| async move {
        loop {
            if let Some(event) = v.ready.pop_front() {
                return Some((Ok::<Event, Infallible>(event), v));
            }
            if std::mem::take(&mut v.first) {
                v.catch_up().await;
                continue;
            }
            match v.lines.recv().await {
                Ok(line) => v.send(&line),
                // Fell behind its feed: read what it missed on its own.
                Err(RecvError::Lagged(_)) => v.catch_up().await,
                Err(RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
