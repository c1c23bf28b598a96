//! The checks as tables: each row a hop or a turn, the view, and what is decided.

use super::*;
use crate::config::model::RuntimeKind;
use crate::hub::policy::{HubAgent, Limits};

fn policy(visibility: Visibility) -> HubPolicy {
    let mut p = HubPolicy {
        visibility,
        ..HubPolicy::default()
    };
    for id in ["a", "b", "sandboxed"] {
        p.agents.insert(
            id.into(),
            HubAgent {
                id: id.into(),
                name: None,
                description: None,
                when_to_use: None,
                runtime: RuntimeKind::Acp,
                allow_agents: None,
                limits: Limits::default(),
                workspace: format!("/ws/{id}").into(),
                clamped: id == "sandboxed",
                private_network: false,
                hub_socket: None,
                artifact_max_bytes: crate::tasks::artifacts::DEFAULT_MAX_BYTES,
                artifact_quota_bytes: crate::tasks::artifacts::DEFAULT_QUOTA_BYTES,
            },
        );
    }
    p
}

fn view(p: &HubPolicy) -> HubView<'_> {
    HubView {
        policy: p,
        descends: false,
        external: false,
    }
}

fn hop<'a>(from: (&'a str, &'a str), to: (&'a str, &'a str)) -> Hop<'a> {
    Hop {
        from_agent: from.0,
        from_key: from.1,
        depth: 0,
        to_agent: to.0,
        to_key: to.1,
    }
}

/// A session: (its agent, its key).
type Session<'a> = (&'a str, &'a str);

const A_MAIN: (&str, &str) = ("a", "agent:a:main");
const A_OTHER: (&str, &str) = ("a", "agent:a:slack:direct:u1");
const A_CHILD: (&str, &str) = ("a", "agent:a:subagent:x");
const B_MAIN: (&str, &str) = ("b", "agent:b:main");
const B_CHILD: (&str, &str) = ("b", "agent:b:subagent:y");

/// What `may_see` decides: `"ok"` or the reason's code.
fn seen(view: &HubView<'_>, hop: &Hop<'_>, reading: bool) -> &'static str {
    match may_see(view, hop, reading) {
        Ok(()) => "ok",
        Err(d) => d.reason.as_str(),
    }
}

#[test]
fn visibility_decides_by_key_agent_and_tree() {
    // (visibility, target, descends, visible)
    let rows: &[(Visibility, (&str, &str), bool, bool)] = &[
        (Visibility::All, B_MAIN, false, true),
        (Visibility::All, A_MAIN, false, true),
        (Visibility::Agent, A_OTHER, false, true),
        (Visibility::Agent, B_MAIN, false, false),
        (Visibility::SelfOnly, A_MAIN, false, true),
        (Visibility::SelfOnly, A_OTHER, false, false),
        (Visibility::Tree, A_MAIN, false, true),
        (Visibility::Tree, A_CHILD, true, true),
        (Visibility::Tree, B_CHILD, true, true),
        (Visibility::Tree, A_OTHER, false, false),
    ];
    for (visibility, to, descends, want) in rows {
        let h = hop(A_MAIN, *to);
        assert_eq!(
            visible(*visibility, &h, *descends),
            *want,
            "{visibility:?} → {to:?} (descends {descends})"
        );
    }
}

#[test]
fn only_a_tree_visibility_into_another_session_looks_up_descent() {
    for (visibility, to, want) in [
        (Visibility::Tree, A_CHILD, true),
        (Visibility::Tree, A_MAIN, false),
        (Visibility::All, A_CHILD, false),
        (Visibility::Agent, A_CHILD, false),
        (Visibility::SelfOnly, A_CHILD, false),
    ] {
        assert_eq!(
            needs_descent(visibility, &hop(A_MAIN, to)),
            want,
            "{visibility:?} {to:?}"
        );
    }
}

#[test]
fn a_sandboxed_agent_reads_at_most_its_tree_but_sends_under_the_hubs_visibility() {
    let p = policy(Visibility::All);
    let v = view(&p);
    let h = hop(("sandboxed", "agent:sandboxed:main"), B_MAIN);
    assert_eq!(seen(&v, &h, true), "visibility_restricted");
    assert_eq!(seen(&v, &h, false), "ok");
    let words = may_see(&v, &h, true).unwrap_err().error;
    assert!(
        words.contains("tools.sessions.visibility: tree, at most `tree` for a sandboxed agent"),
        "{words}"
    );
    // Under the hub's own visibility, no clamp is named.
    let p = policy(Visibility::SelfOnly);
    let words = may_see(&view(&p), &hop(A_MAIN, B_MAIN), true)
        .unwrap_err()
        .error;
    assert_eq!(
        words,
        "session `agent:b:main` is not visible to you (tools.sessions.visibility: self)"
    );
}

#[test]
fn a_visible_session_of_another_agent_still_needs_agent_to_agent() {
    let mut p = policy(Visibility::All);
    // (a2a enabled, allow, from, to, decided)
    let rows: &[(bool, &[&str], Session, Session, &str)] = &[
        (true, &[], A_MAIN, B_MAIN, "ok"),
        (false, &[], A_MAIN, B_MAIN, "agent_to_agent_disabled"),
        (false, &[], A_MAIN, A_OTHER, "ok"),
        (true, &["a"], A_MAIN, B_MAIN, "agent_to_agent_not_allowed"),
        (true, &["a", "b"], A_MAIN, B_MAIN, "ok"),
        (true, &["*"], B_MAIN, A_MAIN, "ok"),
    ];
    for (enabled, allow, from, to, want) in rows {
        p.a2a_enabled = *enabled;
        p.a2a_allow = allow.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            seen(&view(&p), &hop(*from, *to), false),
            *want,
            "enabled {enabled}, allow {allow:?}: {from:?} → {to:?}"
        );
    }
}

#[test]
fn visibility_is_checked_before_agent_to_agent() {
    let mut p = policy(Visibility::SelfOnly);
    p.a2a_enabled = false;
    assert_eq!(
        seen(&view(&p), &hop(A_MAIN, B_MAIN), false),
        "visibility_restricted"
    );
}

#[test]
fn a_spawned_session_never_speaks_into_an_external_conversation() {
    let p = policy(Visibility::All);
    // (depth, external, allowed)
    for (depth, external, want) in [
        (0, true, true),
        (0, false, true),
        (1, false, true),
        (1, true, false),
        (3, true, false),
    ] {
        let v = HubView {
            external,
            ..view(&p)
        };
        let h = Hop {
            depth,
            ..hop(A_CHILD, A_OTHER)
        };
        assert_eq!(
            child_to_external(&v, &h).is_ok(),
            want,
            "depth {depth}, external {external}"
        );
    }
    let v = HubView {
        external: true,
        ..view(&p)
    };
    let denial = child_to_external(
        &v,
        &Hop {
            depth: 1,
            ..hop(A_CHILD, A_OTHER)
        },
    )
    .unwrap_err();
    assert_eq!(denial.reason, Reason::VisibilityRestricted);
    assert!(
        denial
            .error
            .starts_with("`agent:a:slack:direct:u1` is an external conversation"),
        "{}",
        denial.error
    );
}

#[test]
fn a_send_is_refused_for_visibility_before_the_external_rule() {
    let p = policy(Visibility::SelfOnly);
    let v = HubView {
        external: true,
        ..view(&p)
    };
    let h = Hop {
        depth: 1,
        ..hop(A_CHILD, A_OTHER)
    };
    let denial = accept_send(&v, &h).unwrap_err();
    assert!(
        denial.error.contains("is not visible to you"),
        "{}",
        denial.error
    );
    // Visible: the external rule decides.
    let p = policy(Visibility::All);
    let v = HubView {
        external: true,
        ..view(&p)
    };
    assert!(
        accept_send(&v, &h)
            .unwrap_err()
            .error
            .contains("external conversation")
    );
    assert!(accept_send(&view(&p), &h).is_ok());
}

fn turn<'a>(requester: Option<&'a str>, target: &'a str) -> TurnStart<'a> {
    TurnStart {
        cancelled: false,
        target_agent: target,
        requester,
        addressed: None,
    }
}

#[test]
fn a_cancelled_run_is_withdrawn_before_anything_else_is_checked() {
    let p = policy(Visibility::All);
    let t = TurnStart {
        cancelled: true,
        ..turn(Some("a"), "gone")
    };
    assert_eq!(at_turn_start(&view(&p), &t), Err(Withdraw::Cancelled));
    assert_eq!(
        Withdraw::Cancelled.why(),
        "the run was cancelled while it waited"
    );
}

#[test]
fn a_run_into_a_deleted_agent_is_withdrawn_at_its_turn() {
    let p = policy(Visibility::All);
    let refused = at_turn_start(&view(&p), &turn(None, "gone")).unwrap_err();
    assert_eq!(refused, Withdraw::TargetDeleted("gone".into()));
    assert_eq!(refused.why(), "agent `gone` was deleted (target_deleted)");
}

#[test]
fn the_operators_and_a_peers_runs_skip_agent_to_agent_at_their_turn() {
    let mut p = policy(Visibility::SelfOnly);
    p.a2a_enabled = false;
    assert_eq!(at_turn_start(&view(&p), &turn(None, "b")), Ok(()));
}

#[test]
fn agent_to_agent_turned_off_while_a_send_waited_withdraws_it() {
    let mut p = policy(Visibility::All);
    assert_eq!(at_turn_start(&view(&p), &turn(Some("a"), "b")), Ok(()));
    p.a2a_enabled = false;
    let refused = at_turn_start(&view(&p), &turn(Some("a"), "b")).unwrap_err();
    let Withdraw::Denied(denial) = &refused else {
        panic!("{refused:?}");
    };
    assert_eq!(denial.reason, Reason::AgentToAgentDisabled);
    assert!(
        refused.why().ends_with("(agent_to_agent_disabled)"),
        "{}",
        refused.why()
    );
    // The same agent always may.
    assert_eq!(at_turn_start(&view(&p), &turn(Some("a"), "a")), Ok(()));
}

#[test]
fn an_addressed_send_is_held_to_the_hubs_visibility_at_its_turn() {
    // (visibility, sender, target, descends, delivered)
    let rows: &[(Visibility, Session, Session, bool, bool)] = &[
        (
            Visibility::All,
            ("sandboxed", "agent:sandboxed:main"),
            B_MAIN,
            false,
            true,
        ),
        (Visibility::SelfOnly, A_MAIN, A_OTHER, false, false),
        (Visibility::Agent, A_MAIN, A_OTHER, false, true),
        (Visibility::Agent, A_MAIN, B_MAIN, false, false),
        (Visibility::Tree, A_MAIN, B_CHILD, true, true),
        (Visibility::Tree, A_MAIN, B_CHILD, false, false),
    ];
    for (visibility, from, to, descends, want) in rows {
        let p = policy(*visibility);
        let v = HubView {
            descends: *descends,
            ..view(&p)
        };
        let t = TurnStart {
            addressed: Some((from.1, to.1)),
            ..turn(Some(from.0), to.0)
        };
        let decided = at_turn_start(&v, &t);
        assert_eq!(
            decided.is_ok(),
            *want,
            "{visibility:?} {from:?} → {to:?}: {decided:?}"
        );
        if let Err(refused) = decided {
            assert_eq!(
                refused.why(),
                format!(
                    "session `{}` is no longer visible to `{}` (tools.sessions.visibility: {}) (visibility_restricted)",
                    to.1,
                    from.1,
                    visibility.as_str()
                )
            );
        }
    }
}

#[test]
fn a_spawn_is_not_held_to_visibility_at_its_turn() {
    let p = policy(Visibility::SelfOnly);
    // A spawn names no addressed session: its child is new.
    assert_eq!(at_turn_start(&view(&p), &turn(Some("a"), "a")), Ok(()));
}

fn counts(pair: Option<u64>, tree: Option<u64>) -> LoopCounts {
    LoopCounts {
        pair,
        tree,
        root: "agent:a:main".into(),
    }
}

#[test]
fn no_loop_bound_no_trip() {
    let none = LoopBounds::default();
    assert_eq!(
        loop_trip(none, "agent:a:main", "agent:b:main", &counts(None, None)),
        None
    );
    assert_eq!(
        loop_trip(
            none,
            "agent:a:main",
            "agent:b:main",
            &counts(Some(1000), Some(1000))
        ),
        None
    );
}

#[test]
fn a_pair_trips_at_its_bound_not_before() {
    let bounds = LoopBounds {
        pair: Some(3),
        tree: None,
    };
    // (sends counted, tripped)
    for (n, want) in [(0, false), (2, false), (3, true), (9, true)] {
        let trip = loop_trip(
            bounds,
            "agent:b:main",
            "agent:a:main",
            &counts(Some(n), None),
        );
        assert_eq!(trip.is_some(), want, "{n} sends");
        if let Some(trip) = trip {
            assert_eq!(trip.kind, "pair");
            assert_eq!(trip.scope, "agent:a:main agent:b:main");
            assert_eq!((trip.count, trip.bound), (n, 3));
            assert_eq!(trip.origin, "agent:a:main");
        }
    }
}

#[test]
fn an_open_pause_trips_every_send_of_its_scope() {
    let bounds = LoopBounds {
        pair: Some(4),
        tree: Some(10),
    };
    let pair = loop_trip(bounds, "x", "y", &counts(None, Some(0))).unwrap();
    assert_eq!((pair.kind, pair.count), ("pair", 4));
    let tree = loop_trip(bounds, "x", "y", &counts(Some(0), None)).unwrap();
    assert_eq!((tree.kind, tree.count), ("tree", 10));
}

#[test]
fn the_pair_bound_is_decided_before_the_tree_bound() {
    let bounds = LoopBounds {
        pair: Some(2),
        tree: Some(2),
    };
    let trip = loop_trip(bounds, "x", "y", &counts(Some(5), Some(5))).unwrap();
    assert_eq!(trip.kind, "pair");
    let trip = loop_trip(bounds, "x", "y", &counts(Some(1), Some(5))).unwrap();
    assert_eq!(trip.kind, "tree");
    assert_eq!(trip.scope, "agent:a:main");
    assert_eq!(loop_trip(bounds, "x", "y", &counts(Some(1), Some(1))), None);
}

#[test]
fn a_trip_says_which_bound_held() {
    let pair = Trip {
        kind: "pair",
        scope: pair_scope("agent:b:main", "agent:a:main"),
        count: 6,
        bound: 6,
        origin: "agent:a:main".into(),
    };
    assert_eq!(
        pair.sentence(),
        "loop paused: sessions agent:a:main and agent:b:main have sent each other 6 messages within the window (budgets.loopTurns 6)"
    );
    let tree = Trip {
        kind: "tree",
        scope: "agent:a:main".into(),
        ..pair
    };
    assert_eq!(
        tree.sentence(),
        "loop paused: the sessions of the tree under agent:a:main have started 6 runs (budgets.treeTurns 6)"
    );
    assert_eq!(pair_scope("b", "a"), pair_scope("a", "b"));
}
