//! One lane per conversation: the events of a chat are handled one after the other, in the
//! order taken, while other chats go on side by side. A lane's task ends when it has been idle
//! a while, so many chats over time cost no memory.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

const IDLE: Duration = Duration::from_secs(30);

#[derive(Clone, Default)]
pub(super) struct Lanes {
    lanes: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>>,
}

impl Lanes {
    /// Runs `job` after every job queued before it on lane `key`.
    pub(super) fn run(&self, key: String, job: impl Future<Output = ()> + Send + 'static) {
        let mut lanes = match self.lanes.lock() {
            Ok(lanes) => lanes,
            Err(poisoned) => poisoned.into_inner(),
        };
        let job: Job = Box::pin(job);
        let job = match lanes.get(&key) {
            Some(tx) => match tx.send(job) {
                Ok(()) => return,
                // The lane's task ended: a new one takes the job.
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(job);
        lanes.insert(key.clone(), tx);
        tokio::spawn(drive(self.lanes.clone(), key, rx));
    }
}

async fn drive(
    lanes: Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Job>>>>,
    key: String,
    mut rx: mpsc::UnboundedReceiver<Job>,
) {
    loop {
        match tokio::time::timeout(IDLE, rx.recv()).await {
            Ok(Some(job)) => job.await,
            Ok(None) => return,
            Err(_) => {
                // Idle: leave, unless a job arrived meanwhile (the map's lock orders this
                // against `run`).
                let mut map = match lanes.lock() {
                    Ok(map) => map,
                    Err(poisoned) => poisoned.into_inner(),
                };
                match rx.try_recv() {
                    Ok(job) => {
                        drop(map);
                        job.await;
                    }
                    Err(_) => {
                        map.remove(&key);
                        return;
                    }
                }
            }
        }
    }
}
