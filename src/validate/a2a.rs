//! Rules over channels.yaml `a2a:` (docs/a2a.md): exposed agents and peers' `allowAgents` name
//! agents that exist, a peer's agents are exposed, peer tokens are references.

use super::Context;
use crate::config::FileKind;
use crate::config::model::Secret;
use crate::config::yaml::escape_pointer_token;
use crate::diagnostic::{Diagnostic, rules};

const FILE: FileKind = FileKind::Channels;

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let Some(a2a) = &cx.config.a2a else {
        return;
    };
    let unknown = |what: String, id: &str, pointer: String| {
        let d = Diagnostic::new(
            rules::UNKNOWN_AGENT,
            format!("{what} names agent `{id}`, which is not declared"),
        )
        .at(cx.at(FILE, &pointer));
        match crate::suggest::closest(id, cx.config.agents.iter().map(|a| a.id())) {
            Some(near) => d.hint(format!("did you mean `{near}`?")),
            None => d.hint("declare the agent in agents.yaml, or remove it from the list"),
        }
    };
    // A list that lost agents to schema errors cannot tell a dangling id from a dropped one.
    let agents_known = cx.config.complete.agents;
    for (i, id) in a2a.expose.iter().enumerate() {
        if agents_known && !cx.has_agent(id) {
            out.push(unknown(
                "`a2a.expose`".into(),
                id,
                format!("/a2a/expose/{i}"),
            ));
        }
    }
    for (name, peer) in &a2a.peers {
        let base = format!("/a2a/peers/{}", escape_pointer_token(name));
        if let Secret::Inline(text) = &peer.token {
            let d = if text.trim().is_empty() {
                Diagnostic::new(
                    rules::EMPTY_SECRET,
                    format!(
                        "`token` of A2A peer `{name}` is empty: nobody could be told apart from this peer"
                    ),
                )
            } else {
                Diagnostic::new(
                    rules::INLINE_SECRET,
                    format!("`token` of A2A peer `{name}` holds an inline secret"),
                )
                .redacted()
            };
            out.push(
                d.hint("write `token: {source: env, id: VAR}`, `\"${VAR}\"` or `{source: file, path: PATH}`, and rotate the token if it was committed")
                    .at(cx.at(FILE, &format!("{base}/token"))),
            );
        }
        for (i, id) in peer.allow_agents.iter().flatten().enumerate() {
            let pointer = format!("{base}/allowAgents/{i}");
            if agents_known && !cx.has_agent(id) {
                out.push(unknown(
                    format!("`allowAgents` of A2A peer `{name}`"),
                    id,
                    pointer,
                ));
            } else if !a2a.expose.iter().any(|e| e == id) {
                out.push(
                    Diagnostic::new(
                        rules::A2A_NOT_EXPOSED,
                        format!(
                            "A2A peer `{name}` may reach agent `{id}`, but `a2a.expose` does not list it: the peer can never reach it"
                        ),
                    )
                    .hint(format!("add `{id}` to `a2a.expose`, or remove it from the peer's `allowAgents`"))
                    .at(cx.at(FILE, &pointer)),
                );
            }
        }
    }
}
