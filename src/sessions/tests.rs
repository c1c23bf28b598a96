//! The engine over an in-memory runtime and store: queue order and limits, timeouts with
//! confirmed and uncertain cancels, oneshot close, model apply, budgets. No process, no
//! SQLite; each test takes milliseconds.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::runtime::acp::SessionModel;
use crate::runtime::{OpenedSession, PendingPrompt, PromptEnd, PromptUpdate};

/// How the fake answers one prompt.
#[derive(Clone)]
struct Script {
    chunks: Vec<String>,
    stop: StopReason,
    /// How long the answer takes (`None`: it never comes on its own).
    delay: Option<Duration>,
    /// What a cancel makes of it: the stop reason it then answers with, or `None` (no answer).
    on_cancel: Option<StopReason>,
    /// The prompt fails with this message.
    fails: Option<String>,
    cost_usd: Option<f64>,
    tokens: Option<u64>,
}

impl Script {
    fn says(text: &str) -> Script {
        Script {
            chunks: vec![text.to_string()],
            stop: StopReason::EndTurn,
            delay: Some(Duration::ZERO),
            on_cancel: Some(StopReason::Cancelled),
            fails: None,
            cost_usd: None,
            tokens: None,
        }
    }

    fn hangs(on_cancel: Option<StopReason>) -> Script {
        Script {
            delay: None,
            on_cancel,
            ..Script::says("")
        }
    }

    fn slow(text: &str, delay: Duration) -> Script {
        Script {
            delay: Some(delay),
            ..Script::says(text)
        }
    }
}

/// An ACP runtime in memory: records prompts, cancels, closes and option changes; answers as
/// scripted (default: `ok`, at once).
#[derive(Default)]
struct FakeRuntime {
    instance: String,
    loads: bool,
    closes: bool,
    /// The model option new sessions offer: (config id, values, current).
    model_option: Option<(String, Vec<String>, String)>,
    refuses: Vec<String>,
    open: Mutex<HashMap<String, String>>,
    models: Mutex<HashMap<String, SessionModel>>,
    scripts: Mutex<VecDeque<Script>>,
    prompts: Mutex<Vec<(String, String)>>,
    cancels: Mutex<Vec<String>>,
    closed: Mutex<Vec<String>>,
    loaded: Mutex<Vec<String>>,
    options_set: Mutex<Vec<String>>,
    cancel_signals: Mutex<HashMap<String, Arc<Notify>>>,
    next: Mutex<u32>,
    person: Option<tokio::sync::watch::Sender<u64>>,
}

impl FakeRuntime {
    fn new() -> FakeRuntime {
        FakeRuntime {
            instance: "instance-1".into(),
            person: Some(tokio::sync::watch::channel(0).0),
            ..FakeRuntime::default()
        }
    }

    fn script(&self, script: Script) {
        self.scripts.lock().unwrap().push_back(script);
    }

    fn prompts(&self) -> Vec<(String, String)> {
        self.prompts.lock().unwrap().clone()
    }

    fn selection(&self) -> SessionModel {
        match &self.model_option {
            None => SessionModel::default(),
            Some((id, values, current)) => SessionModel {
                wanted: Vec::new(),
                option: Some((id.clone(), values.clone())),
                current: Some(current.clone()),
            },
        }
    }
}

impl SessionRuntime for FakeRuntime {
    fn instance(&self) -> &str {
        &self.instance
    }
    fn pid(&self) -> u32 {
        7
    }
    fn cwd(&self) -> &std::path::Path {
        std::path::Path::new("/")
    }
    fn loads_sessions(&self) -> bool {
        self.loads
    }
    fn closes_sessions(&self) -> bool {
        self.closes
    }
    fn takes_mcp_http(&self) -> bool {
        false
    }
    fn holder(&self, id: &str) -> Option<String> {
        self.open.lock().unwrap().get(id).cloned()
    }
    fn serving(&self, session_key: &str) -> Option<String> {
        let open = self.open.lock().unwrap();
        let ids: Vec<&String> = open
            .iter()
            .filter(|(_, k)| *k == session_key)
            .map(|(id, _)| id)
            .collect();
        (ids.len() == 1).then(|| ids[0].clone())
    }
    fn claim(&self, id: &str, session_key: &str) -> bool {
        let mut open = self.open.lock().unwrap();
        match open.get(id) {
            Some(holder) => holder == session_key,
            None => {
                open.insert(id.to_string(), session_key.to_string());
                true
            }
        }
    }
    fn release(&self, id: &str) {
        self.open.lock().unwrap().remove(id);
        self.models.lock().unwrap().remove(id);
    }
    fn session_model(&self, id: &str) -> Option<SessionModel> {
        self.models.lock().unwrap().get(id).cloned()
    }
    fn set_session_model(&self, id: &str, model: SessionModel) {
        self.models.lock().unwrap().insert(id.to_string(), model);
    }
    fn load_session(
        &self,
        id: &str,
        _cwd: std::path::PathBuf,
        _mcp: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> BoxFuture<'static, Result<OpenedSession, String>> {
        self.loaded.lock().unwrap().push(id.to_string());
        let opened = OpenedSession {
            id: id.to_string(),
            model: self.selection(),
        };
        Box::pin(async move { Ok(opened) })
    }
    fn new_session(
        &self,
        _cwd: std::path::PathBuf,
        _mcp: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> BoxFuture<'static, Result<OpenedSession, String>> {
        let mut next = self.next.lock().unwrap();
        *next += 1;
        let opened = OpenedSession {
            id: format!("s{next}"),
            model: self.selection(),
        };
        Box::pin(async move { Ok(opened) })
    }
    fn set_config_option(
        &self,
        _session_id: &str,
        _config_id: &str,
        value: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        self.options_set.lock().unwrap().push(value.to_string());
        let refused = self.refuses.iter().any(|r| r == value);
        Box::pin(async move {
            if refused {
                Err("not today".to_string())
            } else {
                Ok(())
            }
        })
    }
    fn prompt(
        &self,
        session_id: &str,
        text: String,
        _files: &[crate::runtime::PromptFile],
    ) -> PendingPrompt {
        self.prompts
            .lock()
            .unwrap()
            .push((session_id.to_string(), text));
        let script = self
            .scripts
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| Script::says("ok"));
        let cancelled = Arc::new(Notify::new());
        self.cancel_signals
            .lock()
            .unwrap()
            .insert(session_id.to_string(), cancelled.clone());
        let mut updates: VecDeque<PromptUpdate> = script
            .chunks
            .iter()
            .cloned()
            .map(PromptUpdate::Text)
            .collect();
        if let Some(cost) = script.cost_usd {
            updates.push_back(PromptUpdate::CostUsd(cost));
        }
        let answer = Box::pin(async move {
            if let Some(why) = script.fails {
                return Err(why);
            }
            let end = |stop| PromptEnd {
                stop_reason: Some(stop),
                tokens: script.tokens,
            };
            let on_time = async {
                match script.delay {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = on_time => Ok(end(script.stop)),
                () = cancelled.notified() => match script.on_cancel {
                    Some(stop) => Ok(end(stop)),
                    None => std::future::pending().await,
                },
            }
        });
        PendingPrompt {
            answer,
            updates: Box::new(move || updates.pop_front()),
            listening: Box::new(()),
        }
    }
    fn cancel(&self, session_id: &str) -> bool {
        self.cancels.lock().unwrap().push(session_id.to_string());
        if let Some(signal) = self.cancel_signals.lock().unwrap().get(session_id) {
            signal.notify_one();
        }
        true
    }
    fn close_session(&self, id: &str) -> BoxFuture<'static, Result<(), String>> {
        self.closed.lock().unwrap().push(id.to_string());
        Box::pin(async { Ok(()) })
    }
    fn person_waited(&self, _session_id: &str) -> (Duration, bool) {
        (Duration::ZERO, false)
    }
    fn person_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.person.as_ref().expect("made by new").subscribe()
    }
    fn forget_person_waits(&self, _session_id: &str) {}
}

/// A recorded exchange: session key, notes, the message, the answer or why none.
type Exchange = (String, Vec<String>, String, Result<String, String>);

/// The session records in memory.
#[derive(Default)]
struct FakeStore {
    sessions: Mutex<HashMap<String, KnownSession>>,
    turns: Mutex<HashMap<String, Vec<(Provenance, String)>>>,
    counts: Mutex<Vec<(String, TurnCount)>>,
    exchanges: Mutex<Vec<Exchange>>,
    refusals: Mutex<Vec<budget::BudgetRefusal>>,
    cancels: Mutex<Vec<(String, String, Option<String>)>>,
    sections: Mutex<HashMap<String, GivenSection>>,
}

impl SessionStore for FakeStore {
    fn given_section(&self, session_key: &str) -> Result<Option<GivenSection>, StateError> {
        Ok(self.sections.lock().unwrap().get(session_key).cloned())
    }
    fn record_section(
        &self,
        session_key: &str,
        _agent_id: &str,
        given: &GivenSection,
    ) -> Result<(), StateError> {
        self.sections
            .lock()
            .unwrap()
            .insert(session_key.to_string(), given.clone());
        Ok(())
    }
    fn agent_was_told(&self, agent_id: &str) -> Result<bool, StateError> {
        let prefix = format!("agent:{agent_id}:");
        Ok(self
            .sections
            .lock()
            .unwrap()
            .keys()
            .any(|k| k.starts_with(&prefix)))
    }
    fn runtime_session(&self, session_key: &str) -> Result<Option<KnownSession>, StateError> {
        Ok(self.sessions.lock().unwrap().get(session_key).cloned())
    }
    fn set_runtime_session(
        &self,
        session_key: &str,
        _agent_id: &str,
        session: &KnownSession,
    ) -> Result<(), StateError> {
        self.sessions
            .lock()
            .unwrap()
            .insert(session_key.to_string(), session.clone());
        Ok(())
    }
    fn recent_turns(
        &self,
        session_key: &str,
        limit: usize,
    ) -> Result<Vec<(Provenance, String)>, StateError> {
        let turns = self.turns.lock().unwrap();
        let all = turns.get(session_key).cloned().unwrap_or_default();
        Ok(all[all.len().saturating_sub(limit)..].to_vec())
    }
    fn record_count(&self, session_key: &str, count: &TurnCount) -> Result<(), StateError> {
        self.counts
            .lock()
            .unwrap()
            .push((session_key.to_string(), count.clone()));
        Ok(())
    }
    fn record_exchange(
        &self,
        session_key: &str,
        notes: &[String],
        record: &TurnRecord,
        answer: Result<&str, String>,
        count: Option<&TurnCount>,
    ) -> Result<(), StateError> {
        self.exchanges.lock().unwrap().push((
            session_key.to_string(),
            notes.to_vec(),
            record.text.clone(),
            answer.map(str::to_string),
        ));
        if let Some(count) = count {
            self.record_count(session_key, count)?;
        }
        Ok(())
    }
    fn record_refusal(
        &self,
        refusal: &budget::BudgetRefusal,
        _session_key: Option<&str>,
        _run_id: Option<&str>,
    ) -> Result<(), StateError> {
        self.refusals.lock().unwrap().push(refusal.clone());
        Ok(())
    }
    fn record_spawn(&self, _: &str, _: i64, _: &str) -> Result<(), StateError> {
        Ok(())
    }
    fn cancel_requested(
        &self,
        _agent_id: &str,
        session_key: &str,
        _run_id: Option<&str>,
        why: &str,
    ) -> Result<i64, StateError> {
        let mut cancels = self.cancels.lock().unwrap();
        cancels.push((session_key.to_string(), why.to_string(), None));
        Ok(cancels.len() as i64 - 1)
    }
    fn cancel_decided(&self, id: i64, state: &str, _note: &str) -> Result<(), StateError> {
        self.cancels.lock().unwrap()[id as usize].2 = Some(state.to_string());
        Ok(())
    }
}

/// The engine's counts.
#[derive(Default)]
struct FakeMetrics {
    waiting: std::sync::atomic::AtomicI64,
    refused: std::sync::atomic::AtomicU64,
    delivered: std::sync::atomic::AtomicU64,
}

impl TurnMetrics for FakeMetrics {
    fn waiting(&self, delta: i64) {
        self.waiting.fetch_add(delta, Ordering::SeqCst);
    }
    fn refused(&self) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }
    fn delivered(&self, _took: Duration) {
        self.delivered.fetch_add(1, Ordering::SeqCst);
    }
}

const KEY: &str = "agent:a:main";

struct Rig {
    engine: Arc<Sessions>,
    runtime: Arc<FakeRuntime>,
    store: Arc<FakeStore>,
    metrics: Arc<FakeMetrics>,
}

fn rig_with(runtime: FakeRuntime, settings: SessionSettings, plan: TurnPlan) -> Rig {
    let runtime = Arc::new(runtime);
    let store = Arc::new(FakeStore::default());
    let metrics = Arc::new(FakeMetrics::default());
    let mut plan = plan;
    plan.runtimes.insert("a".into(), RuntimeKind::Acp);
    let mut engine = Sessions::new(
        store.clone(),
        None,
        crate::snapshot::Snapshot::fixed(Arc::new(plan)),
        budget::Budgets::default(),
        settings,
        metrics.clone(),
    );
    let mut fakes: std::collections::BTreeMap<String, Arc<dyn SessionRuntime>> =
        std::collections::BTreeMap::new();
    fakes.insert("a".into(), runtime.clone());
    engine.runtimes = Some(Found::Fakes(fakes));
    Rig {
        engine: Arc::new(engine),
        runtime,
        store,
        metrics,
    }
}

fn rig() -> Rig {
    rig_with(
        FakeRuntime::new(),
        SessionSettings::default(),
        TurnPlan::default(),
    )
}

fn fast() -> SessionSettings {
    SessionSettings {
        prompt_timeout: Duration::from_millis(30),
        cancel_confirm: Duration::from_millis(30),
        ..SessionSettings::default()
    }
}

fn message(text: &str) -> InternalMessage {
    InternalMessage {
        provenance: Provenance::Operator,
        text: text.to_string(),
        prompt: text.to_string(),
        meta: serde_json::Value::Null,
        options: SessionOptions::default(),
        unbounded: false,
    }
}

fn request(text: &str) -> TurnRequest {
    TurnRequest::internal("a", KEY, message(text))
}

async fn turn_alone(rig: &Rig, options: SessionOptions) -> Result<TurnOutcome, TurnError> {
    let place = rig.engine.enter(KEY, false, None).await?;
    rig.engine.turn_in(&place, "a", KEY, "hi", &options).await
}

#[tokio::test]
async fn a_first_turn_opens_a_new_session_and_records_which() {
    let rig = rig();
    let answer = rig.engine.turn(request("hi")).await.unwrap();
    assert_eq!(answer.text, "ok");
    assert_eq!(answer.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(answer.notes, vec!["new runtime session s1".to_string()]);
    assert_eq!(
        rig.store.sessions.lock().unwrap().get(KEY),
        Some(&KnownSession {
            id: "s1".into(),
            instance: Some("instance-1".into())
        })
    );
    let exchanges = rig.store.exchanges.lock().unwrap();
    assert_eq!(exchanges.len(), 1);
    assert_eq!(exchanges[0].2, "hi");
    assert_eq!(exchanges[0].3, Ok("ok".to_string()));
    assert_eq!(rig.store.counts.lock().unwrap().len(), 1);
    assert_eq!(rig.metrics.delivered.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_next_turn_speaks_in_the_open_session() {
    let rig = rig();
    rig.engine.turn(request("one")).await.unwrap();
    let second = rig.engine.turn(request("two")).await.unwrap();
    assert!(second.notes.is_empty());
    let sessions: Vec<String> = rig.runtime.prompts().into_iter().map(|p| p.0).collect();
    assert_eq!(sessions, vec!["s1", "s1"]);
}

/// The system section (conversations.md): before a new session's first prompt; not before the
/// next; again, with a note, once the workspace changed; and not before a resumed session's
/// prompt when the state says it was given this section there.
#[tokio::test]
async fn the_system_section_comes_first_and_again_when_it_changed() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("IDENTITY.md"), "- Name: Ada").unwrap();
    let mut plan = TurnPlan::default();
    let spec = system::SystemSpec {
        agent_id: "a".into(),
        name: None,
        emoji: None,
        description: None,
        when_to_use: None,
        workspace: workspace.path().to_path_buf(),
        max_chars: system::DEFAULT_MAX_CHARS,
        hub: Vec::new(),
    };
    plan.systems.insert("a".into(), Arc::new(spec));
    let rig = rig_with(FakeRuntime::new(), SessionSettings::default(), plan);
    rig.engine.turn(request("one")).await.unwrap();
    let second = rig.engine.turn(request("two")).await.unwrap();
    assert!(second.notes.is_empty(), "{:?}", second.notes);
    std::fs::write(workspace.path().join("IDENTITY.md"), "- Name: Grace").unwrap();
    let third = rig.engine.turn(request("three")).await.unwrap();
    assert!(
        third.notes[0].starts_with("system section given again: it changed"),
        "{:?}",
        third.notes
    );
    let prompts: Vec<String> = rig.runtime.prompts().into_iter().map(|p| p.1).collect();
    assert!(prompts[0].starts_with(system::BEGIN), "{}", prompts[0]);
    assert!(prompts[0].contains("- Name: Ada") && prompts[0].ends_with("\none"));
    assert_eq!(prompts[1], "two");
    assert!(prompts[2].contains("- Name: Grace") && prompts[2].ends_with("\nthree"));
    let given = rig.store.sections.lock().unwrap()[KEY].clone();
    assert!(given.text.contains("- Name: Grace"));
    assert_eq!(given.runtime_session_id, "s1");
}

#[tokio::test]
async fn a_session_of_another_instance_is_resumed_when_the_agent_can_load() {
    let rig = rig_with(
        FakeRuntime {
            loads: true,
            ..FakeRuntime::new()
        },
        SessionSettings::default(),
        TurnPlan::default(),
    );
    rig.store.sessions.lock().unwrap().insert(
        KEY.into(),
        KnownSession {
            id: "old".into(),
            instance: Some("instance-0".into()),
        },
    );
    let answer = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert_eq!(*rig.runtime.loaded.lock().unwrap(), vec!["old"]);
    assert_eq!(
        answer.notes,
        vec!["runtime session old resumed with session/load (pid 7)".to_string()]
    );
    assert_eq!(rig.runtime.prompts()[0], ("old".into(), "hi".into()));
}

#[tokio::test]
async fn a_new_session_in_place_of_a_lost_one_gets_the_recent_turns() {
    let rig = rig();
    rig.store.sessions.lock().unwrap().insert(
        KEY.into(),
        KnownSession {
            id: "old".into(),
            instance: Some("instance-0".into()),
        },
    );
    rig.store.turns.lock().unwrap().insert(
        KEY.into(),
        vec![
            (Provenance::Inbound, "question".into()),
            (Provenance::Acp, "a note".into()),
            (Provenance::Agent, "answer".into()),
        ],
    );
    let answer = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert!(answer.notes[0].contains("the last 2 turns were given as context"));
    let prompt = &rig.runtime.prompts()[0].1;
    assert!(prompt.starts_with("[deepcli: this conversation continues"));
    assert!(prompt.contains("user: question\nagent: answer\n"));
    assert!(prompt.ends_with("[deepcli: the new message:]\nhi"));
}

#[tokio::test]
async fn turns_of_one_session_run_in_the_order_they_came() {
    let rig = rig();
    rig.runtime
        .script(Script::slow("first", Duration::from_millis(20)));
    let mut tasks = Vec::new();
    for text in ["1", "2", "3"] {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let engine = rig.engine.clone();
        tasks.push(tokio::spawn(async move {
            engine.turn(request(text).queued(Some(tx))).await
        }));
        // The next one is sent once this one holds its place.
        let _ = rx.await;
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let order: Vec<String> = rig.runtime.prompts().into_iter().map(|p| p.1).collect();
    assert_eq!(order, vec!["1", "2", "3"]);
}

#[tokio::test]
async fn the_queue_limit_refuses_one_more_but_not_an_unbounded_message() {
    let rig = rig_with(
        FakeRuntime::new(),
        SessionSettings {
            queue_limit: 1,
            ..SessionSettings::default()
        },
        TurnPlan::default(),
    );
    let held = rig.engine.enter(KEY, false, None).await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let engine = rig.engine.clone();
    let waiting = tokio::spawn(async move { engine.enter(KEY, false, Some(tx)).await.is_ok() });
    let _ = rx.await;
    assert_eq!(rig.engine.queue_depth(KEY), 2);
    assert_eq!(rig.metrics.waiting.load(Ordering::SeqCst), 1);
    let one_more = tokio::time::timeout(Duration::from_secs(5), rig.engine.enter(KEY, false, None));
    match one_more.await {
        Ok(Err(TurnError::QueueFull { limit: 1, .. })) => {}
        Ok(other) => panic!("expected a full queue, got {:?}", other.map(|_| ())),
        Err(_) => panic!("expected a full queue, the message waits"),
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let engine = rig.engine.clone();
    let unbounded = tokio::spawn(async move { engine.enter(KEY, true, Some(tx)).await.is_ok() });
    let _ = rx.await;
    drop(held);
    assert!(waiting.await.unwrap());
    assert!(unbounded.await.unwrap());
    assert_eq!(rig.metrics.waiting.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn another_session_does_not_wait_for_a_busy_one() {
    let rig = rig();
    let _busy = rig.engine.enter(KEY, false, None).await.unwrap();
    assert!(rig.engine.try_enter(KEY).is_none());
    let other = TurnRequest::internal("a", "agent:a:other", message("x"));
    assert_eq!(rig.engine.turn(other).await.unwrap().text, "ok");
    assert_eq!(
        rig.engine.queue_depths(|k| k.split(':').nth(1)),
        HashMap::from([("a".to_string(), 1)])
    );
}

#[tokio::test]
async fn a_timeout_the_runtime_confirms_is_a_confirmed_cancel() {
    let rig = rig_with(FakeRuntime::new(), fast(), TurnPlan::default());
    rig.runtime
        .script(Script::hangs(Some(StopReason::Cancelled)));
    match turn_alone(&rig, SessionOptions::default()).await {
        Err(TurnError::TimedOut {
            confirmed: true,
            why: CancelWhy::Timeout,
            stop_reason: Some(stop),
            ..
        }) => assert_eq!(stop, "cancelled"),
        other => panic!("expected a confirmed timeout, got {other:?}"),
    }
    assert_eq!(*rig.runtime.cancels.lock().unwrap(), vec!["s1"]);
    assert_eq!(
        *rig.store.cancels.lock().unwrap(),
        vec![(KEY.into(), "timeout".into(), Some("confirmed".into()))]
    );
    // A failed turn's budget row is recorded on its own.
    assert_eq!(rig.store.counts.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_timeout_the_runtime_does_not_confirm_is_uncertain() {
    let rig = rig_with(FakeRuntime::new(), fast(), TurnPlan::default());
    rig.runtime.script(Script::hangs(None));
    match turn_alone(&rig, SessionOptions::default()).await {
        Err(TurnError::TimedOut {
            confirmed: false,
            stop_reason: None,
            ..
        }) => {}
        other => panic!("expected an uncertain timeout, got {other:?}"),
    }
    assert_eq!(
        rig.store.cancels.lock().unwrap()[0].2.as_deref(),
        Some("uncertain")
    );
}

#[tokio::test]
async fn a_timeout_answered_with_another_stop_reason_is_uncertain() {
    let rig = rig_with(FakeRuntime::new(), fast(), TurnPlan::default());
    rig.runtime.script(Script::hangs(Some(StopReason::EndTurn)));
    match turn_alone(&rig, SessionOptions::default()).await {
        Err(TurnError::TimedOut {
            confirmed: false,
            stop_reason: Some(stop),
            ..
        }) => assert_eq!(stop, "end_turn"),
        other => panic!("expected an uncertain timeout, got {other:?}"),
    }
    assert_eq!(
        rig.store.cancels.lock().unwrap()[0].2.as_deref(),
        Some("uncertain")
    );
}

#[tokio::test]
async fn a_turn_seconds_budget_shorter_than_the_timeout_cancels_first() {
    let mut plan = TurnPlan::default();
    plan.budgets.insert(
        "a".into(),
        budget::BudgetLimits {
            turn_seconds: Some(Duration::from_millis(20)),
            ..budget::BudgetLimits::default()
        },
    );
    let rig = rig_with(FakeRuntime::new(), SessionSettings::default(), plan);
    rig.runtime
        .script(Script::hangs(Some(StopReason::Cancelled)));
    match turn_alone(&rig, SessionOptions::default()).await {
        Err(TurnError::TimedOut {
            why: CancelWhy::TurnSeconds,
            ..
        }) => {}
        other => panic!("expected turnSeconds, got {other:?}"),
    }
    assert_eq!(rig.store.cancels.lock().unwrap()[0].1, "turnSeconds");
}

#[tokio::test]
async fn an_operator_cancel_of_a_running_turn_is_confirmed_by_its_stop_reason() {
    let rig = rig();
    rig.runtime
        .script(Script::hangs(Some(StopReason::Cancelled)));
    assert_eq!(
        rig.engine
            .cancel_running_turn("a", KEY, Duration::from_millis(50))
            .await,
        CancelState::NotRunning
    );
    let engine = rig.engine.clone();
    let turn = tokio::spawn(async move { engine.turn(request("long")).await });
    while rig.engine.running.watch(KEY).is_none() {
        tokio::task::yield_now().await;
    }
    let state = rig
        .engine
        .cancel_running_turn("a", KEY, Duration::from_secs(5))
        .await;
    assert_eq!(state, CancelState::Confirmed);
    let answer = turn.await.unwrap().unwrap();
    assert_eq!(answer.stop_reason, Some(StopReason::Cancelled));
    assert_eq!(
        rig.store.cancels.lock().unwrap()[0],
        (KEY.into(), "operator".into(), Some("confirmed".into()))
    );
}

#[tokio::test]
async fn a_runtime_that_fails_during_the_prompt_is_the_prompt_stage() {
    let rig = rig();
    rig.runtime.script(Script {
        fails: Some("pipe closed".into()),
        ..Script::says("")
    });
    match rig.engine.turn(request("hi")).await {
        Err(TurnError::RuntimeFailed {
            stage: Stage::Prompt,
            message,
            ..
        }) => assert_eq!(message, "pipe closed"),
        other => panic!("expected a failed prompt, got {other:?}"),
    }
    let exchanges = rig.store.exchanges.lock().unwrap();
    assert!(exchanges[0].3.as_ref().unwrap_err().contains("the prompt"));
}

#[tokio::test]
async fn a_message_withdrawn_at_its_turn_never_reaches_the_runtime() {
    let rig = rig();
    let withdrawn = rig
        .engine
        .turn(request("hi").on_start(|| Err("cancelled while it waited".into())))
        .await;
    assert!(
        matches!(withdrawn, Err(TurnError::Withdrawn(why)) if why == "cancelled while it waited")
    );
    assert!(rig.runtime.prompts().is_empty());
    assert!(rig.store.exchanges.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_oneshot_session_is_closed_after_its_reply_and_never_kept() {
    let rig = rig_with(
        FakeRuntime {
            closes: true,
            ..FakeRuntime::new()
        },
        SessionSettings::default(),
        TurnPlan::default(),
    );
    let oneshot = SessionOptions {
        oneshot: true,
        label: Some("review".into()),
        ..SessionOptions::default()
    };
    let first = turn_alone(&rig, oneshot.clone()).await.unwrap();
    assert_eq!(
        first.notes,
        vec![
            "new runtime session `review` s1 for this message only (acp.mode: oneshot)".to_string(),
            "runtime session s1 closed after the reply".to_string(),
        ]
    );
    turn_alone(&rig, oneshot).await.unwrap();
    assert_eq!(*rig.runtime.closed.lock().unwrap(), vec!["s1", "s2"]);
    assert!(rig.store.sessions.lock().unwrap().is_empty());
    assert!(rig.runtime.open.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_oneshot_session_of_an_agent_without_close_is_forgotten() {
    let rig = rig();
    let answer = turn_alone(
        &rig,
        SessionOptions {
            oneshot: true,
            ..SessionOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        answer.notes[1],
        "runtime session s1 forgotten after the reply (the agent offers no session/close)"
    );
    assert!(rig.runtime.closed.lock().unwrap().is_empty());
}

fn with_model(model: crate::config::model::Model, refuses: &[&str]) -> Rig {
    let mut plan = TurnPlan::default();
    plan.models.insert("a".into(), model);
    rig_with(
        FakeRuntime {
            model_option: Some((
                "model".into(),
                vec!["small".into(), "large".into()],
                "small".into(),
            )),
            refuses: refuses.iter().map(|r| r.to_string()).collect(),
            ..FakeRuntime::new()
        },
        SessionSettings::default(),
        plan,
    )
}

#[tokio::test]
async fn the_model_is_applied_once_to_a_new_session() {
    let rig = with_model(crate::config::model::Model::Id("vendor/large".into()), &[]);
    assert_eq!(
        rig.engine.model_report("a").unwrap().applied,
        None,
        "pending before a session opens"
    );
    let first = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert_eq!(first.notes[1], "model `large` applied");
    let second = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert!(second.notes.is_empty());
    assert_eq!(*rig.runtime.options_set.lock().unwrap(), vec!["large"]);
    let report = rig.engine.model_report("a").unwrap();
    assert_eq!(report.applied.as_deref(), Some("large"));
    assert_eq!(report.why, None);
}

#[tokio::test]
async fn a_refused_model_falls_back_in_order() {
    let rig = with_model(
        crate::config::model::Model::WithFallbacks {
            primary: "huge".into(),
            fallbacks: vec!["large".into(), "small".into()],
        },
        &["large"],
    );
    let answer = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert_eq!(
        answer.notes[1],
        "model `small` applied, a fallback: `huge` is not offered; `large` was refused: not today"
    );
}

#[tokio::test]
async fn a_budget_refusal_is_recorded_counted_and_never_prompted() {
    let mut plan = TurnPlan::default();
    plan.budgets.insert(
        "a".into(),
        budget::BudgetLimits {
            turns_per_hour: Some(1),
            ..budget::BudgetLimits::default()
        },
    );
    let rig = rig_with(FakeRuntime::new(), SessionSettings::default(), plan);
    rig.engine.turn(request("one")).await.unwrap();
    assert!(rig.engine.budget_allows_turn("a").is_err());
    match rig.engine.turn(request("two")).await {
        Err(TurnError::BudgetExceeded(refusal)) => {
            assert_eq!(refusal.limit, budget::Limit::TurnsPerHour)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(rig.runtime.prompts().len(), 1);
    assert_eq!(rig.store.refusals.lock().unwrap().len(), 1);
    assert_eq!(rig.metrics.refused.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn usage_is_what_the_session_total_grew_by() {
    let rig = rig();
    for (cost, tokens) in [(0.5, 100), (0.75, 160)] {
        rig.runtime.script(Script {
            cost_usd: Some(cost),
            tokens: Some(tokens),
            ..Script::says("ok")
        });
    }
    let first = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    let second = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    let usage = |a: &TurnOutcome| a.counted.as_ref().unwrap().usage;
    assert_eq!(
        usage(&first),
        budget::TurnUsage {
            tokens: Some(100),
            cost_micros: Some(500_000)
        }
    );
    assert_eq!(
        usage(&second),
        budget::TurnUsage {
            tokens: Some(60),
            cost_micros: Some(250_000)
        }
    );
}

#[tokio::test]
async fn a_reply_is_kept_to_its_budget() {
    let mut plan = TurnPlan::default();
    plan.budgets.insert(
        "a".into(),
        budget::BudgetLimits {
            reply_bytes: 4,
            ..budget::BudgetLimits::default()
        },
    );
    let rig = rig_with(FakeRuntime::new(), SessionSettings::default(), plan);
    rig.runtime.script(Script {
        chunks: vec!["abc".into(), "def".into()],
        ..Script::says("")
    });
    let answer = turn_alone(&rig, SessionOptions::default()).await.unwrap();
    assert!(
        answer
            .text
            .starts_with("abcd\n[deepcli: the reply was cut at 4 of its 6 bytes")
    );
}

#[tokio::test]
async fn an_agent_without_a_prompting_runtime_is_refused_before_the_queue() {
    let rig = rig();
    let request = TurnRequest::internal("b", KEY, message("hi"));
    assert!(matches!(
        rig.engine.turn(request).await,
        Err(TurnError::TakesNoPrompts { .. })
    ));
    assert_eq!(rig.engine.queue_depth(KEY), 0);
}
