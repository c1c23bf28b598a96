//! The one way an event goes, whatever the platform: taken into the inbox (once per event
//! id), dispatched to its conversation's lane, mapped to an envelope, handed in at the Access
//! door, and its reply posted. A platform says only what differs ([`Adapter`]): how an event
//! names itself, how it maps, what holds it back, and how a reply is posted.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::{AdapterSpec, Envelope, Identity, Running, Taken};

/// What a platform's adapter adds to the pipeline.
pub trait Adapter: Send + Sync + 'static {
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
        _running: &Arc<Running>,
        _mapped: &Self::Mapped,
    ) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// Posts a reply to the message (`postable`: not empty, not `NO_REPLY`).
    fn post(
        running: &Arc<Running>,
        mapped: &Self::Mapped,
        text: &str,
        taken: &Taken,
    ) -> impl Future<Output = ()> + Send;
}

/// Why an event was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTaken {
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
pub async fn take<A: Adapter>(
    running: &Arc<Running>,
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
pub async fn replay<A: Adapter>(running: &Arc<Running>) {
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
pub fn dispatch<A: Adapter>(running: &Arc<Running>, taken: Taken, event: A::Event) {
    let event_id = taken.event_id.clone();
    if !running.cx.claim(&running.spec, &event_id) {
        return;
    }
    running.event_taken();
    let identity = running.identity().unwrap_or_default();
    let mapped = A::map(&event, &identity, &running.spec);
    let lane = match &mapped {
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

/// Hands a mapped event in at the Access door, and posts the reply its answer holds.
async fn handle<A: Adapter>(running: &Arc<Running>, mapped: A::Mapped, taken: &Taken) {
    if !A::admit(running, &mapped).await {
        return;
    }
    // A redelivery is not answered twice; one taken again after a restart is answered unless
    // its reply left before (the inbox keeps an event until its reply is posted).
    let answer = super::hand_in(running, A::envelope(&mapped)).await;
    let Some(text) = answer.reply(taken.replayed) else {
        return;
    };
    if !super::outbound::postable(&text) {
        return;
    }
    A::post(running, &mapped, &text, taken).await;
}
