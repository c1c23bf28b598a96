//! Inbound policy (policy.md): who may talk to an agent, and when it answers.
//!
//! * [`settings`] resolves channels.yaml's policy keys through their levels (group entry >
//!   account > channel > `channels.defaults` > built-in) into a [`PolicyPlan`], each value with
//!   the rule (setting and `file:line`) that decided it.
//! * [`decide`] is the decision order as one pure function: resolved settings × what the
//!   envelope says → deliver, or gated with a reason and a rule.
//! * The stateful parts sit behind small types: [`bot_loop::BotLoopGuard`] (counts per bot
//!   pair, in memory), and the pairing codes' rules ([`pairing`]; the records are the state
//!   database's, `state::pairing`).
//!
//! No I/O here: the Access layer gates with it, `deepcli route --explain` explains with it,
//! validation compiles mention patterns with it.

pub mod bot_loop;
pub mod decide;
pub mod mention;
pub mod pairing;
pub mod settings;

pub use decide::{
    AgentPatterns, Conversation, Gate, Message, Reason, Unless, Verdict, decide,
    explicitly_mentioned,
};
pub use settings::{AccountPolicy, PolicyPlan, Rule, View};

#[cfg(test)]
mod tests;
