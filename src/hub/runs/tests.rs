//! Run transitions and the reply-back limit, without a runtime: how a turn's end becomes a
//! run's state, what follows a refused record, and how many turns the loop takes.

use super::*;

fn answered(text: &str, stop: Option<&str>) -> TurnEnd {
    TurnEnd::Answered {
        text: text.into(),
        stop_reason: stop.map(StopReason::parse),
        runtime: Duration::from_millis(5),
        files: Vec::new(),
    }
}

#[test]
fn a_turns_end_decides_the_runs_state() {
    // (end, cancelled before its turn, state, note)
    let rows: Vec<(TurnEnd, bool, RunState, &str)> = vec![
        (
            answered("hi", Some("end_turn")),
            false,
            RunState::Completed,
            "answered (stopReason end_turn)",
        ),
        (
            answered("hi", None),
            false,
            RunState::Completed,
            "answered (stopReason unknown)",
        ),
        (
            answered("", Some("cancelled")),
            false,
            RunState::Cancelled,
            "the runtime confirmed the cancel (stopReason cancelled)",
        ),
        (
            TurnEnd::Withdrawn("gone".into()),
            false,
            RunState::Failed,
            "withdrawn before its turn: gone",
        ),
        (
            TurnEnd::Withdrawn("the run was cancelled while it waited".into()),
            true,
            RunState::Cancelled,
            "withdrawn before its turn: the run was cancelled while it waited",
        ),
        (
            TurnEnd::Uncertain("died".into()),
            false,
            RunState::Uncertain,
            "the runtime failed during the turn: its outcome cannot be known",
        ),
        (
            TurnEnd::TimedOut("slow".into()),
            false,
            RunState::TimedOut,
            "timed out; session/cancel sent",
        ),
        (
            TurnEnd::RuntimeDown("down".into()),
            false,
            RunState::Failed,
            "delivery failed",
        ),
        (
            TurnEnd::Failed("no".into()),
            false,
            RunState::Failed,
            "delivery failed",
        ),
    ];
    for (end, cancelled, state, note) in rows {
        let (next, outcome) = settle(&end, cancelled);
        assert_eq!((next, outcome.note.as_str()), (state, note), "{end:?}");
        match &end {
            TurnEnd::Answered { text, .. } => {
                assert_eq!(outcome.reply.as_deref(), Some(text.as_str()));
                assert_eq!(outcome.error, None);
            }
            TurnEnd::Withdrawn(why) => assert_eq!(outcome.error.as_ref(), Some(why)),
            _ => assert_eq!(outcome.error, end.error()),
        }
    }
}

#[test]
fn a_turn_that_did_not_answer_says_why() {
    assert_eq!(answered("x", None).error(), None);
    assert_eq!(
        TurnEnd::Withdrawn("gone".into()).error().unwrap(),
        "the message was withdrawn before it reached the agent: gone"
    );
    assert_eq!(TurnEnd::TimedOut("slow".into()).error().unwrap(), "slow");
}

#[test]
fn an_answer_after_a_cancel_was_asked_for_is_uncertain() {
    let (state, outcome) = after_record(
        Moved::Refused(RunState::CancelRequested),
        RunState::Completed,
    )
    .unwrap();
    assert_eq!(state, RunState::Uncertain);
    assert!(
        outcome.note.contains("without confirming it"),
        "{}",
        outcome.note
    );
}

#[test]
fn a_cancel_nobody_asked_for_fails_the_run() {
    // The run waits for a person; the runtime ends the turn as cancelled by itself.
    let (state, outcome) = after_record(
        Moved::Refused(RunState::AwaitingApproval),
        RunState::Cancelled,
    )
    .unwrap();
    assert_eq!(state, RunState::Failed);
    assert_eq!(
        outcome.error.as_deref(),
        Some("the runtime ended the turn as cancelled by itself")
    );
}

#[test]
fn a_recorded_end_or_a_late_one_after_a_final_state_needs_nothing_more() {
    for (moved, next) in [
        (Moved::From(RunState::Running), RunState::Completed),
        (Moved::From(RunState::Running), RunState::Failed),
        (Moved::Refused(RunState::Cancelled), RunState::Completed),
        (Moved::Refused(RunState::Uncertain), RunState::Completed),
        (Moved::Missing, RunState::Completed),
    ] {
        assert!(after_record(moved, next).is_none(), "{moved:?} → {next:?}");
    }
}

#[test]
fn the_reply_back_loop_takes_at_most_its_limit() {
    let mut count = ReplyBack::new(3);
    let turns: Vec<u32> = std::iter::from_fn(|| count.next("more")).collect();
    assert_eq!(turns, [1, 2, 3]);
    assert_eq!(count.next("more"), None);
    assert_eq!(
        count.summary("more"),
        "reply-back loop: 3 turns (of at most 3)"
    );
}

#[test]
fn a_stop_token_ends_the_reply_back_loop_early() {
    let mut count = ReplyBack::new(5);
    assert_eq!(count.next("hello"), Some(1));
    assert_eq!(count.next("REPLY_SKIP"), None);
    assert_eq!(
        count.summary("REPLY_SKIP"),
        "reply-back loop: 1 turn (of at most 5), stopped by a stop token"
    );
    // A first reply that is already a stop token gets no turn at all.
    let mut count = ReplyBack::new(5);
    assert_eq!(count.next(""), None);
    assert_eq!(
        count.summary(""),
        "reply-back loop: 0 turns (of at most 5), stopped by a stop token"
    );
}

#[test]
fn a_runs_operator_documents_keep_their_json_shape() {
    let run = RunRecord {
        run_id: "r1".into(),
        reply: Some("x".repeat(2001)),
        ..RunRecord::new(
            RunKind::Send,
            "sessions_send",
            (Some("a".into()), Some("agent:a:main".into())),
            "b",
            "agent:b:main",
            "hi".into(),
        )
    };
    let detail = RunDetail {
        run: RunView::of(&run),
        events: vec![RunEvent {
            at: "t1".into(),
            state: Some(RunState::Accepted),
            note: "n".into(),
        }],
    };
    let doc = serde_json::to_value(&detail).unwrap();
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "runId",
            "kind",
            "sourceTool",
            "state",
            "requesterAgentId",
            "requesterSessionKey",
            "targetAgentId",
            "targetSessionKey",
            "correlationId",
            "mode",
            "cleanup",
            "timeoutSeconds",
            "message",
            "reply",
            "error",
            "createdAt",
            "startedAt",
            "finishedAt",
            "events"
        ]
    );
    assert_eq!(doc["reply"].as_str().unwrap().chars().count(), 2001);
    assert!(doc["reply"].as_str().unwrap().ends_with('…'));
    assert_eq!(
        doc["events"].to_string(),
        r#"[{"at":"t1","state":"accepted","note":"n"}]"#
    );
    let closed = SessionClosed::Closed {
        session_key: "k".into(),
        runtime: Some("closed".into()),
        tokens_revoked: 2,
        child_closed: true,
        trashed: false,
    };
    assert_eq!(
        serde_json::to_string(&closed).unwrap(),
        r#"{"sessionKey":"k","runtime":"closed","tokensRevoked":2,"childClosed":true,"trashed":false}"#
    );
    assert_eq!(
        (closed.runtime_shown(), closed.tokens_shown()),
        ("\"closed\"".to_string(), "2".to_string())
    );
    let failed = SessionClosed::Failed {
        session_key: "k".into(),
        error: "e".into(),
    };
    assert_eq!(
        serde_json::to_string(&failed).unwrap(),
        r#"{"sessionKey":"k","error":"e"}"#
    );
    assert_eq!(
        (failed.runtime_shown(), failed.tokens_shown()),
        ("null".to_string(), "null".to_string())
    );
}
