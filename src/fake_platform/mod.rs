//! Local fakes of the chat platforms' public APIs, for practice and for the tests: `deepcli
//! fake-platform telegram|slack|discord` serves one, so adapters, pairing, buttons and replies can be
//! tried end to end without a real bot, and the integration tests drive the same fakes.
//!
//! A fake records every API call, keeps a [`Line`] transcript of what people said and what the
//! bot posted, and answers people's messages and button presses sent to its control routes
//! (`POST /_fake/say`, `POST /_fake/press`): what `deepcli fake-platform say|press` and the
//! interactive prompt use. Nothing here reaches the network beyond the address it is given.

pub mod discord;
pub mod slack;
pub mod telegram;

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

/// Where a person speaks: their direct chat with the bot, or the one group the fake has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Chat {
    Direct,
    Group,
}

/// One line of a chat: a person's message or press, or the bot's post or edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The chat, as people name it: `dm alice`, `group`.
    pub chat: String,
    /// The person who said it; `None`: the bot.
    pub from: Option<String>,
    pub text: String,
    /// The labels of the message's buttons, in order (`press N` presses the Nth).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buttons: Vec<String>,
    /// The bot changed an earlier message to this.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
}

impl Line {
    fn said(chat: String, from: &str, text: &str) -> Line {
        Line {
            chat,
            from: Some(from.to_string()),
            text: text.to_string(),
            buttons: Vec::new(),
            edited: false,
        }
    }

    fn posted(chat: String, text: &str, buttons: Vec<String>, edited: bool) -> Line {
        Line {
            chat,
            from: None,
            text: text.to_string(),
            buttons,
            edited,
        }
    }
}

impl std::fmt::Display for Line {
    /// `bot: text` (`bot (edited): …`, `alice: …`), continuation lines indented, then the
    /// buttons as `[1] label  [2] label`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = self.from.as_deref().unwrap_or("bot");
        let edited = if self.edited { " (edited)" } else { "" };
        let mut lines = self.text.lines();
        write!(f, "{who}{edited}: {}", lines.next().unwrap_or_default())?;
        for line in lines {
            match line {
                "" => f.write_str("\n")?,
                _ => write!(f, "\n  {line}")?,
            }
        }
        if !self.buttons.is_empty() {
            f.write_str("\n ")?;
            for (n, label) in self.buttons.iter().enumerate() {
                write!(f, " [{}] {label}", n + 1)?;
            }
        }
        Ok(())
    }
}

/// A person's message, sent to `POST /_fake/say`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Say {
    pub from: String,
    pub chat: Chat,
    pub text: String,
    /// How long to wait for the bot's next message, in seconds.
    pub wait_s: u64,
}

/// A person's press of button `button` (from 1) of the bot's latest message with buttons, sent
/// to `POST /_fake/press`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Press {
    pub from: String,
    pub chat: Chat,
    pub button: usize,
    pub wait_s: u64,
}

/// What the bot posted and edited in the chat after a say or press: its edits of earlier
/// messages first, then its new messages, each in the order they came.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answer {
    pub lines: Vec<Line>,
    /// The bot posted a message within the wait (edits alone do not count).
    pub replied: bool,
}

/// What a fake does for people: the control routes' side of it.
pub(crate) trait Platform: Clone + Send + Sync + 'static {
    /// `from` says `text` in `chat`; where the transcript stood before it.
    fn say(&self, from: &str, chat: Chat, text: &str) -> usize;
    /// `from` presses button `n` of the bot's latest buttons in `chat`.
    fn press(&self, from: &str, chat: Chat, n: usize) -> Result<usize, String>;
    /// The transcript from line `from` on.
    fn transcript(&self, from: usize) -> Vec<Line>;
    /// The name of `from`'s `chat`, as [`Line::chat`] says it.
    fn chat_name(&self, from: &str, chat: Chat) -> String;
}

/// How long the bot has been quiet before an answer is taken as whole.
const QUIET: Duration = Duration::from_millis(700);

/// The bot's lines in `chat` after `mark`: once it posted a message and then was quiet for
/// [`QUIET`], or when `wait` is over.
async fn answer<P: Platform>(platform: &P, chat: &str, mark: usize, wait: Duration) -> Answer {
    let deadline = tokio::time::Instant::now() + wait;
    let mut seen = 0;
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        let lines: Vec<Line> = platform
            .transcript(mark)
            .into_iter()
            .filter(|l| l.from.is_none() && l.chat == chat)
            .collect();
        let now = tokio::time::Instant::now();
        if lines.len() != seen {
            seen = lines.len();
            quiet_since = now;
        }
        let replied = lines.iter().any(|l| !l.edited);
        if (replied && now - quiet_since >= QUIET) || now >= deadline {
            return Answer {
                lines: as_shown(lines),
                replied,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The bot's lines as the chat shows them: an edited message stays where it was, above the new
/// ones, whichever the platform got first; each kind in the order it came.
fn as_shown(mut lines: Vec<Line>) -> Vec<Line> {
    lines.sort_by_key(|l| !l.edited);
    lines
}

fn wait_of(seconds: u64) -> Duration {
    Duration::from_secs(seconds.min(600))
}

async fn say<P: Platform>(State(platform): State<P>, Json(say): Json<Say>) -> Response {
    let mark = platform.say(&say.from, say.chat, &say.text);
    let chat = platform.chat_name(&say.from, say.chat);
    Json(answer(&platform, &chat, mark, wait_of(say.wait_s)).await).into_response()
}

async fn press<P: Platform>(State(platform): State<P>, Json(press): Json<Press>) -> Response {
    match platform.press(&press.from, press.chat, press.button) {
        Ok(mark) => {
            let chat = platform.chat_name(&press.from, press.chat);
            Json(answer(&platform, &chat, mark, wait_of(press.wait_s)).await).into_response()
        }
        Err(why) => (axum::http::StatusCode::CONFLICT, why).into_response(),
    }
}

/// The control routes of a fake: `POST /_fake/say` and `POST /_fake/press`.
fn control<P: Platform>() -> Router<P> {
    Router::new()
        .route("/_fake/say", axum::routing::post(say::<P>))
        .route("/_fake/press", axum::routing::post(press::<P>))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_shown_above_the_new_messages_each_in_order() {
        let line = |text: &str, edited| Line::posted("dm alice".into(), text, Vec::new(), edited);
        let got = as_shown(vec![
            line("reply", false),
            line("prompt, decided", true),
            line("second reply", false),
            line("other edit", true),
        ]);
        let texts: Vec<&str> = got.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            ["prompt, decided", "other edit", "reply", "second reply"]
        );
    }
}
