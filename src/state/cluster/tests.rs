//! The claims on both backends: SQLite and a real PostgreSQL.

use std::time::Duration;

use super::*;
use crate::state::db::DbError;
use crate::state::db::testing::TestDb;

#[test]
fn a_claim_is_one_replicas_until_it_expires_then_anothers_with_a_greater_token() {
    for db in TestDb::states() {
        let mut a = db.connect();
        let mut b = db.connect();
        let name = db.name();
        let first = claim(&mut a.conn(), ClaimKind::Agent, "echo", "a", 300)
            .unwrap()
            .expect("free: taken");
        assert_eq!(
            claim(&mut b.conn(), ClaimKind::Agent, "echo", "b", 300).unwrap(),
            None,
            "{name}: held by a, unexpired"
        );
        let renewed = claim(&mut a.conn(), ClaimKind::Agent, "echo", "a", 300)
            .unwrap()
            .unwrap();
        assert_eq!(renewed.token, first.token, "{name}: renewed, same token");
        assert!(renewed.expires_ms >= first.expires_ms, "{name}");

        std::thread::sleep(Duration::from_millis(350));
        let taken = claim(&mut b.conn(), ClaimKind::Agent, "echo", "b", 60_000)
            .unwrap()
            .expect("expired: taken over");
        assert!(taken.token > first.token, "{name}: a new token");
        assert_eq!(
            held(&b.conn(), ClaimKind::Agent, "echo")
                .unwrap()
                .unwrap()
                .holder,
            "b"
        );

        // a, frozen past its time, resumes and writes for its old claim: fenced.
        let mut conn = a.conn();
        let tx = conn.transaction(Behavior::Write).unwrap();
        let err = check_fence(&tx, ClaimKind::Agent, "echo", "a", first.token).unwrap_err();
        assert!(
            matches!(&err, DbError::Fenced(m) if m.contains("b holds it now")),
            "{name}: {err}"
        );
        drop(tx);
        let mut conn = b.conn();
        let tx = conn.transaction(Behavior::Write).unwrap();
        check_fence(&tx, ClaimKind::Agent, "echo", "b", taken.token).unwrap();
        drop(tx);

        // a gives back what it no longer holds: nothing changes.
        assert!(!release(&mut a.conn(), ClaimKind::Agent, "echo", "a", first.token).unwrap());
        assert_eq!(
            held(&a.conn(), ClaimKind::Agent, "echo").unwrap(),
            Some(taken.clone()),
            "{name}"
        );
        assert!(release(&mut b.conn(), ClaimKind::Agent, "echo", "b", taken.token).unwrap());
        assert_eq!(held(&a.conn(), ClaimKind::Agent, "echo").unwrap(), None);
    }
}

#[test]
fn a_claim_that_expired_is_fenced_even_when_nobody_took_it() {
    for db in TestDb::states() {
        let mut a = db.connect();
        let c = claim(
            &mut a.conn(),
            ClaimKind::Account,
            "telegram/default",
            "a",
            100,
        )
        .unwrap()
        .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let mut conn = a.conn();
        let tx = conn.transaction(Behavior::Write).unwrap();
        let err =
            check_fence(&tx, ClaimKind::Account, "telegram/default", "a", c.token).unwrap_err();
        assert!(
            err.to_string().contains("it expired"),
            "{}: {err}",
            db.name()
        );
        drop(tx);
        // Renewed after it expired: a new token, so the old one stays fenced.
        let again = claim(
            &mut a.conn(),
            ClaimKind::Account,
            "telegram/default",
            "a",
            60_000,
        )
        .unwrap()
        .unwrap();
        assert!(again.token > c.token, "{}", db.name());
    }
}

/// Replicas racing for one free claim: exactly one gets it. Each races on its own connection
/// from its own thread; the read that decides and the write are one transaction under the
/// state's write lock, so no two see it free.
#[test]
fn replicas_racing_for_a_claim_get_it_once() {
    for db in TestDb::states() {
        let db = &db;
        for round in 0..5 {
            let name = format!("agent-{round}");
            let barrier = std::sync::Barrier::new(4);
            let winners: Vec<bool> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|i| {
                        let (barrier, name) = (&barrier, &name);
                        s.spawn(move || {
                            let mut c = db.connect();
                            barrier.wait();
                            claim(
                                &mut c.conn(),
                                ClaimKind::Agent,
                                name,
                                &format!("r{i}"),
                                60_000,
                            )
                            .unwrap()
                            .is_some()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                winners.iter().filter(|w| **w).count(),
                1,
                "{}: round {round}: {winners:?}",
                db.name()
            );
        }
    }
}

#[test]
fn a_replica_that_leaves_gives_back_its_claims() {
    for db in TestDb::states() {
        let mut c = db.connect();
        heartbeat(&mut c.conn(), "a", "http://10.0.0.1:7777", true).unwrap();
        heartbeat(&mut c.conn(), "b", "http://10.0.0.2:7777", true).unwrap();
        heartbeat(&mut c.conn(), "a", "http://10.0.0.9:7777", false).unwrap();
        let seen = replicas(&c.conn(), 60_000).unwrap();
        assert_eq!(
            seen.iter()
                .map(|r| (r.id.as_str(), r.url.as_str()))
                .collect::<Vec<_>>(),
            [("a", "http://10.0.0.9:7777"), ("b", "http://10.0.0.2:7777")],
            "{}",
            db.name()
        );
        claim(&mut c.conn(), ClaimKind::Leader, "", "a", 60_000).unwrap();
        claim(&mut c.conn(), ClaimKind::Agent, "echo", "a", 60_000).unwrap();
        claim(&mut c.conn(), ClaimKind::Agent, "coder", "b", 60_000).unwrap();
        leave(&mut c.conn(), "a").unwrap();
        assert_eq!(held(&c.conn(), ClaimKind::Leader, "").unwrap(), None);
        let agents: Vec<_> = claims(&c.conn(), ClaimKind::Agent)
            .unwrap()
            .into_iter()
            .map(|(name, c)| (name, c.holder))
            .collect();
        assert_eq!(
            agents,
            [("coder".to_owned(), "b".to_owned())],
            "{}",
            db.name()
        );
        assert_eq!(
            replicas(&c.conn(), 60_000)
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect::<Vec<_>>(),
            ["b"]
        );
    }
}

/// The state's clock is the database's: both backends give milliseconds since 1970, close to
/// this host's.
#[test]
fn the_states_clock_is_milliseconds_since_1970() {
    for db in TestDb::states() {
        let mut c = db.connect();
        let ms = now_ms(&c.conn()).unwrap();
        let here = jiff::Timestamp::now().as_millisecond();
        assert!((ms - here).abs() < 5_000, "{}: {ms} vs {here}", db.name());
    }
}

/// A round renews what a replica holds in one statement: its unexpired claims, with their
/// tokens, and none of another's or of its own that expired.
#[test]
fn every_claim_a_replica_holds_is_renewed_at_once_and_no_other() {
    for db in TestDb::states() {
        let mut c = db.connect();
        let name = db.name();
        let echo = claim(&mut c.conn(), ClaimKind::Agent, "echo", "a", 60_000)
            .unwrap()
            .unwrap();
        let tg = claim(
            &mut c.conn(),
            ClaimKind::Account,
            "telegram/default",
            "a",
            60_000,
        )
        .unwrap()
        .unwrap();
        claim(&mut c.conn(), ClaimKind::Agent, "other", "b", 60_000)
            .unwrap()
            .unwrap();
        claim(&mut c.conn(), ClaimKind::Agent, "stale", "a", 1)
            .unwrap()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let renewed = renew_all(&mut c.conn(), "a", 120_000).unwrap();
        let mut got: Vec<(ClaimKind, &str, i64)> = renewed
            .iter()
            .map(|((k, n), t)| (*k, n.as_str(), *t))
            .collect();
        got.sort_by_key(|(_, n, _)| n.to_string());
        assert_eq!(
            got,
            [
                (ClaimKind::Agent, "echo", echo.token),
                (ClaimKind::Account, "telegram/default", tg.token)
            ],
            "{name}"
        );
        let now = held(&c.conn(), ClaimKind::Agent, "echo").unwrap().unwrap();
        assert!(now.expires_ms > echo.expires_ms, "{name}: renewed");
        let stale = held(&c.conn(), ClaimKind::Agent, "stale").unwrap().unwrap();
        assert!(
            stale.expires_ms < now.expires_ms - 60_000,
            "{name}: not renewed"
        );
    }
}
