//! The one way an event goes, whatever the platform: taken into the inbox (once per event
//! id), dispatched to its conversation's lane, mapped to an envelope, handed in at the Access
//! door, and its reply posted. A platform says only what differs ([`Adapter`]): how an event
//! names itself, how it maps, what holds it back, and how a reply is posted.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::{AdapterSpec, Click, Envelope, Identity, RunningAccount, Taken};

/// What a platform's adapter adds to the pipeline.
pub(crate) trait Adapter: Send + Sync + 'static {
    /// The platform's payload as it is taken into the inbox (and read back from it).
    type Event: DeserializeOwned + Send + 'static;
    /// An event mapped: its envelope, its lane, and where its reply goes.
    type Mapped: Send + Sync + 'static;

    /// What the platform calls an event, in log lines (`event`, `update`).
    const WHAT: &'static str;
    /// Why an event without an id is not taken.
    const NO_ID: &'static str;

    /// The event's id on the platform: what a redelivery is known by.
    fn event_id(event: &Self::Event) -> Option<String>;

    /// Maps an event, or says why it is not a message to hand in.
    fn map(
        event: &Self::Event,
        identity: &Identity,
        spec: &AdapterSpec,
    ) -> Result<Self::Mapped, &'static str>;

    /// The lane: the conversation (and thread) whose events go one after the other.
    fn lane(mapped: &Self::Mapped) -> &str;

    fn envelope(mapped: &Self::Mapped) -> &Envelope;

    /// Whether the message reaches the agent at all (Slack's discussions hold some back).
    fn admit(
        _running: &Arc<RunningAccount>,
        _mapped: &Self::Mapped,
    ) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// A click on one of deepcli's approval buttons, if the event is one.
    fn click(_event: &Self::Event) -> Option<Click> {
        None
    }

    /// Answers a click for the clicker alone; the platform's error when it could not.
    fn answer_click(
        _running: &Arc<RunningAccount>,
        _click: &Click,
        _text: &str,
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }

    /// Posts a reply to the message (`postable`: not empty, not `NO_REPLY`).
    fn post(
        running: &Arc<RunningAccount>,
        mapped: &Self::Mapped,
        text: &str,
        taken: &Taken,
    ) -> impl Future<Output = ()> + Send;
}

/// Why an event was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotTaken {
    /// It names no id (`the event has no \`event_id\``): nothing to know a redelivery by.
    NoId(&'static str),
    /// The inbox could not record it: the platform delivers it again.
    NotRecorded(String),
}

impl std::fmt::Display for NotTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotTaken::NoId(why) => f.write_str(why),
            NotTaken::NotRecorded(why) => f.write_str(why),
        }
    }
}

/// Takes one event: recorded (a redelivery of the same id is not taken twice), then handled in
/// its conversation's lane. `body` is the event as the platform sent it.
pub(super) async fn take<A: Adapter>(
    running: &Arc<RunningAccount>,
    event: A::Event,
    body: &str,
) -> Result<(), NotTaken> {
    let id = A::event_id(&event).ok_or(NotTaken::NoId(A::NO_ID))?;
    if running
        .take_one(A::WHAT, &id, body)
        .await
        .map_err(NotTaken::NotRecorded)?
    {
        dispatch::<A>(running, Taken::fresh(id), event);
    }
    Ok(())
}

/// Hands in again what an earlier run took and did not finish.
pub(super) async fn replay<A: Adapter>(running: &Arc<RunningAccount>) {
    let pending = running.pending().await;
    if !pending.is_empty() {
        running
            .log(&format!("replaying {}s={}", A::WHAT, pending.len()))
            .await;
    }
    for (taken, body) in pending {
        // A body that no longer reads stays in the inbox, as it always has.
        if let Ok(event) = serde_json::from_str::<A::Event>(&body) {
            dispatch::<A>(running, taken, event);
        }
    }
}

/// Dispatches a taken event to its lane; a replay after a reconnect skips what a lane holds
/// already.
pub(super) fn dispatch<A: Adapter>(running: &Arc<RunningAccount>, taken: Taken, event: A::Event) {
    let event_id = taken.event_id.clone();
    if !running.cx.claim(&running.spec, &event_id) {
        return;
    }
    running.event_taken();
    if let Some(click) = A::click(&event) {
        let lane = click.lane.clone();
        let job = {
            let running = running.clone();
            async move { clicked::<A>(&running, click).await }
        };
        running.cx.run_in_lane(&running.spec, &lane, event_id, job);
        return;
    }
    let identity = running.identity().unwrap_or_default();
    let mapped = A::map(&event, &identity, &running.spec);
    let lane = match &mapped {
        // An approval command never waits behind the turn that asked (approvals.md), which
        // holds its chat's lane, nor `/status` behind the turn it reports on: a lane of their
        // own beside the chat's.
        Ok(m) if crate::access::answered_beside_turns(&A::envelope(m).text) => {
            format!("command/{}", A::lane(m))
        }
        Ok(m) => A::lane(m).to_string(),
        Err(_) => String::from("-"),
    };
    let job = {
        let running = running.clone();
        let event_id = event_id.clone();
        async move {
            match mapped {
                Ok(mapped) => handle::<A>(&running, mapped, &taken).await,
                Err(why) => {
                    tracing::debug!(event = %event_id, %why, "platform event not handed in");
                    running
                        .log(&format!("ignored {}={event_id} why={why}", A::WHAT))
                        .await;
                }
            }
        }
    };
    running.cx.run_in_lane(&running.spec, &lane, event_id, job);
}

/// Decides a click as the clicker's chat command would, and answers the clicker alone; the
/// conversation hears the outcome from the outbox (the prompt's message edited).
async fn clicked<A: Adapter>(running: &Arc<RunningAccount>, click: Click) {
    use super::Choice;
    let sender = format!("{}:{}", running.spec.channel, click.user_id);
    let choice = click.choice;
    let id = &click.approval_id;
    let (what, answer) = match choice {
        Choice::Once | Choice::Always | Choice::Deny => (
            "approval",
            running
                .cx
                .access
                .approval_click(
                    sender.clone(),
                    id,
                    choice != Choice::Deny,
                    choice == Choice::Always,
                )
                .await,
        ),
        Choice::Accept => (
            "task",
            running.cx.access.task_click(sender.clone(), id).await,
        ),
        // A rejection says why, which a button cannot: the clicker is told how, nothing is
        // decided.
        Choice::Reject => (
            "task",
            Some(format!(
                "To reject it, write `/reject {id} <reason>` here: the reason goes back to the agent that did the work. Nothing was decided."
            )),
        ),
    };
    let (text, line) = match answer {
        Some(text) => (
            text,
            format!("click {what}={id} by={sender} choice={}", choice.word()),
        ),
        None => (
            super::NOT_AN_APPROVER_CLICK.to_string(),
            format!("click-refused {what}={id} by={sender} why=not-an-approver"),
        ),
    };
    running.log(&line).await;
    if let Err(e) = A::answer_click(running, &click, &text).await {
        running
            .log(&format!(
                "click-answer-failed {what}={} error={e}",
                click.approval_id
            ))
            .await;
    }
}

/// Hands a mapped event in at the Access door, and posts the reply its answer holds.
async fn handle<A: Adapter>(running: &Arc<RunningAccount>, mapped: A::Mapped, taken: &Taken) {
    if !A::admit(running, &mapped).await {
        return;
    }
    // One trace for the message, from its hand-in to the reply's post.
    let trace = crate::traces::inbound();
    async {
        // A redelivery is not answered twice; one taken again after a restart is answered
        // unless its reply left before (the inbox keeps an event until its reply is posted).
        let answer = super::hand_in(running, A::envelope(&mapped)).await;
        let Some(text) = answer.reply(taken.replayed) else {
            return;
        };
        if !super::outbound::postable(&text) {
            return;
        }
        A::post(running, &mapped, &text, taken).await;
    }
    .instrument(trace)
    .await;
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use serde::Deserialize;

    use super::*;
    use crate::access::{Access, AccessSettings, store::AccessStore};
    use crate::adapters::{Adapters, Peer, Sender, store::AdapterStore};
    use crate::state::StateDir;

    /// What the fake adapter saw, in order: `admit <id>` and `post <id> <text>`.
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

    #[derive(Debug, Clone, Deserialize)]
    struct Fake {
        id: Option<String>,
        lane: String,
        /// A message to hand in (else ignored, as an edit is).
        message: bool,
        /// Slow to admit: a later event of its lane must wait for it.
        #[serde(default)]
        slow_ms: u64,
    }

    struct Mapped {
        id: String,
        lane: String,
        slow_ms: u64,
        envelope: Envelope,
    }

    impl Adapter for Fake {
        type Event = Fake;
        type Mapped = Mapped;
        const WHAT: &'static str = "fake";
        const NO_ID: &'static str = "the fake has no id";

        fn event_id(event: &Fake) -> Option<String> {
            event.id.clone()
        }

        fn map(event: &Fake, _: &Identity, spec: &AdapterSpec) -> Result<Mapped, &'static str> {
            if !event.message {
                return Err("not a message");
            }
            let id = event.id.clone().unwrap_or_default();
            Ok(Mapped {
                id: id.clone(),
                lane: event.lane.clone(),
                slow_ms: event.slow_ms,
                envelope: Envelope {
                    channel: spec.channel.clone(),
                    account_id: spec.account.clone(),
                    peer: Peer {
                        kind: "direct",
                        id: event.lane.clone(),
                    },
                    message_id: id,
                    sender: Sender {
                        is_bot: false,
                        id: None,
                        name: None,
                    },
                    text: "hi".into(),
                    mentions: Vec::new(),
                    team_id: None,
                    thread_id: None,
                    reply_to_sender_id: None,
                    guild_id: None,
                    member_role_ids: Vec::new(),
                    parent_peer: None,
                },
            })
        }

        fn lane(mapped: &Mapped) -> &str {
            &mapped.lane
        }

        fn envelope(mapped: &Mapped) -> &Envelope {
            &mapped.envelope
        }

        /// Holds every message back (nothing reaches Access in these tests), noting it.
        fn admit(
            _running: &Arc<RunningAccount>,
            mapped: &Mapped,
        ) -> impl Future<Output = bool> + Send {
            let (id, slow) = (mapped.id.clone(), mapped.slow_ms);
            async move {
                tokio::time::sleep(Duration::from_millis(slow)).await;
                SEEN.lock().unwrap().push(format!("admit {id}"));
                false
            }
        }

        fn post(
            _running: &Arc<RunningAccount>,
            mapped: &Mapped,
            text: &str,
            _taken: &Taken,
        ) -> impl Future<Output = ()> + Send {
            SEEN.lock()
                .unwrap()
                .push(format!("post {} {text}", mapped.id));
            async {}
        }
    }

    fn running(dir: &std::path::Path) -> Arc<RunningAccount> {
        let state = StateDir::new(dir.join("state"));
        let access = Arc::new(Access::new(
            AccessStore::open(&state).unwrap(),
            &state,
            crate::access::Publisher::default().served(),
            None,
            AccessSettings::default(),
        ));
        let adapters = Adapters::new(
            access,
            AdapterStore::open(&state).unwrap(),
            crate::adapters::Timings::default(),
        );
        Arc::new(RunningAccount {
            spec: AdapterSpec {
                platform: crate::platform::Platform::Telegram,
                channel: "telegram".into(),
                account: "default".into(),
                enabled: true,
                mode: crate::config::model::AdapterMode::Polling,
                api_base: "http://127.0.0.1:9".into(),
                bot_token: Ok(crate::platform::Credential::new("t".into())),
                app_token: None,
                signing_secret: None,
                webhook_secret: None,
                webhook_url: None,
                reply_to_mode: Default::default(),
                max_reply_messages: 10,
                discussion: None,
                group_discussions: Default::default(),
                application_id: None,
                uses_roles: false,
            },
            cx: adapters.cx(),
            identity: std::sync::RwLock::new(None),
            discord: Default::default(),
        })
    }

    fn event(id: &str, lane: &str, message: bool, slow_ms: u64) -> (Fake, String) {
        let body =
            serde_json::json!({"id": id, "lane": lane, "message": message, "slow_ms": slow_ms})
                .to_string();
        (serde_json::from_str(&body).unwrap(), body)
    }

    async fn inbox(running: &RunningAccount) -> usize {
        running
            .cx
            .store
            .pending("telegram", "default")
            .unwrap()
            .len()
    }

    /// Waits (bounded) until the inbox is empty: every lane's job has ended.
    async fn drained(running: &RunningAccount) {
        for _ in 0..500 {
            if inbox(running).await == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the inbox was not drained");
    }

    fn seen() -> Vec<String> {
        std::mem::take(&mut *SEEN.lock().unwrap())
    }

    /// One test for the whole pipeline: `SEEN` is shared, so its steps run in one order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_pipeline_takes_once_keeps_lane_order_and_replays_the_inbox() {
        let dir = tempfile::tempdir().unwrap();
        let running = running(dir.path());

        // No id: not taken, nothing in the inbox.
        let no_id: Fake = serde_json::from_str(r#"{"lane":"a","message":true}"#).unwrap();
        assert_eq!(
            take::<Fake>(&running, no_id, "{}").await,
            Err(NotTaken::NoId("the fake has no id"))
        );
        assert_eq!(inbox(&running).await, 0);

        // A lane handles its events in the order taken, even when the first is slow; a
        // redelivery of an id taken before is not handled twice.
        for (id, slow) in [("1", 80), ("2", 0), ("3", 0)] {
            let (e, body) = event(id, "a", true, slow);
            take::<Fake>(&running, e, &body).await.unwrap();
        }
        let (again, body) = event("1", "a", true, 0);
        take::<Fake>(&running, again, &body).await.unwrap();
        drained(&running).await;
        assert_eq!(seen(), ["admit 1", "admit 2", "admit 3"]);

        // An event that is no message is taken, logged as ignored, and leaves the inbox.
        let (edit, body) = event("4", "b", false, 0);
        take::<Fake>(&running, edit, &body).await.unwrap();
        drained(&running).await;
        assert!(seen().is_empty());

        // What an earlier run took and did not finish is handed in again, in order; a body
        // that no longer reads stays.
        let store = running.cx.store.clone();
        let bodies: Vec<(String, String)> = ["5", "6"]
            .iter()
            .map(|id| (id.to_string(), event(id, "c", true, 0).1))
            .chain([("7".to_string(), "not json".to_string())])
            .collect();
        store.take("telegram", "default", &bodies, None).unwrap();
        replay::<Fake>(&running).await;
        for _ in 0..500 {
            if inbox(&running).await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen(), ["admit 5", "admit 6"]);
        let left = store.pending("telegram", "default").unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].event_id, "7");

        // A replay after a reconnect skips what a lane holds already: the slow event is
        // handled once.
        let (slow, body) = event("8", "d", true, 150);
        take::<Fake>(&running, slow, &body).await.unwrap();
        replay::<Fake>(&running).await;
        for _ in 0..500 {
            if inbox(&running).await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(seen(), ["admit 8"]);
    }
}
