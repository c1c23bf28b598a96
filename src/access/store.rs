//! The Access layer's rows in the state database (migrations 2, 3, 6): sessions, the persistent
//! sessions of `acp` bindings, transcripts, deliveries (idempotency), each agent's last external
//! route (where heartbeat replies go) and dead letters. Another layer that needs these rows
//! (the Hub's listings, histories and trashed children) calls the statements here.
//!
//! A connection of its own, so that a delivery never waits for an apply; every call is short
//! and runs on the blocking pool.

use rusqlite::Connection;

use super::outbox::{
    self, Cause, Conversation, Failed, OutboxCounts, Outgoing, PostedPrompt, Queued,
};
use crate::sessions::GivenSection;
use crate::state::db::{Backend, Behavior, DbResult, Optional, Query, Row, ToValue, params};
use crate::state::search_index::{folded, query_words, word_spans};
use crate::state::{Provenance, StateDir, StateError};

pub(crate) struct AccessStore {
    pub(super) db: crate::state::LayerConnection,
    /// The session key of each transcript append, once committed: the console's live view
    /// listens (docs/console.md); nobody listening costs one failed send.
    appended: tokio::sync::broadcast::Sender<std::sync::Arc<str>>,
}

/// One transcript row to append.
pub(crate) struct Turn {
    pub provenance: Provenance,
    pub message_id: Option<String>,
    pub sender: Option<serde_json::Value>,
    pub text: String,
    pub route: Option<serde_json::Value>,
}

impl Turn {
    /// A line about the session itself (how it was opened), provenance `acp`.
    pub(crate) fn note(text: String) -> Turn {
        Turn {
            provenance: Provenance::Acp,
            message_id: None,
            sender: None,
            text,
            route: None,
        }
    }
}

/// A transcript row as read back.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TranscriptRow {
    pub provenance: Provenance,
    pub message_id: Option<String>,
    pub text: String,
    pub at: String,
}

/// A delivered envelope's key: its conversation (channel, account, peer, thread) and the
/// platform's message id, which is unique only within a conversation (Telegram numbers
/// messages per chat, Slack per channel).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct DeliveryKey {
    pub channel: String,
    pub account_id: String,
    /// The normalized peer kind; empty when the envelope named no peer.
    pub peer_kind: String,
    /// The peer id as sent; empty when the envelope named no peer.
    pub peer_id: String,
    /// The thread id, trimmed; empty when none.
    pub thread_id: String,
    pub message_id: String,
}

impl DeliveryKey {
    /// The key of an envelope that `result` routed: its conversation (the channel normalized,
    /// the account the route names) and its message id.
    pub(crate) fn of(
        envelope: &super::Envelope,
        result: &crate::routing::RouteResult,
    ) -> DeliveryKey {
        let input = &envelope.route;
        let peer = input.peer.as_ref();
        DeliveryKey {
            channel: crate::ids::channel(&input.channel).into_owned(),
            account_id: result.account_id.to_string(),
            peer_kind: peer.map_or(String::new(), |p| {
                crate::ids::PeerKind::parse(&p.kind).as_str().to_string()
            }),
            peer_id: peer.map_or(String::new(), |p| p.id.clone()),
            thread_id: envelope
                .thread_id
                .as_deref()
                .map_or("", str::trim)
                .to_string(),
            message_id: envelope.message_id.clone(),
        }
    }
}

/// The conversation an agent last took a message from (state table `agent_routes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastRoute {
    pub session_key: String,
    pub channel: String,
    pub account_id: String,
    /// Normalized; empty when the envelope named no peer.
    pub peer_kind: String,
    pub peer_id: String,
    /// Empty when none.
    pub thread_id: String,
    pub at: String,
}

/// The agent a session key belongs to: `agent:<id>:…`.
fn agent_of(session_key: &str) -> Option<&str> {
    let rest = session_key.strip_prefix("agent:")?;
    rest.split_once(':').map(|(agent, _)| agent)
}

/// [`agent_of`], for the rest of the Access layer.
pub(super) fn agent_of_key(session_key: &str) -> Option<&str> {
    agent_of(session_key)
}

/// The runtime session a session key maps to, and the runtime instance that issued it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeSession {
    pub id: String,
    /// `None` for a mapping recorded before instances were (state migration 3).
    pub instance: Option<String>,
}

impl AccessStore {
    /// Who holds `agent`'s claim now, unexpired, and where it is reached: what a replica
    /// asks when its own view of the placement is out of date (docs/scale-out.md).
    pub(crate) fn agent_holder(
        &self,
        agent: &str,
    ) -> Result<Option<super::placement::Holder>, StateError> {
        use crate::state::cluster::{self, ClaimKind};
        let found = self
            .db
            .query(|c| cluster::holder_at(c, ClaimKind::Agent, agent))?;
        Ok(found.map(|(claim, url)| super::placement::Holder {
            replica: claim.holder,
            url,
            token: claim.token,
        }))
    }

    /// Opens the state database (migrating it) with a connection for the Access layer.
    pub(crate) fn open(dir: &StateDir) -> Result<AccessStore, StateError> {
        Ok(AccessStore {
            db: crate::state::LayerConnection::open(dir, "access")?,
            appended: tokio::sync::broadcast::channel(1024).0,
        })
    }

    /// Told the session key of every transcript line appended from now on (after its commit).
    pub(crate) fn transcript_appends(
        &self,
    ) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        self.appended.subscribe()
    }

    fn appended_to(&self, session_key: &str) {
        if self.appended.receiver_count() > 0 {
            let _ = self.appended.send(std::sync::Arc::from(session_key));
        }
    }

    /// The response first sent for this envelope, if it was delivered.
    pub(crate) fn delivered(&self, key: &DeliveryKey) -> Result<Option<String>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT response FROM deliveries WHERE channel = ?1 AND account_id = ?2
                 AND peer_kind = ?3 AND peer_id = ?4 AND thread_id = ?5 AND message_id = ?6",
                params![
                    key.channel,
                    key.account_id,
                    key.peer_kind,
                    key.peer_id,
                    key.thread_id,
                    key.message_id
                ],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// When the session was first opened (RFC 3339); `None` before its first turn.
    pub(crate) fn session_started(&self, session_key: &str) -> Result<Option<String>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT created_at FROM sessions WHERE session_key = ?1",
                params![session_key],
                |r| r.get(0),
            )
            .optional()
        })
    }

    /// The runtime session a session key maps to.
    pub(crate) fn runtime_session(
        &self,
        session_key: &str,
    ) -> Result<Option<RuntimeSession>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT runtime_session_id, runtime_instance FROM sessions WHERE session_key = ?1",
                params![session_key],
                |r| {
                    let id: Option<String> = r.get(0)?;
                    let instance: Option<String> = r.get(1)?;
                    Ok(id.map(|id| RuntimeSession { id, instance }))
                },
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// Maps a session key to `session`, a runtime session of `session.instance`.
    pub(crate) fn set_runtime_session(
        &self,
        session_key: &str,
        agent_id: &str,
        session: &RuntimeSession,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "INSERT INTO sessions (session_key, agent_id, runtime_session_id, runtime_instance, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (session_key) DO UPDATE SET agent_id = ?2, runtime_session_id = ?3, runtime_instance = ?4, updated_at = ?5",
                params![session_key, agent_id, session.id, session.instance, now],
            )
            .map(drop)
        })
    }

    /// The system section `session_key` was last given.
    pub(crate) fn given_section(
        &self,
        session_key: &str,
    ) -> Result<Option<GivenSection>, StateError> {
        self.db
            .query(|c| AccessStore::section_given(&*c, session_key))
    }

    /// [`AccessStore::given_section`] on connection `c` (the Hub's, for `sessions show`).
    pub(crate) fn section_given(
        c: &impl Query,
        session_key: &str,
    ) -> DbResult<Option<GivenSection>> {
        c.query_row(
            "SELECT runtime_session_id, hash, text, at FROM system_sections WHERE session_key = ?1",
            params![session_key],
            |r| {
                Ok(GivenSection {
                    runtime_session_id: r.get(0)?,
                    hash: r.get(1)?,
                    text: r.get(2)?,
                    at: r.get(3)?,
                })
            },
        )
        .optional()
    }

    /// Records the system section `session_key` was given, in place of the one before.
    pub(crate) fn record_section(
        &self,
        session_key: &str,
        agent_id: &str,
        given: &GivenSection,
    ) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "INSERT INTO system_sections (session_key, agent_id, runtime_session_id, hash, text, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (session_key) DO UPDATE SET agent_id = ?2, runtime_session_id = ?3,
                     hash = ?4, text = ?5, at = ?6",
                params![
                    session_key,
                    agent_id,
                    given.runtime_session_id,
                    given.hash,
                    given.text,
                    given.at
                ],
            )
            .map(drop)
        })
    }

    /// Whether a session of `agent_id` was ever given a system section.
    pub(crate) fn agent_was_told(&self, agent_id: &str) -> Result<bool, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM system_sections WHERE agent_id = ?1)",
                params![agent_id],
                |r| r.get(0),
            )
        })
    }

    /// The session key of an `acp` binding: `agent:<id>:acp:<uuid>`, the UUID made on first use.
    pub(crate) fn acp_session_key(
        &self,
        binding_key: &str,
        agent_id: &str,
    ) -> Result<String, StateError> {
        let fresh =
            crate::routing::session::spawned_key(agent_id, crate::routing::session::Spawned::Acp);
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            tx.execute(
                "INSERT INTO acp_bindings (binding_key, session_key, created_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (binding_key) DO NOTHING",
                params![binding_key, fresh, now],
            )?;
            let key = tx.query_row(
                "SELECT session_key FROM acp_bindings WHERE binding_key = ?1",
                params![binding_key],
                |r| r.get(0),
            )?;
            tx.commit()?;
            Ok(key)
        })
    }

    /// The last `limit` turns of a session's current segment (since its last `/new`), oldest
    /// first.
    pub(crate) fn transcript(
        &self,
        session_key: &str,
        limit: usize,
    ) -> Result<Vec<TranscriptRow>, StateError> {
        self.db.query(|c| {
            let mut rows = c.query_map(
                "SELECT provenance, message_id, text, at FROM transcript WHERE session_key = ?1
                   AND id >= coalesce((SELECT max(id) FROM transcript
                                       WHERE session_key = ?1 AND provenance = 'reset'), 0)
                 ORDER BY id DESC LIMIT ?2",
                params![session_key, limit as i64],
                |r| {
                    Ok(TranscriptRow {
                        provenance: r.get(0)?,
                        message_id: r.get(1)?,
                        text: r.get(2)?,
                        at: r.get(3)?,
                    })
                },
            )?;
            rows.reverse();
            Ok(rows)
        })
    }

    /// A new session under `session_key` (`session.reset`, or a chat's `/new` when `answered`
    /// gives its delivery): the runtime session forgotten, the session's start now, and a
    /// `reset` line (`line`) beginning the transcript's next segment; one transaction.
    pub(crate) fn restart_session(
        &self,
        session_key: &str,
        line: &str,
        answered: Option<(&DeliveryKey, &str)>,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            tx.execute(
                "UPDATE sessions SET runtime_session_id = NULL, runtime_instance = NULL,
                     created_at = ?2, updated_at = ?2
                 WHERE session_key = ?1",
                params![session_key, now],
            )?;
            tx.execute(
                "INSERT INTO transcript (session_key, provenance, text, at) VALUES (?1, ?2, ?3, ?4)",
                params![session_key, Provenance::Reset, line, now],
            )?;
            if let Some((key, response)) = answered {
                insert_delivery(
                    &tx,
                    key,
                    session_key,
                    response,
                    &Recorded::default(),
                    None,
                    &now,
                )?;
            }
            tx.commit()
        })?;
        self.appended_to(session_key);
        Ok(())
    }

    /// When session `session_key`'s current segment began, and when it last had a transcript
    /// line (its start when none): what `session.reset` measures. `None` for a session not
    /// opened yet.
    pub(crate) fn session_times(
        &self,
        session_key: &str,
    ) -> Result<Option<(String, String)>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT s.created_at,
                        coalesce((SELECT t.at FROM transcript t WHERE t.session_key = s.session_key
                                  ORDER BY t.id DESC LIMIT 1), s.created_at)
                 FROM sessions s WHERE s.session_key = ?1",
                params![session_key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
        })
    }

    /// Records an answered envelope that reached no agent (an approval command): its response
    /// only, so a redelivery gets it again; no transcript turn, no last route.
    pub(crate) fn record_answer_only(
        &self,
        session_key: &str,
        key: &DeliveryKey,
        response: &str,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            insert_delivery(
                &*c,
                key,
                session_key,
                response,
                &Recorded::default(),
                None,
                &now,
            )
        })
    }

    /// Records an envelope the inbound policy gated: its answer (`response`, so a redelivery
    /// gets it again) and the line its session's history shows of it (`sender` and `text` as
    /// the envelope gave them), placed among the transcript's lines by a number from the
    /// transcript's own id sequence ([`next_line_id`]); one transaction. No transcript row:
    /// the agent never sees it. Announced like an append, so a live view shows it.
    pub(super) fn record_gated(
        &self,
        session_key: &str,
        key: &DeliveryKey,
        response: &str,
        sender: Option<&serde_json::Value>,
        text: &str,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        let sender = sender.map(|s| s.to_string());
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let line = GatedLine {
                id: next_line_id(&tx)?,
                sender: sender.as_deref(),
                text,
            };
            insert_delivery(
                &tx,
                key,
                session_key,
                response,
                &Recorded::default(),
                Some(&line),
                &now,
            )?;
            tx.commit()
        })?;
        self.appended_to(session_key);
        Ok(())
    }

    /// Appends turns to a transcript and, when `delivery` is given, records the delivery with
    /// the response that was sent: one transaction, so a redelivery finds both or neither.
    pub(crate) fn record(
        &self,
        session_key: &str,
        turns: &[Turn],
        delivery: Option<(&DeliveryKey, &str)>,
    ) -> Result<(), StateError> {
        self.record_turn(session_key, turns, delivery, None)
    }

    /// [`AccessStore::record`], with the turn's row in `budget_events` (what its runtime
    /// reported it used) in the same transaction.
    pub(crate) fn record_turn(
        &self,
        session_key: &str,
        turns: &[Turn],
        delivery: Option<(&DeliveryKey, &str)>,
        counted: Option<&CountedTurn>,
    ) -> Result<(), StateError> {
        self.record_all(session_key, turns, delivery, counted, None)
    }

    /// Appends turns to a transcript and queues `said` in the outbox, one transaction: what
    /// deepcli says on its own is in the transcript and on its way, or neither.
    pub(crate) fn record_saying(
        &self,
        session_key: &str,
        turns: &[Turn],
        said: &Outgoing,
    ) -> Result<(), StateError> {
        self.record_all(session_key, turns, None, None, Some(said))
    }

    fn record_all(
        &self,
        session_key: &str,
        turns: &[Turn],
        delivery: Option<(&DeliveryKey, &str)>,
        counted: Option<&CountedTurn>,
        said: Option<&Outgoing>,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            if let Some(said) = said {
                outbox::insert(&tx, said, &now)?;
            }
            if let Some(t) = counted {
                tx.execute(
                    "INSERT INTO budget_events (agent_id, kind, at_ms, at, session_key, run_id, tokens, cost_micros)
                     VALUES (?1, 'turn', ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        t.agent_id,
                        t.at_ms,
                        now,
                        session_key,
                        t.run_id,
                        t.usage.tokens.map(|n| n as i64),
                        t.usage.cost_micros.map(|n| n as i64)
                    ],
                )?;
            }
            let mut recorded = Recorded::default();
            for t in turns {
                let id: i64 = tx.query_row(
                    "INSERT INTO transcript (session_key, provenance, message_id, sender, text, route, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
                    params![
                        session_key,
                        t.provenance,
                        t.message_id,
                        t.sender.as_ref().map(|s| s.to_string()),
                        t.text,
                        t.route.as_ref().map(|r| r.to_string()),
                        now
                    ],
                    |r| r.get(0),
                )?;
                match t.provenance {
                    Provenance::Inbound
                        if delivery.is_some_and(|(k, _)| t.message_id.as_ref() == Some(&k.message_id)) =>
                    {
                        recorded.asked.push(id);
                    }
                    Provenance::Agent if recorded.reply.is_none() && !recorded.asked.is_empty() => {
                        recorded.reply = Some(id);
                    }
                    _ => {}
                }
            }
            if let Some((key, response)) = delivery {
                // The agent's last external route: where its heartbeat replies go.
                if let Some(agent) = agent_of(session_key) {
                    tx.execute(
                        "INSERT INTO agent_routes (agent_id, session_key, channel, account_id, peer_kind, peer_id, thread_id, at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                         ON CONFLICT (agent_id) DO UPDATE SET session_key = ?2, channel = ?3, account_id = ?4,
                             peer_kind = ?5, peer_id = ?6, thread_id = ?7, at = ?8",
                        params![
                            agent,
                            session_key,
                            key.channel,
                            key.account_id,
                            key.peer_kind,
                            key.peer_id,
                            key.thread_id,
                            now
                        ],
                    )?;
                }
                insert_delivery(&tx, key, session_key, response, &recorded, None, &now)?;
                // The turn has an outcome on record: no longer only begun.
                forget_begun(&tx, key)?;
            }
            tx.commit()
        })?;
        if !turns.is_empty() {
            self.appended_to(session_key);
        }
        Ok(())
    }

    /// Queues `said` on its own (an approval's prompt: the approval is filed already).
    pub(crate) fn say(&self, said: &Outgoing) -> Result<i64, StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            let seq = outbox::insert(&tx, said, &now)?;
            tx.commit()?;
            Ok(seq)
        })
    }

    /// What was said for `cause` `cause_id` (the first such row), posted or not.
    pub(crate) fn outbox_said(
        &self,
        cause: Cause,
        cause_id: &str,
    ) -> Result<Option<Outgoing>, StateError> {
        self.db.query(|c| outbox::said_for(&*c, cause, cause_id))
    }

    /// Task `task_id`'s newest verdict message (cause `task-verdict`).
    pub(crate) fn outbox_task_verdict(
        &self,
        task_id: &str,
    ) -> Result<Option<Outgoing>, StateError> {
        self.db.query(|c| outbox::task_verdict(&*c, task_id))
    }

    /// The oldest row of each conversation that is not posted yet, oldest first.
    pub(crate) fn outbox_heads(&self) -> Result<Vec<Queued>, StateError> {
        self.db.query(|c| outbox::heads(&*c))
    }

    /// The oldest row of conversation `to` that is not posted yet.
    pub(crate) fn outbox_head(&self, to: &Conversation) -> Result<Option<Queued>, StateError> {
        self.db.query(|c| outbox::head(&*c, to))
    }

    pub(crate) fn outbox_counts(&self) -> Result<OutboxCounts, StateError> {
        self.db.query(|c| outbox::counts(&*c))
    }

    /// The platform took the first `pieces` pieces of outbox row `seq`.
    pub(crate) fn outbox_progress(&self, seq: i64, pieces: usize) -> Result<(), StateError> {
        self.db.write(|c| outbox::progress(&*c, seq, pieces))
    }

    /// Outbox row `seq` is posted by `carrier` (`posted_id`: the platform's id of its last
    /// piece).
    pub(crate) fn outbox_posted(
        &self,
        seq: i64,
        carrier: &str,
        posted_id: Option<&str>,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db
            .write(|c| outbox::posted(&*c, seq, carrier, posted_id, &now))
    }

    /// Outbox row `seq` waits for a carrier (`why`): whether it was not held before.
    pub(crate) fn outbox_hold(&self, seq: i64, why: &str) -> Result<bool, StateError> {
        self.db.write(|c| outbox::hold(&*c, seq, why))
    }

    /// Outbox row `seq` could not be posted: dead, with its dead letter, one transaction.
    pub(crate) fn outbox_dead(
        &self,
        seq: i64,
        carrier: &str,
        failed: &Failed,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            let tx = c.transaction(Behavior::Write)?;
            outbox::dead(&tx, seq, carrier, failed, &now)?;
            tx.commit()
        })
    }

    /// Approval `approval_id`'s prompt as it was posted, if it was.
    pub(crate) fn outbox_prompt(
        &self,
        approval_id: &str,
    ) -> Result<Option<PostedPrompt>, StateError> {
        self.db.query(|c| outbox::prompt(&*c, approval_id))
    }

    /// Agent `agent_id`'s last external route: the conversation of the last message delivered
    /// to it from a channel account.
    pub(crate) fn last_route(&self, agent_id: &str) -> Result<Option<LastRoute>, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT session_key, channel, account_id, peer_kind, peer_id, thread_id, at
                 FROM agent_routes WHERE agent_id = ?1",
                params![agent_id],
                last_route_of,
            )
            .optional()
        })
    }

    /// The external conversation session `session_key` last took an envelope from: delivered,
    /// or its turn still running.
    pub(crate) fn session_route(&self, session_key: &str) -> Result<Option<LastRoute>, StateError> {
        self.db.query(|c| {
            c.query_row(
                // A turn still running took its envelope too (its delivery is recorded when
                // it ends): the newest of both, the running one on a tie. (PostgreSQL's
                // tables carry a `rowid` of their own.)
                "SELECT session_key, channel, account_id, peer_kind, peer_id, thread_id, at FROM (
                     SELECT session_key, channel, account_id, peer_kind, peer_id, thread_id, at,
                            0 AS running, rowid AS n
                       FROM deliveries WHERE session_key = ?1
                     UNION ALL
                     SELECT session_key, channel, account_id, peer_kind, peer_id, thread_id, at,
                            1 AS running, rowid AS n
                       FROM turns_started WHERE session_key = ?1) AS routes
                 ORDER BY at DESC, running DESC, n DESC LIMIT 1",
                params![session_key],
                last_route_of,
            )
            .optional()
        })
    }

    pub(crate) fn dead_letter(
        &self,
        key: &DeliveryKey,
        url: &str,
        body: &str,
        attempts: u32,
        last_error: &str,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "INSERT INTO dead_letters (channel, account_id, peer_kind, peer_id, thread_id, message_id, url, body, attempts, last_error, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    key.channel,
                    key.account_id,
                    key.peer_kind,
                    key.peer_id,
                    key.thread_id,
                    key.message_id,
                    url,
                    body,
                    i64::from(attempts),
                    last_error,
                    now
                ],
            )
            .map(drop)
        })
    }
}

/// A [`LastRoute`] of a row `session_key, channel, account_id, peer_kind, peer_id, thread_id,
/// at`.
fn last_route_of(r: &Row<'_>) -> DbResult<LastRoute> {
    Ok(LastRoute {
        session_key: r.get(0)?,
        channel: r.get(1)?,
        account_id: r.get(2)?,
        peer_kind: r.get(3)?,
        peer_id: r.get(4)?,
        thread_id: r.get(5)?,
        at: r.get(6)?,
    })
}

/// A [`FoundRow`] of a row `id, session_key, provenance, at, text`, its snippet around
/// `words`.
fn found_row(r: &Row<'_>, words: &str) -> DbResult<FoundRow> {
    let text: String = r.get(4)?;
    Ok(FoundRow {
        id: r.get(0)?,
        session_key: r.get(1)?,
        provenance: r.get(2)?,
        at: r.get(3)?,
        snippet: snippet(&text, words),
    })
}

/// A turn as `budget_events` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CountedTurn {
    pub agent_id: String,
    /// When the turn began, ms since the epoch.
    pub at_ms: i64,
    pub run_id: Option<String>,
    pub usage: super::budget::TurnUsage,
}

/// A turn or spawn a budget refused, as `budget_events` records it.
#[derive(Debug, Clone)]
pub(crate) struct RefusalRow {
    pub agent_id: String,
    pub session_key: Option<String>,
    pub run_id: Option<String>,
    pub refusal: super::budget::BudgetRefusal,
}

/// The budget events since `?1`, oldest first, in the order of `budget_events_by_time` (its
/// rowid too): ordered by `id`, SQLite read all 1.5 M events of a year to skip the sort, 1.2 s
/// at each start.
const BUDGET_ROWS: &str = "SELECT agent_id, kind, at_ms, tokens, cost_micros FROM budget_events
     WHERE at_ms > ?1 AND kind IN ('turn', 'spawn') ORDER BY at_ms, id";

/// [`BUDGET_ROWS`] of one agent.
const AGENT_BUDGET_ROWS: &str =
    "SELECT agent_id, kind, at_ms, tokens, cost_micros FROM budget_events
     WHERE at_ms > ?1 AND kind IN ('turn', 'spawn') AND agent_id = ?2 ORDER BY at_ms, id";

impl AccessStore {
    /// The budget events of the last day, oldest first: what [`super::budget::Budgets::load`]
    /// counts from after a restart.
    pub(crate) fn budget_rows(
        &self,
        now_ms: i64,
    ) -> Result<Vec<super::budget::BudgetRow>, StateError> {
        self.budget_rows_of(None, now_ms)
    }

    /// [`AccessStore::budget_rows`] of `agent` only, when given.
    pub(crate) fn budget_rows_of(
        &self,
        agent: Option<&str>,
        now_ms: i64,
    ) -> Result<Vec<super::budget::BudgetRow>, StateError> {
        use super::budget::{BudgetRow, EventKind};
        self.db.query(|c| {
            let since = now_ms - 2 * 86_400_000;
            let row = |r: &Row<'_>| {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<String>(1)?,
                    r.get::<i64>(2)?,
                    r.get::<Option<i64>>(3)?,
                    r.get::<Option<i64>>(4)?,
                ))
            };
            let rows = match agent {
                None => c.query_map(BUDGET_ROWS, params![since], row)?,
                Some(agent) => c.query_map(AGENT_BUDGET_ROWS, params![since, agent], row)?,
            };
            Ok(rows
                .into_iter()
                .filter_map(|(agent_id, kind, at_ms, tokens, cost)| {
                    Some(BudgetRow {
                        agent_id,
                        kind: EventKind::parse(&kind)?,
                        at_ms,
                        tokens: tokens.map(|n| n.max(0) as u64),
                        cost_micros: cost.map(|n| n.max(0) as u64),
                    })
                })
                .collect())
        })
    }

    /// Records a spawn (by session `session_key`) counted against `agent_id`'s
    /// `spawnsPerHour`.
    pub(crate) fn record_spawn(
        &self,
        agent_id: &str,
        at_ms: i64,
        session_key: &str,
    ) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "INSERT INTO budget_events (agent_id, kind, at_ms, at, session_key)
                 VALUES (?1, 'spawn', ?2, ?3, ?4)",
                params![agent_id, at_ms, crate::clock::now(), session_key],
            )
            .map(drop)
        })
    }

    /// Records a budget's refusal.
    pub(crate) fn record_refusal(&self, row: &RefusalRow) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "INSERT INTO budget_events (agent_id, kind, at_ms, at, session_key, run_id, budget, detail)
                 VALUES (?1, 'refusal', ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    row.agent_id,
                    super::budget::now_ms(),
                    crate::clock::now(),
                    row.session_key,
                    row.run_id,
                    row.refusal.limit.as_str(),
                    row.refusal.to_string()
                ],
            )
            .map(drop)
        })
    }

    /// Records that a cancel of `session_key`'s turn was asked for; its row id.
    pub(crate) fn cancel_requested(
        &self,
        agent_id: &str,
        session_key: &str,
        run_id: Option<&str>,
        why: &str,
    ) -> Result<i64, StateError> {
        self.db.write(|c| {
            c.query_row(
                "INSERT INTO turn_cancels (agent_id, session_key, run_id, why, state, requested_at)
                 VALUES (?1, ?2, ?3, ?4, 'requested', ?5) RETURNING id",
                params![agent_id, session_key, run_id, why, crate::clock::now()],
                |r| r.get(0),
            )
        })
    }

    /// Records what came of cancel `id`: `confirmed` or `uncertain`, with a note.
    pub(crate) fn cancel_decided(
        &self,
        id: i64,
        state: &str,
        note: &str,
    ) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE turn_cancels SET state = ?2, note = ?3, decided_at = ?4 WHERE id = ?1",
                params![id, state, note, crate::clock::now()],
            )
            .map(drop)
        })
    }
}

impl AccessStore {
    /// Notes the trace delivery `key` was handled in (traces on): the audit shows it.
    pub(crate) fn note_trace(&self, key: &DeliveryKey, trace_id: &str) -> Result<(), StateError> {
        self.db.write(|c| {
            c.execute(
                "UPDATE deliveries SET trace_id = ?7
                 WHERE channel = ?1 AND account_id = ?2 AND peer_kind = ?3 AND peer_id = ?4
                   AND thread_id = ?5 AND message_id = ?6",
                params![
                    key.channel,
                    key.account_id,
                    key.peer_kind,
                    key.peer_id,
                    key.thread_id,
                    key.message_id,
                    trace_id
                ],
            )
            .map(drop)
        })
    }
}

/// Records a delivered envelope's `response`, for its redelivery (idempotency key `key`).
/// The transcript rows a delivery recorded, kept with it for the audit: the message's rows,
/// and the agent's first reply after them.
#[derive(Debug, Default)]
struct Recorded {
    asked: Vec<i64>,
    reply: Option<i64>,
}

/// The line a gated envelope's delivery keeps for its session's history (migration 27).
struct GatedLine<'a> {
    id: i64,
    /// The envelope's `sender` (JSON).
    sender: Option<&'a str>,
    text: &'a str,
}

fn insert_delivery(
    c: &impl Query,
    key: &DeliveryKey,
    session_key: &str,
    response: &str,
    recorded: &Recorded,
    gated: Option<&GatedLine<'_>>,
    at: &str,
) -> DbResult<()> {
    let asked: Vec<String> = recorded.asked.iter().map(i64::to_string).collect();
    c.execute(
        "INSERT INTO deliveries (channel, account_id, peer_kind, peer_id, thread_id, message_id, session_key, response, at,
                                 asked_rows, reply_row, line_id, sender, text)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            key.channel,
            key.account_id,
            key.peer_kind,
            key.peer_id,
            key.thread_id,
            key.message_id,
            session_key,
            response,
            at,
            asked.join(","),
            recorded.reply,
            gated.map(|g| g.id),
            gated.and_then(|g| g.sender),
            gated.map(|g| g.text)
        ],
    )?;
    Ok(())
}

/// The next number of the transcript's id sequence, taken for a gated message's line: the
/// transcript's ids are `AUTOINCREMENT` (an identity on PostgreSQL), so the database keeps
/// the largest one given (SQLite in `sqlite_sequence`) and gives every later row a larger
/// one. Taking a number there (in the caller's write transaction) puts the gated line after
/// every row recorded before it and before every row recorded after it, and no transcript row
/// is ever given the same id: the session's history is one sequence of ids, which its pages,
/// `sessions watch` and the live view's `after` already follow. `max(id)` covers a sequence
/// that is missing (no row was ever appended) or behind (rows put back with their ids by a
/// trash restore).
fn next_line_id(c: &impl Query) -> DbResult<i64> {
    if c.backend() == Backend::Postgres {
        // `nextval` moves the sequence on whatever the `setval` after it finds.
        return c.query_row(
            "SELECT setval(pg_get_serial_sequence('transcript', 'id'),
                           greatest(nextval(pg_get_serial_sequence('transcript', 'id')),
                                    coalesce((SELECT max(id) FROM transcript), 0) + 1))",
            params![],
            |r| r.get(0),
        );
    }
    let taken = c
        .query_row(
            "UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT max(id) FROM transcript), 0)) + 1
             WHERE name = 'transcript' RETURNING seq",
            params![],
            |r| r.get(0),
        )
        .optional()?;
    match taken {
        Some(id) => Ok(id),
        None => c.query_row(
            "INSERT INTO sqlite_sequence (name, seq)
             VALUES ('transcript', coalesce((SELECT max(id) FROM transcript), 0) + 1) RETURNING seq",
            params![],
            |r| r.get(0),
        ),
    }
}

/// A transcript row as another layer shows it (the Hub's `sessions_history`), or a gated
/// inbound message's line among them (`gated`: the operator's history only).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryRow {
    pub id: i64,
    pub provenance: Provenance,
    pub message_id: Option<String>,
    pub sender: super::sender::Sender,
    pub text: String,
    pub at: String,
    pub gated: Option<super::gated_line::Gated>,
}

/// A transcript line a search across the sessions found (`sessions/search`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundRow {
    pub id: i64,
    pub session_key: String,
    pub provenance: Provenance,
    pub at: String,
    /// The words around the match, `…` where the text was cut.
    pub snippet: String,
}

/// The full-text query (SQLite FTS5, table `transcript_fts`, migration 24) that finds lines
/// with every word of `words`, the last one also as a prefix (`deplo` finds `deploy`): each
/// word quoted, so no word is read as FTS5 syntax. `None` when there is no word.
pub(crate) fn fts_query(words: &str) -> Option<String> {
    let terms: Vec<String> = words
        .split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    let last = terms.len().checked_sub(1)?;
    Some(
        terms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == last {
                    format!("{t}*")
                } else {
                    t.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The words of `text` around the first that matches one of `words` as the search does (any
/// case, without accents; the last word also as a prefix): [`SNIPPET_WORDS`] of them, `…`
/// where the text was cut; the whole text when it is that short.
pub(crate) fn snippet(text: &str, words: &str) -> String {
    let tokens: Vec<(usize, usize)> = word_spans(text);
    if tokens.len() <= SNIPPET_WORDS {
        return text.to_string();
    }
    let terms: Vec<String> = query_words(words);
    let last = terms.len().checked_sub(1);
    let matches = |token: &str| {
        let token = folded(token);
        terms.iter().enumerate().any(|(i, term)| {
            token == *term || (Some(i) == last && token.starts_with(term.as_str()))
        })
    };
    let first = tokens
        .iter()
        .position(|&(a, b)| matches(&text[a..b]))
        .unwrap_or(0);
    let from = first
        .saturating_sub(SNIPPET_WORDS / 4)
        .min(tokens.len() - SNIPPET_WORDS);
    let to = from + SNIPPET_WORDS - 1;
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.push_str(&text[tokens[from].0..tokens[to].1]);
    if to + 1 < tokens.len() {
        out.push('…');
    }
    out
}

/// The words of a found line a snippet shows.
const SNIPPET_WORDS: usize = 16;

/// A session in the order of its last activity (table `session_activity`, migration 22).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ActiveSession {
    pub session_key: String,
    /// The agent its key names, else the one recorded; `None` while neither is known.
    pub agent_id: Option<String>,
    pub last_at: String,
    /// Whether a runtime session or a transcript row is on record for it (the Access layer's
    /// half of "the session exists"; a spawn is the Hub's).
    pub on_record: bool,
}

/// A session's newest transcript row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastMessage {
    pub provenance: Provenance,
    pub text: String,
}

/// Where a walk of the sessions by activity goes on from: past the session `.1` last active
/// at `.0`.
pub(crate) type ActivityMark = (String, String);

/// The trash entry a closed session's transcript goes to.
pub(crate) fn trashed_entry(session_key: &str) -> String {
    format!("session:{session_key}")
}

/// What the Hub reads and writes of the Access layer's tables. The statements are the Access
/// layer's; they run on the connection they are given, so the Hub keeps using its own (a
/// tool call never waits for a delivery's record) and its reads stay in one transaction.
impl AccessStore {
    /// The sessions by last activity, newest first (of one second: by key), `limit` of them
    /// from past `after` on, of agent `agent` alone if named, and only those whose key
    /// contains `contains` (any case; the key names the channel, the peer kind and id) if
    /// given: a walk of an index, however many sessions there are.
    pub(crate) fn sessions_by_activity(
        c: &impl Query,
        agent: Option<&str>,
        contains: Option<&str>,
        after: Option<&ActivityMark>,
        limit: usize,
    ) -> DbResult<Vec<ActiveSession>> {
        let mut sql = String::from(
            "SELECT a.session_key, a.agent_id, a.last_at,
                    EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = a.session_key)
                    OR EXISTS (SELECT 1 FROM transcript t WHERE t.session_key = a.session_key)
             FROM session_activity a WHERE true",
        );
        let mut args: Vec<&dyn ToValue> = Vec::new();
        if let Some(agent) = &agent {
            args.push(agent);
            sql.push_str(&format!(" AND a.agent_id = ?{}", args.len()));
        }
        if let Some(contains) = &contains {
            let found = match c.backend() {
                Backend::Sqlite => "instr",
                Backend::Postgres => "strpos",
            };
            args.push(contains);
            let n = args.len();
            sql.push_str(&format!(
                " AND {found}(lower(a.session_key), lower(?{n})) > 0"
            ));
        }
        if let Some((at, key)) = after {
            args.extend([at as &dyn ToValue, key]);
            let (at, key) = (args.len() - 1, args.len());
            sql.push_str(&format!(
                " AND (a.last_at < ?{at} OR (a.last_at = ?{at} AND a.session_key > ?{key}))"
            ));
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        args.push(&limit);
        sql.push_str(&format!(
            " ORDER BY a.last_at DESC, a.session_key LIMIT ?{}",
            args.len()
        ));
        c.query_map(&sql, &args, |r| {
            Ok(ActiveSession {
                session_key: r.get(0)?,
                agent_id: r.get(1)?,
                last_at: r.get(2)?,
                on_record: r.get(3)?,
            })
        })
    }

    /// The transcript lines of every session (not the trashed ones) with every word of
    /// `words` ([`fts_query`]), newest first: `limit` of them, older than line `before` if
    /// given. An index lookup (the search index, `state::search_index`), however many lines
    /// the transcript holds; a line the index has not taken yet (it follows the transcript
    /// within a checkpoint's interval) is not found yet.
    pub(crate) fn search_transcript(
        c: &Connection,
        words: &str,
        before: Option<i64>,
        limit: usize,
    ) -> DbResult<Vec<FoundRow>> {
        let Some(query) = fts_query(words) else {
            return Ok(Vec::new());
        };
        crate::state::search_index::attach(c)?;
        Query::query_map(
            c,
            "SELECT t.id, t.session_key, t.provenance, t.at, t.text
             FROM search.words w JOIN transcript t ON t.id = w.rowid
             WHERE w.words MATCH ?1 AND w.rowid < ?2
             ORDER BY w.rowid DESC LIMIT ?3",
            params![
                query,
                before.unwrap_or(i64::MAX),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |r| found_row(r, words),
        )
    }

    /// [`AccessStore::search_transcript`] on PostgreSQL: through `transcript_words`, the
    /// `tsvector` of each line's words ([`crate::state::search_index::pg_step`]) under its GIN
    /// index, every word of `words` folded as the index keeps them, the last one also as a
    /// prefix.
    pub(crate) fn search_postgres(
        c: &impl Query,
        words: &str,
        before: Option<i64>,
        limit: usize,
    ) -> DbResult<Vec<FoundRow>> {
        let terms = query_words(words);
        let Some(last) = terms.len().checked_sub(1) else {
            return Ok(Vec::new());
        };
        // Letters and digits only: nothing in a term is `tsquery` syntax.
        let query = terms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == last {
                    format!("'{t}':*")
                } else {
                    format!("'{t}'")
                }
            })
            .collect::<Vec<_>>()
            .join(" & ");
        c.query_map(
            "SELECT t.id, t.session_key, t.provenance, t.at, t.text
             FROM transcript_words w JOIN transcript t ON t.id = w.id
             WHERE w.words @@ CAST(CAST(?1 AS TEXT) AS tsquery) AND w.id < ?2
             ORDER BY w.id DESC LIMIT ?3",
            params![
                query,
                before.unwrap_or(i64::MAX),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |r| found_row(r, words),
        )
    }

    /// A transcript row of session `session_key` at `at` (for another layer's tests).
    #[cfg(test)]
    pub(crate) fn put_row_at(c: &impl Query, session_key: &str, at: &str) -> DbResult<()> {
        c.execute(
            "INSERT INTO transcript (session_key, provenance, text, at) VALUES (?1, 'inbound', 'hi', ?2)",
            params![session_key, at],
        )
        .map(drop)
    }

    /// Session `session_key`'s runtime session of agent `agent`, used last at `at`: made, or
    /// its use moved (for another layer's tests).
    #[cfg(test)]
    pub(crate) fn put_session_at(
        c: &impl Query,
        session_key: &str,
        agent: &str,
        at: &str,
    ) -> DbResult<()> {
        c.execute(
            "INSERT INTO sessions (session_key, agent_id, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
             ON CONFLICT (session_key) DO UPDATE SET updated_at = ?3",
            params![session_key, agent, at],
        )
        .map(drop)
    }

    /// Session `session_key`'s newest transcript row.
    pub(crate) fn last_message(c: &impl Query, session_key: &str) -> DbResult<Option<LastMessage>> {
        c.query_row(
            "SELECT provenance, text FROM transcript WHERE session_key = ?1 ORDER BY id DESC LIMIT 1",
            params![session_key],
            |r| {
                Ok(LastMessage {
                    provenance: r.get(0)?,
                    text: r.get(1)?,
                })
            },
        )
        .optional()
    }

    /// Whether a session key has a runtime session or a transcript.
    pub(crate) fn session_on_record(c: &impl Query, session_key: &str) -> DbResult<bool> {
        c.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE session_key = ?1)
                 OR EXISTS (SELECT 1 FROM transcript WHERE session_key = ?1)",
            params![session_key],
            |r| r.get(0),
        )
    }

    /// When session `session_key` last did anything the Access layer saw: its newest
    /// transcript row or its runtime session's last use (RFC 3339); empty when neither.
    pub(crate) fn session_last_activity(c: &impl Query, session_key: &str) -> DbResult<String> {
        let larger = c.backend().greatest();
        c.query_row(
            &format!(
                "SELECT {larger}(coalesce((SELECT max(t.at) FROM transcript t WHERE t.session_key = ?1), ''),
                        coalesce((SELECT x.updated_at FROM sessions x WHERE x.session_key = ?1), ''))"
            ),
            params![session_key],
            |r| r.get(0),
        )
    }

    /// A page of a session's transcript, newest last: the `limit` rows before the newest
    /// `offset`, of the current segment (from its last `/new` on) unless `all`. With `gated`
    /// (the operator's history, never an agent's), the session's gated inbound messages are
    /// lines among them, in the one sequence of ids ([`next_line_id`]): one statement merges
    /// the two, each read newest first through its index. From the trash tables when the
    /// session was trashed (its transcript only).
    pub(crate) fn history_page(
        c: &impl Query,
        session_key: &str,
        limit: usize,
        offset: usize,
        all: bool,
        gated: bool,
    ) -> DbResult<Vec<HistoryRow>> {
        let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
        let read = |sql: &str, key: &str| -> DbResult<Vec<HistoryRow>> {
            c.query_map(sql, params![key, limit as i64, offset as i64], |r| {
                let provenance = r.get(1)?;
                let sender: Option<serde_json::Value> = parse(r.get(3)?);
                let route: Option<serde_json::Value> = parse(r.get(6)?);
                let reason: Option<String> = r.get(7)?;
                Ok(HistoryRow {
                    id: r.get(0)?,
                    provenance,
                    message_id: r.get(2)?,
                    sender: super::sender::Sender::of_row(
                        session_key,
                        provenance,
                        sender.as_ref(),
                        route.as_ref(),
                    ),
                    text: r.get(4)?,
                    at: r.get(5)?,
                    gated: match reason {
                        Some(reason) => Some(super::gated_line::Gated {
                            reason,
                            rule: r.get::<Option<String>>(8)?.unwrap_or_default(),
                        }),
                        None => None,
                    },
                })
            })
        };
        let mut rows = read(&history_sql(c.backend(), all, gated), session_key)?;
        if offset == 0 && rows.iter().all(|r| r.gated.is_some()) {
            let trashed = read(
                "SELECT id, provenance, message_id, sender, text, at, route, NULL, NULL
                 FROM trash_transcript WHERE entry = ?1 ORDER BY id DESC LIMIT ?2 OFFSET ?3",
                &trashed_entry(session_key),
            )?;
            if !trashed.is_empty() {
                rows = trashed;
            }
        }
        rows.reverse();
        Ok(rows)
    }

    /// Moves a session's transcript and session row into the trash tables, under entry
    /// `session:<key>`, in the caller's write transaction `tx`: the session is gone from
    /// every listing, its words kept for the operator.
    pub(crate) fn trash_session_in(tx: &impl Query, session_key: &str) -> DbResult<()> {
        let entry = trashed_entry(session_key);
        tx.execute(
            "INSERT INTO trash_transcript (entry, id, session_key, provenance, message_id, sender, text, route, at)
             SELECT ?1, id, session_key, provenance, message_id, sender, text, route, at FROM transcript WHERE session_key = ?2",
            params![entry, session_key],
        )?;
        tx.execute(
            "DELETE FROM transcript WHERE session_key = ?1",
            params![session_key],
        )?;
        tx.execute(
            "INSERT INTO trash_sessions (entry, session_key, agent_id, runtime_session_id, runtime_instance, created_at, updated_at)
             SELECT ?1, session_key, agent_id, runtime_session_id, runtime_instance, created_at, updated_at FROM sessions WHERE session_key = ?2",
            params![entry, session_key],
        )?;
        tx.execute(
            "DELETE FROM sessions WHERE session_key = ?1",
            params![session_key],
        )?;
        Ok(())
    }
}

/// The statement of [`AccessStore::history_page`]: `?1` the session, `?2` the limit, `?3`
/// the offset; rows `id, provenance, message_id, sender, text, at, route, gate reason, gate
/// rule`, newest first. A gated line's reason and rule are read out of its recorded answer
/// here, so nothing else of that answer (a pairing code) is ever read.
fn history_sql(backend: Backend, all: bool, gated: bool) -> String {
    // Where the current segment begins: its `reset` line.
    const SEGMENT: &str = "WITH segment (first) AS MATERIALIZED (
             SELECT coalesce(max(id), 0) FROM transcript
              WHERE session_key = ?1 AND provenance = 'reset') ";
    const LINES: &str = "SELECT id, provenance, message_id, sender, text, at, route, NULL, NULL
           FROM transcript WHERE session_key = ?1 ";
    const IN_SEGMENT: &str = "AND id >= (SELECT first FROM segment)";
    const NEWEST_FIRST: &str = " ORDER BY 1 DESC LIMIT ?2 OFFSET ?3";
    // The answer's route (JSON), and its gate's reason and rule (text).
    let (route, reason, rule) = match backend {
        Backend::Sqlite => (
            "json_extract(response, '$.route')",
            "json_extract(response, '$.gated.reason')",
            "json_extract(response, '$.gated.rule')",
        ),
        Backend::Postgres => (
            "(response::jsonb -> 'route')::text",
            "response::jsonb #>> '{gated,reason}'",
            "response::jsonb #>> '{gated,rule}'",
        ),
    };
    let gated_lines = format!(
        " UNION ALL
         SELECT line_id, 'inbound', message_id, sender, coalesce(text, ''), at, {route}, {reason}, {rule}
           FROM deliveries WHERE session_key = ?1 AND line_id IS NOT NULL "
    );
    match (all, gated) {
        (true, false) => format!("{LINES}{NEWEST_FIRST}"),
        (false, false) => format!("{SEGMENT}{LINES}{IN_SEGMENT}{NEWEST_FIRST}"),
        (true, true) => format!("{LINES}{gated_lines}{NEWEST_FIRST}"),
        (false, true) => format!(
            "{SEGMENT}{LINES}{IN_SEGMENT}{gated_lines}AND line_id >= (SELECT first FROM segment){NEWEST_FIRST}"
        ),
    }
}

/// Deletes `key`'s begun turn, in the caller's transaction.
pub(super) fn forget_begun(c: &impl Query, key: &DeliveryKey) -> DbResult<usize> {
    c.execute(
        "DELETE FROM turns_started WHERE channel = ?1 AND account_id = ?2 AND peer_kind = ?3
             AND peer_id = ?4 AND thread_id = ?5 AND message_id = ?6",
        params![
            key.channel,
            key.account_id,
            key.peer_kind,
            key.peer_id,
            key.thread_id,
            key.message_id
        ],
    )
}

/// Runs `test` on a fresh store on each backend: SQLite in a temporary directory, then
/// PostgreSQL in a schema of its own.
#[cfg(test)]
pub(super) fn on_both_backends(test: impl Fn(&AccessStore)) {
    let tmp = tempfile::tempdir().unwrap();
    test(&AccessStore::open(&StateDir::new(tmp.path())).unwrap());
    let (_tmp, _schema, postgres) = crate::state::postgres_state();
    test(&AccessStore::open(&postgres).unwrap());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last day's budget events are found through the index on their time, not by
    /// reading every event of the year.
    #[test]
    fn the_last_days_budget_events_are_read_through_their_index() {
        let tmp = tempfile::tempdir().unwrap();
        crate::state::create_for_tests(tmp.path());
        let conn = rusqlite::Connection::open(StateDir::new(tmp.path()).db()).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {BUDGET_ROWS}"))
            .unwrap()
            .query_map([0], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert!(
            plan.iter().any(|l| l.contains("budget_events_by_time"))
                && !plan.iter().any(|l| l.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }

    fn turn(provenance: Provenance, message_id: Option<&str>, text: &str) -> Turn {
        Turn {
            provenance,
            message_id: message_id.map(str::to_string),
            sender: None,
            text: text.into(),
            route: None,
        }
    }

    #[test]
    fn a_delivery_keeps_the_transcript_rows_it_recorded() {
        on_both_backends(|store| {
            let key = DeliveryKey {
                channel: "telegram".into(),
                account_id: "default".into(),
                peer_kind: "direct".into(),
                peer_id: "7".into(),
                thread_id: String::new(),
                message_id: "m1".into(),
            };
            let session = "agent:a:telegram:direct:7";
            // Another session's rows first: the ids are the table's, not the session's.
            store
                .record(
                    "agent:b:main",
                    &[turn(Provenance::Inbound, Some("x"), "x")],
                    None,
                )
                .unwrap();
            let turns = [
                turn(Provenance::Acp, None, "opened"),
                turn(Provenance::Inbound, Some("m1"), "hello"),
                turn(Provenance::Inbound, Some("m0"), "kept from before"),
                turn(Provenance::Agent, None, "hi"),
                turn(Provenance::Agent, None, "and more"),
            ];
            store.record(session, &turns, Some((&key, "{}"))).unwrap();
            let (asked, reply, ids): (String, Option<i64>, Vec<(i64, String)>) = store
                .db
                .query(|c| {
                    let (asked, reply) = c.query_row(
                        "SELECT asked_rows, reply_row FROM deliveries WHERE message_id = 'm1'",
                        params![],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    let ids = c.query_map(
                        "SELECT id, text FROM transcript WHERE session_key = ?1 ORDER BY id",
                        params![session],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?;
                    Ok((asked, reply, ids))
                })
                .unwrap();
            let id = |text: &str| ids.iter().find(|(_, t)| t == text).unwrap().0;
            assert_eq!(asked, id("hello").to_string());
            assert_eq!(reply, Some(id("hi")));

            // A delivery that recorded no message (an approval command's answer): known empty.
            let other = DeliveryKey {
                message_id: "m2".into(),
                ..key
            };
            store.record_answer_only(session, &other, "{}").unwrap();
            let kept: (Option<String>, Option<i64>) = store
                .db
                .query(|c| {
                    c.query_row(
                        "SELECT asked_rows, reply_row FROM deliveries WHERE message_id = 'm2'",
                        params![],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                })
                .unwrap();
            assert_eq!(kept, (Some(String::new()), None));
            // The session's route is the delivery's.
            let route = store.session_route(session).unwrap().unwrap();
            assert_eq!(
                (route.peer_id.as_str(), route.channel.as_str()),
                ("7", "telegram")
            );
            assert_eq!(store.last_route("a").unwrap(), Some(route));
        });
    }

    /// Every statement of the store, on both backends: what one writes, another reads back.
    #[test]
    fn sessions_sections_routes_budgets_and_the_trash_on_both_backends() {
        on_both_backends(|store| {
            let session = "agent:a:telegram:direct:7";
            // A runtime session, mapped and remapped.
            assert_eq!(store.runtime_session(session).unwrap(), None);
            assert_eq!(store.session_times(session).unwrap(), None);
            let first = RuntimeSession {
                id: "s-1".into(),
                instance: Some("i-1".into()),
            };
            store.set_runtime_session(session, "a", &first).unwrap();
            let second = RuntimeSession {
                id: "s-2".into(),
                instance: None,
            };
            store.set_runtime_session(session, "a", &second).unwrap();
            assert_eq!(store.runtime_session(session).unwrap(), Some(second));
            let started = store.session_started(session).unwrap().unwrap();
            // The session's times: its start, and its start again while it has no line.
            let (began, last) = store.session_times(session).unwrap().unwrap();
            assert_eq!(
                (began.as_str(), last.as_str()),
                (started.as_str(), started.as_str())
            );

            // An `acp` binding's key is made once.
            let bound = store.acp_session_key("b-1", "a").unwrap();
            assert!(bound.starts_with("agent:a:acp:"), "{bound}");
            assert_eq!(store.acp_session_key("b-1", "a").unwrap(), bound);

            // A system section, replaced.
            assert!(!store.agent_was_told("a").unwrap());
            for hash in ["h1", "h2"] {
                let given = GivenSection {
                    runtime_session_id: "s-2".into(),
                    hash: hash.into(),
                    text: format!("section {hash}"),
                    at: "2026-01-01T00:00:00Z".into(),
                };
                store.record_section(session, "a", &given).unwrap();
            }
            assert_eq!(store.given_section(session).unwrap().unwrap().hash, "h2");
            assert!(store.agent_was_told("a").unwrap());

            // A `/new`: the runtime session forgotten, a segment begun.
            store
                .record(
                    session,
                    &[turn(Provenance::Inbound, Some("m1"), "before")],
                    None,
                )
                .unwrap();
            store.restart_session(session, "new session", None).unwrap();
            assert_eq!(store.runtime_session(session).unwrap(), None);
            store
                .record(
                    session,
                    &[turn(Provenance::Inbound, Some("m2"), "after")],
                    None,
                )
                .unwrap();
            let texts: Vec<String> = store
                .transcript(session, 10)
                .unwrap()
                .into_iter()
                .map(|t| t.text)
                .collect();
            assert_eq!(texts, ["new session", "after"]);

            // The sessions by activity: the transcript's and the runtime sessions' triggers.
            let listed = store
                .db
                .query(|c| {
                    AccessStore::sessions_by_activity(&*c, Some("a"), Some("TELEGRAM"), None, 10)
                })
                .unwrap();
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert_eq!(listed[0].session_key, session);
            assert_eq!(listed[0].agent_id.as_deref(), Some("a"));
            assert!(listed[0].on_record);
            let past = (listed[0].last_at.clone(), listed[0].session_key.clone());
            let rest = store
                .db
                .query(|c| AccessStore::sessions_by_activity(&*c, None, None, Some(&past), 10))
                .unwrap();
            assert!(rest.iter().all(|a| a.session_key != session), "{rest:?}");
            let activity = store
                .db
                .query(|c| AccessStore::session_last_activity(&*c, session))
                .unwrap();
            assert!(activity >= started, "{activity} {started}");
            let last = store
                .db
                .query(|c| AccessStore::last_message(&*c, session))
                .unwrap()
                .unwrap();
            assert_eq!(last.text, "after");

            // Budgets: a turn, a spawn and a refusal; the last day's turns and spawns counted.
            let now_ms = crate::sessions::budget::now_ms();
            store
                .record_turn(
                    session,
                    &[],
                    None,
                    Some(&CountedTurn {
                        agent_id: "a".into(),
                        at_ms: now_ms,
                        run_id: None,
                        usage: crate::sessions::budget::TurnUsage {
                            tokens: Some(12),
                            cost_micros: None,
                        },
                    }),
                )
                .unwrap();
            store.record_spawn("a", now_ms, session).unwrap();
            let rows = store.budget_rows(now_ms).unwrap();
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[0].tokens, Some(12));

            // A cancel asked for and decided.
            let id = store
                .cancel_requested("a", session, None, "operator")
                .unwrap();
            store.cancel_decided(id, "confirmed", "stopped").unwrap();
            let state: String = store
                .db
                .query(|c| {
                    c.query_row(
                        "SELECT state FROM turn_cancels WHERE id = ?1",
                        params![id],
                        |r| r.get(0),
                    )
                })
                .unwrap();
            assert_eq!(state, "confirmed");

            // To the trash: gone from the listing, the history read from the trash.
            store
                .db
                .write(|c| {
                    let tx = c.transaction(Behavior::Write)?;
                    AccessStore::trash_session_in(&tx, session)?;
                    tx.commit()
                })
                .unwrap();
            let on_record = store
                .db
                .query(|c| AccessStore::session_on_record(&*c, session))
                .unwrap();
            assert!(!on_record);
            let history = store
                .db
                .query(|c| AccessStore::history_page(&*c, session, 10, 0, true, false))
                .unwrap();
            let texts: Vec<&str> = history.iter().map(|r| r.text.as_str()).collect();
            assert_eq!(texts, ["before", "new session", "after"]);
        });
    }

    #[test]
    fn words_are_quoted_and_the_last_one_is_a_prefix() {
        assert_eq!(fts_query("  "), None);
        assert_eq!(fts_query("deplo").as_deref(), Some("\"deplo\"*"));
        assert_eq!(
            fts_query("NEAR(a b) x\"y OR").as_deref(),
            Some("\"NEAR(a\" \"b)\" \"x\"\"y\" \"OR\"*")
        );
    }

    #[test]
    fn a_snippet_is_the_words_around_the_first_match() {
        let long = "one two three four five six seven eight nine ten eleven twelve thirteen \
                    fourteen fifteen sixteen seventeen eighteen Déploiement nineteen twenty";
        // Sixteen words around the match, matched without its accent, cut where the text goes
        // on.
        assert_eq!(
            snippet(long, "deploiement"),
            "…six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
             seventeen eighteen Déploiement nineteen twenty"
        );
        // The last word is a prefix; a match near the start is not cut before it.
        assert_eq!(
            snippet(long, "x TW"),
            "one two three four five six seven eight nine ten eleven twelve thirteen \
             fourteen fifteen sixteen…"
        );
        // Short lines whole, whatever matches.
        assert_eq!(snippet("is it late?", "late"), "is it late?");
    }

    /// A search: words, before which line, how many.
    type Search<'a> = dyn Fn(&str, Option<i64>, usize) -> Vec<FoundRow> + 'a;

    /// What a search finds, on either backend: `catch_up` brings the index up to date (what
    /// the upkeep does within a checkpoint's interval), `search` searches.
    fn search_finds_every_sessions_lines_newest_first(
        store: &AccessStore,
        catch_up: &dyn Fn(),
        search: &Search<'_>,
    ) {
        let said = |key: &str, text: &str| {
            store
                .record(key, &[turn(Provenance::Inbound, None, text)], None)
                .unwrap();
            catch_up();
        };
        said("agent:a:main", "the deploy failed at noon");
        said(
            "agent:b:slack:group:g1",
            "Déploy again? the DEPLOYMENT is late",
        );
        said("agent:b:slack:group:g1", "nothing to see");
        said("agent:c:main", "deploy \"quoted\" OR NOT");
        let found = |words: &str, before: Option<i64>, limit: usize| -> Vec<(String, String)> {
            search(words, before, limit)
                .into_iter()
                .map(|f| (f.session_key, f.snippet))
                .collect()
        };
        let keys = |v: Vec<(String, String)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        // Every session, newest first; any case, no accents; the last word a prefix.
        assert_eq!(
            keys(found("deplo", None, 10)),
            ["agent:c:main", "agent:b:slack:group:g1", "agent:a:main"]
        );
        assert_eq!(keys(found("failed DEPLOY", None, 10)), ["agent:a:main"]);
        // `Déploy` is found as `deploy` only without its accent.
        assert_eq!(
            keys(found("deploy again", None, 10)),
            ["agent:b:slack:group:g1"]
        );
        // Words that are the index's syntax are words.
        assert_eq!(keys(found("quoted\" OR", None, 10)), ["agent:c:main"]);
        // Paged by line id.
        let first = search("deploy", None, 1);
        assert_eq!(
            keys(found("deploy", Some(first[0].id), 10)),
            ["agent:b:slack:group:g1", "agent:a:main"]
        );
        assert_eq!(
            found("late", None, 10)[0].1,
            "Déploy again? the DEPLOYMENT is late"
        );
        // A session moved to the trash leaves the index with its rows (queued by the triggers).
        store
            .db
            .write(|c| {
                let tx = c.transaction(Behavior::Write)?;
                AccessStore::trash_session_in(&tx, "agent:b:slack:group:g1")?;
                tx.commit()
            })
            .unwrap();
        catch_up();
        assert_eq!(
            keys(found("deploy", None, 10)),
            ["agent:c:main", "agent:a:main"]
        );
        assert!(found("", None, 10).is_empty());
    }

    #[test]
    fn a_search_finds_the_lines_of_every_session_newest_first_and_forgets_deleted_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let store = AccessStore::open(&dir).unwrap();
        search_finds_every_sessions_lines_newest_first(
            &store,
            &|| {
                crate::state::search_index::catch_up(&dir).unwrap();
            },
            &|words, before, limit| {
                store
                    .db
                    .read(|c| Ok(AccessStore::search_transcript(c, words, before, limit)?))
                    .unwrap()
            },
        );
        // Gone from the index itself, not only hidden by the join.
        let indexed: i64 = store
            .db
            .read(|c| {
                c.query_row(
                    "SELECT count(*) FROM search.words WHERE words MATCH 'deploy'",
                    [],
                    |r| r.get(0),
                )
            })
            .unwrap();
        assert_eq!(indexed, 2);
    }

    /// PostgreSQL's index (`transcript_words`) finds what SQLite's does.
    #[test]
    fn a_search_on_postgresql_finds_what_one_on_sqlite_finds() {
        let (_tmp, _schema, dir) = crate::state::postgres_state();
        let store = AccessStore::open(&dir).unwrap();
        search_finds_every_sessions_lines_newest_first(
            &store,
            &|| {
                store
                    .db
                    .write(crate::state::search_index::pg_catch_up)
                    .unwrap();
            },
            &|words, before, limit| {
                store
                    .db
                    .query(|c| AccessStore::search_postgres(&*c, words, before, limit))
                    .unwrap()
            },
        );
        // Gone from the index itself, not only hidden by the join.
        let indexed: i64 = store
            .db.query(|c| {
                c.query_row(
                    "SELECT count(*) FROM transcript_words WHERE words @@ CAST('deploy' AS tsquery)",
                    params![],
                    |r| r.get(0),
                )
            })
            .unwrap();
        assert_eq!(indexed, 2);
    }

    /// The upkeep of a PostgreSQL state takes the queue on its own: a line said is found, and
    /// still after PostgreSQL ended every session (the upkeep's too).
    #[test]
    fn the_upkeep_indexes_a_postgresql_states_lines() {
        let name = crate::state::db::testing::unique_name("upkeep");
        let (_tmp, _schema, dir) = crate::state::postgres_state_as(Some(&name));
        let store = AccessStore::open(&dir).unwrap();
        let _upkeep = crate::state::Checkpointer::start(&dir).unwrap();
        let say = |text: &str| {
            let line = [turn(Provenance::Inbound, None, text)];
            // A call that finds its session closed may fail; the one after it must not.
            store
                .record("agent:a:main", &line, None)
                .or_else(|_| store.record("agent:a:main", &line, None))
                .unwrap();
        };
        let found = |word: &str| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let found = store
                    .db
                    .query(|c| AccessStore::search_postgres(&*c, word, None, 10))
                    .unwrap_or_default();
                if let Some(row) = found.first() {
                    return row.session_key.clone();
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{word}: never indexed"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        };
        say("the release is tomorrow");
        assert_eq!(found("release"), "agent:a:main");
        assert!(
            crate::state::db::testing::end_sessions(&name) >= 4,
            "the writer, two readers, the upkeep"
        );
        say("the rollback is ready");
        assert_eq!(found("rollback"), "agent:a:main");
    }

    /// PostgreSQL ends every session of a store (as its restart would): the store opens them
    /// again, and goes on with its writes and reads.
    #[test]
    fn a_store_goes_on_after_postgresql_ends_its_sessions() {
        let name = crate::state::db::testing::unique_name("reopen");
        let (_tmp, _schema, dir) = crate::state::postgres_state_as(Some(&name));
        let store = AccessStore::open(&dir).unwrap();
        let session = "agent:a:main";
        store
            .record(session, &[turn(Provenance::Inbound, None, "before")], None)
            .unwrap();
        assert!(
            crate::state::db::testing::end_sessions(&name) >= 3,
            "the writer and two readers"
        );
        // A call that finds its session closed may fail; the one after it must not.
        let runtime = RuntimeSession {
            id: "s-1".into(),
            instance: None,
        };
        store
            .set_runtime_session(session, "a", &runtime)
            .or_else(|_| store.set_runtime_session(session, "a", &runtime))
            .unwrap();
        let found = store
            .runtime_session(session)
            .or_else(|_| store.runtime_session(session))
            .unwrap();
        assert_eq!(found, Some(runtime));
        let texts: Vec<String> = store
            .transcript(session, 10)
            .unwrap()
            .into_iter()
            .map(|t| t.text)
            .collect();
        assert_eq!(texts, ["before"]);
    }

    fn gated_key(id: &str) -> DeliveryKey {
        DeliveryKey {
            channel: "telegram".into(),
            account_id: "default".into(),
            peer_kind: "direct".into(),
            peer_id: "42".into(),
            thread_id: String::new(),
            message_id: id.into(),
        }
    }

    /// A gated answer as `Access::gate` records it, with a pairing code.
    const GATED: &str = r#"{"route": {"channel": "telegram", "agentId": "a"}, "sessionKey": "agent:a:telegram:direct:42",
        "delivered": false, "gated": {"reason": "pairing-required", "rule": "dmPolicy (built-in default: pairing)",
        "pairingCode": "SECRET12"}, "reply": {"text": "your pairing code is SECRET12"}, "duplicate": false}"#;

    fn gate(store: &AccessStore, session: &str, id: &str, text: &str) {
        let sender = serde_json::json!({"id": "42", "name": "Ada"});
        store
            .record_gated(session, &gated_key(id), GATED, Some(&sender), text)
            .unwrap();
    }

    fn page(
        store: &AccessStore,
        session: &str,
        limit: usize,
        offset: usize,
        all: bool,
        gated: bool,
    ) -> Vec<HistoryRow> {
        store
            .db
            .query(|c| AccessStore::history_page(&*c, session, limit, offset, all, gated))
            .unwrap()
    }

    fn texts(rows: &[HistoryRow]) -> Vec<String> {
        rows.iter()
            .map(|r| match &r.gated {
                Some(g) => format!("{} [{}]", r.text, g.reason),
                None => r.text.clone(),
            })
            .collect()
    }

    #[test]
    fn gated_messages_are_lines_of_the_operators_history_in_the_order_recorded() {
        on_both_backends(|store| {
            let session = "agent:a:telegram:direct:42";
            let mut appends = store.transcript_appends();
            store
                .record(
                    session,
                    &[
                        turn(Provenance::Inbound, Some("m1"), "hello"),
                        turn(Provenance::Agent, None, "hi"),
                    ],
                    None,
                )
                .unwrap();
            gate(store, session, "m2", "are you there?");
            // The live view is told of the gated line like of an append.
            assert_eq!(&*appends.try_recv().unwrap(), session);
            assert_eq!(&*appends.try_recv().unwrap(), session);
            // Another session's rows between: the ids are one sequence over every session.
            store
                .record(
                    "agent:b:main",
                    &[turn(Provenance::Inbound, Some("x"), "elsewhere")],
                    None,
                )
                .unwrap();
            gate(store, "agent:b:main", "m3", "elsewhere, gated");
            store
                .record(
                    session,
                    &[
                        turn(Provenance::Inbound, Some("m4"), "again"),
                        turn(Provenance::Agent, None, "yes"),
                    ],
                    None,
                )
                .unwrap();

            let rows = page(store, session, 10, 0, false, true);
            assert_eq!(
                texts(&rows),
                [
                    "hello",
                    "hi",
                    "are you there? [pairing-required]",
                    "again",
                    "yes"
                ]
            );
            assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "{rows:?}");
            let gated = &rows[2];
            assert_eq!(gated.provenance, Provenance::Inbound);
            assert_eq!(gated.message_id.as_deref(), Some("m2"));
            assert_eq!(gated.sender.label(), "Ada (42) on telegram");
            assert_eq!(
                gated.gated.as_ref().map(|g| g.rule.as_str()),
                Some("dmPolicy (built-in default: pairing)")
            );
            // Nothing else of the recorded answer is read: never the pairing code.
            assert!(!serde_json::to_string(&rows).unwrap().contains("SECRET12"));
            // Paged newest first as before, gated lines counted like any other.
            assert_eq!(
                texts(&page(store, session, 2, 0, false, true)),
                ["again", "yes"]
            );
            assert_eq!(
                texts(&page(store, session, 2, 2, false, true)),
                ["hi", "are you there? [pairing-required]"]
            );
            assert_eq!(texts(&page(store, session, 2, 4, false, true)), ["hello"]);
            // An agent's history (the Hub's `sessions_history`) never has them.
            assert_eq!(
                texts(&page(store, session, 10, 0, false, false)),
                ["hello", "hi", "again", "yes"]
            );

            // A `/new` begins a segment: the gated lines before it are in `all` only.
            store
                .record(
                    session,
                    &[turn(Provenance::Reset, None, "new session")],
                    None,
                )
                .unwrap();
            gate(store, session, "m5", "after the reset");
            assert_eq!(
                texts(&page(store, session, 10, 0, false, true)),
                ["new session", "after the reset [pairing-required]"]
            );
            assert_eq!(page(store, session, 10, 0, true, true).len(), 7);
            // A transcript row after a gated line gets a larger id.
            store
                .record(
                    session,
                    &[turn(Provenance::Inbound, Some("m6"), "last")],
                    None,
                )
                .unwrap();
            let rows = page(store, session, 10, 0, false, true);
            assert_eq!(texts(&rows)[2], "last");
            assert!(rows[1].id < rows[2].id);
        });
    }

    #[test]
    fn a_session_whose_first_message_was_gated_has_that_line_and_later_rows_after_it() {
        on_both_backends(|store| {
            let session = "agent:a:telegram:direct:42";
            // Nothing was ever appended: the transcript's sequence has no row yet.
            gate(store, session, "m1", "hello?");
            let rows = page(store, session, 10, 0, false, true);
            assert_eq!(texts(&rows), ["hello? [pairing-required]"]);
            assert_eq!(rows[0].id, 1);
            // No trash to read instead: the gated line stays.
            store
                .record(
                    session,
                    &[turn(Provenance::Inbound, Some("m2"), "paired now")],
                    None,
                )
                .unwrap();
            let rows = page(store, session, 10, 0, false, true);
            assert_eq!(texts(&rows), ["hello? [pairing-required]", "paired now"]);
            assert_eq!(rows[1].id, 2);
            // A redelivery is answered from the record, pairing code and all: the answer is kept whole.
            assert_eq!(
                store.delivered(&gated_key("m1")).unwrap().as_deref(),
                Some(GATED)
            );
        });
    }

    #[test]
    fn the_history_reads_each_table_through_its_index() {
        let tmp = tempfile::tempdir().unwrap();
        let store = AccessStore::open(&StateDir::new(tmp.path())).unwrap();
        for (all, gated) in [(false, true), (true, true), (false, false)] {
            let plan: Vec<String> = store
                .db
                .read(|c| {
                    let sql = history_sql(Backend::Sqlite, all, gated);
                    c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?
                        .query_map(rusqlite::params!["k", 10, 0], |r| r.get::<_, String>(3))?
                        .collect()
                })
                .unwrap();
            let plan = plan.join("\n");
            assert!(
                !plan.contains("SCAN transcript\n") && !plan.ends_with("SCAN transcript"),
                "{plan}"
            );
            assert!(!plan.contains("SCAN deliveries"), "{plan}");
            // Both read newest first and merged, stopping at the page: nothing sorted.
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
            if gated {
                assert!(plan.contains("deliveries_gated_lines"), "{plan}");
                assert!(plan.contains("MERGE (UNION ALL)"), "{plan}");
            }
        }
    }
}
