//! `control-character`: an id with a control character (a newline, a carriage return, an
//! escape). deepcli shows such ids escaped ([`crate::shown`]), but an id like that is almost
//! never meant, and elsewhere (another tool's output, a terminal) it can forge a line.

use crate::config::FileKind;
use crate::config::yaml::escape_pointer_token;
use crate::diagnostic::{Diagnostic, rules};
use crate::shown::{is_control, shown};

use super::Context;

fn warn(
    cx: &Context<'_>,
    what: &str,
    id: &str,
    kind: FileKind,
    pointer: &str,
    key: bool,
) -> Diagnostic {
    Diagnostic::new(
        rules::CONTROL_CHARACTER,
        format!(
            "{what} `{}` has a control character (shown escaped)",
            shown(id)
        ),
    )
    .hint("ids are plain text: remove the newline, carriage return or escape character")
    .at(if key {
        cx.at_key(kind, pointer)
    } else {
        cx.at(kind, pointer)
    })
}

pub(super) fn check(cx: &Context<'_>, out: &mut Vec<Diagnostic>) {
    let has = |s: &str| s.chars().any(is_control);
    for agent in &cx.config.agents {
        if has(agent.id()) && agent.index.is_some() {
            let at = format!("{}/id", agent.pointer());
            out.push(warn(
                cx,
                "agent id",
                agent.id(),
                FileKind::Agents,
                &at,
                false,
            ));
        }
    }
    for channel in &cx.config.channels {
        if has(&channel.id) {
            out.push(warn(
                cx,
                "channel",
                &channel.id,
                FileKind::Channels,
                &channel.pointer(),
                true,
            ));
        }
        for account in channel.accounts() {
            if has(account.id) {
                out.push(warn(
                    cx,
                    "account id",
                    account.id,
                    FileKind::Channels,
                    &account.pointer(),
                    true,
                ));
            }
        }
        for group in channel.spec.groups.keys() {
            if has(group) {
                let at = format!(
                    "{}/groups/{}",
                    channel.pointer(),
                    escape_pointer_token(group)
                );
                out.push(warn(cx, "group id", group, FileKind::Channels, &at, true));
            }
        }
    }
    for binding in &cx.config.bindings {
        let base = binding.pointer();
        let spec = &binding.spec;
        let m = &spec.matcher;
        let mut fields: Vec<(&str, String, &str)> = vec![
            (
                "agent id",
                format!("{base}/agentId"),
                spec.agent_id.as_str(),
            ),
            (
                "channel",
                format!("{base}/match/channel"),
                m.channel.as_str(),
            ),
        ];
        if let Some(a) = &m.account_id {
            fields.push(("account id", format!("{base}/match/accountId"), a));
        }
        if let Some(p) = &m.peer {
            fields.push(("peer id", format!("{base}/match/peer/id"), &p.id));
        }
        if let Some(g) = &m.guild_id {
            fields.push(("guild id", format!("{base}/match/guildId"), g));
        }
        if let Some(t) = &m.team_id {
            fields.push(("team id", format!("{base}/match/teamId"), t));
        }
        for (i, r) in m.roles.iter().flatten().enumerate() {
            fields.push(("role", format!("{base}/match/roles/{i}"), r));
        }
        for (what, at, id) in fields {
            if has(id) {
                out.push(warn(cx, what, id, FileKind::Bindings, &at, false));
            }
        }
    }
}
