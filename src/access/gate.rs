//! The inbound policy at the Access door (policy.md): between routing (and the idempotency
//! check) and delivery, [`Access::gate`] asks `policy::decide` whether the agent gets the
//! envelope, looks up what only the state knows when the verdict depends on it (a pairing
//! approval, whether the agent answered in a thread), and for a gated envelope makes the
//! answer — `200 {"delivered": false, "gated": {"reason", "rule"}, …}` — records it like a
//! delivered one (the same `messageId` gets the same answer) with the line its session's
//! history shows of it (`sessions/history`'s `gated`), counts it and, for
//! `not-mentioned`, keeps the message as context for the session's next answer.
//!
//! Also here: the kept context handed to a prompt ([`Access::take_context`]). The envelope's
//! policy fields are read in `envelope.rs`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use super::store::{AccessStore, DeliveryKey};
use super::{Access, AccessError, AccessPlan, Delivered, Envelope, route::Route};
use crate::policy::bot_loop::{BotLoopGuard, BotPair, Counted};
use crate::policy::{self, AgentPatterns, Conversation, Message, Reason, Unless, Verdict};
use crate::state::db::{Conn, DbResult};
use crate::state::pairing::{self as records, Requested};

/// The session key an envelope speaks in: the route's, with its thread.
pub(super) fn session_key(route: &Route, key: &DeliveryKey) -> String {
    match key.thread_id.as_str() {
        "" => route.session_key().to_string(),
        thread => crate::routing::session::with_thread(route.session_key(), thread),
    }
}

/// What the inbound policy keeps in memory.
pub(super) struct PolicyState {
    bot_loop: BotLoopGuard,
    /// The session keys that have kept context in the state database: only this Access layer
    /// writes them, so a delivery to any other session needs no query.
    kept: Mutex<HashSet<String>>,
}

impl PolicyState {
    /// The state, with the sessions that have kept context read from the database (a
    /// restarted controller gives them to the agent all the same).
    pub(super) fn load(store: &AccessStore) -> PolicyState {
        let kept = store
            .db.write(|conn| records::sessions_with_kept(&*conn))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot read the kept context: it is given again only once more is kept");
                Vec::new()
            });
        PolicyState {
            bot_loop: BotLoopGuard::default(),
            kept: Mutex::new(kept.into_iter().collect()),
        }
    }

    fn has_kept(&self, session_key: &str) -> bool {
        match self.kept.lock() {
            Ok(kept) => kept.contains(session_key),
            Err(poisoned) => poisoned.into_inner().contains(session_key),
        }
    }

    fn set_kept(&self, session_key: &str, any: bool) {
        let mut kept = match self.kept.lock() {
            Ok(kept) => kept,
            Err(poisoned) => poisoned.into_inner(),
        };
        if any {
            kept.insert(session_key.to_string());
        } else {
            kept.remove(session_key);
        }
    }
}

/// The context kept for a session, as the prompt gets it, and how much of it to forget once
/// the prompt was answered.
pub(super) struct Context {
    pub text: Option<String>,
    pub last_id: Option<i64>,
}

impl Access {
    /// The policy's verdict on an authenticated, routed envelope that was not delivered
    /// before: `None` to deliver it, else the gated answer (recorded and counted).
    pub(super) async fn gate(
        &self,
        plan: &AccessPlan,
        envelope: &Envelope,
        route: &Route,
        key: &DeliveryKey,
    ) -> Result<Option<Delivered>, AccessError> {
        let Some(account) = plan.policy.account(&key.channel, &key.account_id) else {
            return Ok(None);
        };
        // The bot's id as its adapter learnt it stands in for an unset `botUserId`.
        let learnt;
        let account = match (
            &account.bot_user_id,
            self.live_bot(&key.channel, &key.account_id),
        ) {
            (None, Some(bot)) => {
                learnt = account.with_bot_user_id(
                    &bot,
                    "the bot's id as its platform adapter learnt it (getMe / auth.test)",
                );
                &learnt
            }
            _ => account,
        };
        let facts = &envelope.facts;
        let input = &envelope.route;
        let conversation = Conversation::of_peer_kind(input.peer.as_ref().map(|p| p.kind.as_str()));
        let (group, parent) = match conversation {
            Conversation::Direct => (None, None),
            Conversation::Group => (
                input.peer.as_ref().map(|p| p.id.as_str()),
                input.parent_peer.as_ref().map(|p| p.id.as_str()),
            ),
        };
        let view = account.view_in(group, parent, input.guild_id.as_deref());
        let message = Message {
            conversation,
            sender_id: facts.sender_id.as_deref(),
            is_bot: facts.is_bot,
            mentions: &facts.mentions,
            reply_to_sender_id: facts.reply_to_sender_id.as_deref(),
            in_thread: !key.thread_id.is_empty(),
            text: &envelope.text,
            guild_id: input.guild_id.as_deref(),
            roles: &input.member_role_ids,
        };
        let agent = AgentPatterns {
            mentions: plan
                .policy
                .agent(route.agent_id())
                .and_then(|a| a.mentions.as_ref()),
        };
        let pair = match (facts.is_bot, &facts.sender_id) {
            (true, Some(sender)) => Some(BotPair {
                channel: key.channel.clone(),
                account: key.account_id.clone(),
                sender: sender.trim().to_string(),
            }),
            _ => None,
        };
        let now = Instant::now();
        let muted = pair
            .as_ref()
            .is_some_and(|p| self.policy.bot_loop.muted(p, now));
        let gate = match policy::decide(&view, agent, &message, muted) {
            Verdict::Deliver => None,
            Verdict::Gated { gate, unless } => {
                let through = match (unless, &facts.sender_id) {
                    (Some(Unless::SenderPaired), Some(sender)) => {
                        let (c, a, s) = (
                            key.channel.clone(),
                            key.account_id.clone(),
                            sender.trim().to_string(),
                        );
                        self.blocking_conn(move |conn| records::is_paired(&*conn, &c, &a, &s))
                            .await?
                    }
                    (Some(Unless::ThreadAnswered), _) => {
                        let k = session_key(route, key);
                        self.blocking_conn(move |conn| records::answered_in(&*conn, &k))
                            .await?
                    }
                    _ => false,
                };
                (!through).then_some(gate)
            }
        };
        let gate = match (gate, &pair) {
            (Some(gate), _) => gate,
            (None, None) => return Ok(None),
            // A bot's message that gets through counts for its pair.
            (None, Some(pair)) => {
                let limits = &view.account.base.bot_loop;
                match self.policy.bot_loop.count(pair, now, &limits.value) {
                    Counted::Within => return Ok(None),
                    Counted::Tripped { cooldown_secs } => {
                        self.bot_loop_tripped(pair, cooldown_secs).await;
                        policy::Gate {
                            reason: Reason::BotLoop,
                            rule: limits.rule.clone(),
                        }
                    }
                }
            }
        };
        let session_key = session_key(route, key);
        let mut gated = json!({"reason": gate.reason.as_str(), "rule": &*gate.rule});
        let mut reply = Value::Null;
        match gate.reason {
            Reason::PairingRequired => match &facts.sender_id {
                Some(sender) => {
                    match self
                        .pairing_request(
                            &key.channel,
                            &key.account_id,
                            sender,
                            facts.sender_name.as_deref(),
                        )
                        .await?
                    {
                        Requested::Created { code, expires_at } => {
                            reply = json!({"text": policy::pairing::reply_text(&code)});
                            gated["pairingCode"] = code.into();
                            gated["expiresAt"] = records::unix_to_text(expires_at).into();
                        }
                        Requested::Pending { expires_at } => {
                            gated["pairingPending"] = true.into();
                            gated["expiresAt"] = records::unix_to_text(expires_at).into();
                        }
                        Requested::RateLimited { retry_at } => {
                            gated["pairingRateLimited"] = true.into();
                            gated["retryAt"] = records::unix_to_text(retry_at).into();
                        }
                    }
                }
                None => {
                    gated["note"] =
                        "the envelope names no `sender.id`: there is nobody to pair".into();
                }
            },
            Reason::NotMentioned => {
                let limit = view.history_limit().value;
                let (k, id, sender, text) = (
                    session_key.clone(),
                    envelope.message_id.clone(),
                    envelope.sender.as_ref().map(Value::to_string),
                    envelope.text.clone(),
                );
                self.blocking_conn(move |conn| {
                    records::keep(conn, &k, &id, sender.as_deref(), &text, limit)
                })
                .await?;
                self.policy.set_kept(&session_key, limit > 0);
            }
            _ => {}
        }
        let response = json!({
            "route": route,
            "sessionKey": session_key,
            "delivered": false,
            "gated": gated,
            "reply": reply,
            "duplicate": false,
        });
        let sent = response.to_string();
        {
            // Its line in the session's history too: who sent what, and this gate.
            let (k, key, sent) = (session_key.clone(), key.clone(), sent.clone());
            let (sender, text) = (envelope.sender.clone(), envelope.text.clone());
            self.blocking(move |store| store.record_gated(&k, &key, &sent, sender.as_ref(), &text))
                .await?;
        }
        self.metrics
            .gated(&key.channel, &key.account_id, gate.reason.as_str());
        if let Some(text) = reply["text"].as_str() {
            self.send_reply(plan, key, envelope, &session_key, text);
        }
        Ok(Some(Delivered::recorded(sent)))
    }

    pub(super) async fn pairing_request(
        &self,
        channel: &str,
        account: &str,
        sender: &str,
        name: Option<&str>,
    ) -> Result<Requested, AccessError> {
        let code = policy::pairing::new_code().ok_or_else(|| {
            AccessError::Internal(
                "the operating system gave no random bytes for a pairing code".into(),
            )
        })?;
        let (channel, account, sender, name) = (
            channel.to_string(),
            account.to_string(),
            sender.trim().to_string(),
            name.map(str::to_string),
        );
        self.blocking_conn(move |conn| {
            let who = records::Sender {
                channel: &channel,
                account_id: &account,
                sender_id: &sender,
                sender_name: name.as_deref(),
            };
            records::request(conn, &who, &code, records::unix_now(), &PAIRING_LIMITS)
        })
        .await
    }

    /// Tells the operator that a pair was muted: the controller's log, the channel's log and
    /// `deepcli_bot_loop_trips_total`.
    async fn bot_loop_tripped(&self, pair: &BotPair, cooldown_secs: u64) {
        tracing::warn!(
            channel = %pair.channel,
            account = %pair.account,
            bot = %pair.sender,
            cooldown_secs,
            "bot-loop protection tripped: the bot and this account answered each other too often; the bot is muted"
        );
        self.metrics.bot_loop_tripped(&pair.channel, &pair.account);
        self.log_call(
            Some(&pair.channel),
            &format!(
                "bot-loop tripped account={} bot={} muted for {cooldown_secs} s (botLoopProtection)",
                pair.account, pair.sender
            ),
        )
        .await;
    }

    /// The context kept for `session_key`, as the text to put before the message: the newest
    /// messages that fit in `budget` bytes (`budgets.contextBytes`).
    pub(super) async fn take_context(
        &self,
        session_key: &str,
        budget: usize,
    ) -> Result<Context, AccessError> {
        if !self.policy.has_kept(session_key) {
            return Ok(Context {
                text: None,
                last_id: None,
            });
        }
        let k = session_key.to_string();
        let kept = self
            .blocking_conn(move |conn| records::kept(&*conn, &k))
            .await?;
        let Some(last) = kept.last() else {
            return Ok(Context {
                text: None,
                last_id: None,
            });
        };
        let last_id = last.id;
        let sizes: Vec<usize> = kept.iter().map(|m| m.text.len()).collect();
        let left_out = super::cap::newest_within(&sizes, budget);
        let mut text = format!(
            "[deepcli: {} in this conversation since the agent last answered, not addressed to it, oldest first{}:]\n",
            crate::plural::plural(kept.len(), "message was said", "messages were said"),
            if left_out == 0 {
                String::new()
            } else {
                format!("; the {left_out} oldest left out (budgets.contextBytes)")
            }
        );
        for m in &kept[left_out..] {
            let who = m
                .sender
                .as_deref()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .and_then(|s| {
                    s.get("name")
                        .and_then(Value::as_str)
                        .or_else(|| s.get("id").and_then(Value::as_str))
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "someone".to_string());
            text.push_str(&format!("{who}: {}\n", m.text));
        }
        text.push_str("[deepcli: the message to answer:]\n");
        Ok(Context {
            text: Some(text),
            last_id: Some(last_id),
        })
    }

    /// Forgets the context given with a prompt that was answered.
    pub(super) async fn forget_context(
        &self,
        session_key: &str,
        last_id: i64,
    ) -> Result<(), AccessError> {
        let k = session_key.to_string();
        let left = self
            .blocking_conn(move |conn| {
                records::forget_kept(&*conn, &k, last_id)?;
                records::kept(&*conn, &k).map(|rest| !rest.is_empty())
            })
            .await?;
        self.policy.set_kept(session_key, left);
        Ok(())
    }

    async fn blocking_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn<'_>) -> DbResult<T> + Send + 'static,
    ) -> Result<T, AccessError> {
        self.blocking(move |store: &AccessStore| store.db.write(f))
            .await
    }
}

/// The pairing limits of policy.md.
const PAIRING_LIMITS: records::Limits = records::Limits {
    ttl_secs: policy::pairing::CODE_TTL_SECS,
    max_pending: policy::pairing::MAX_PENDING,
    codes_per_sender_per_hour: policy::pairing::CODES_PER_SENDER_PER_HOUR,
};
