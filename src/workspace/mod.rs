//! Workspace bootstrap files: the templates shipped in the binary and how an agent's values
//! fill them (reconcile.md, "apply"). Pure: writing them is `apply`'s job; [`read`] is how the
//! controller reads what an agent may have changed there.

pub(crate) mod read;

use crate::config::Agent;

/// The bootstrap files, in the order they are written. `BOOTSTRAP.md` comes first so that a
/// crash in the middle of bootstrapping a brand-new workspace still leaves it there: the next
/// apply sees a workspace that holds `BOOTSTRAP.md` and writes the rest.
pub const FILES: [&str; 8] = [
    "BOOTSTRAP.md",
    "AGENTS.md",
    "SOUL.md",
    "IDENTITY.md",
    "USER.md",
    "TOOLS.md",
    "HEARTBEAT.md",
    "MEMORY.md",
];

/// Only into a brand-new, empty workspace.
pub const FIRST_RUN: &str = "BOOTSTRAP.md";
/// Rewritten when the identity changes, while it still has the hash deepcli wrote.
pub const IDENTITY: &str = "IDENTITY.md";

fn template(name: &str) -> &'static str {
    match name {
        "AGENTS.md" => include_str!("templates/AGENTS.md"),
        "SOUL.md" => include_str!("templates/SOUL.md"),
        "IDENTITY.md" => include_str!("templates/IDENTITY.md"),
        "USER.md" => include_str!("templates/USER.md"),
        "TOOLS.md" => include_str!("templates/TOOLS.md"),
        "HEARTBEAT.md" => include_str!("templates/HEARTBEAT.md"),
        "MEMORY.md" => include_str!("templates/MEMORY.md"),
        _ => include_str!("templates/BOOTSTRAP.md"),
    }
}

/// The content of bootstrap file `name` for `agent`.
pub fn render(name: &str, agent: &Agent) -> String {
    let identity = agent.spec.identity.clone().unwrap_or_default();
    let display = identity
        .name
        .as_deref()
        .or(agent.spec.name.as_deref())
        .unwrap_or(agent.id());
    let or_dash = |v: &Option<String>| v.as_deref().unwrap_or("—").to_string();
    template(name)
        .replace("{{id}}", agent.id())
        .replace("{{name}}", display)
        .replace("{{emoji}}", &or_dash(&identity.emoji))
        .replace("{{theme}}", &or_dash(&identity.theme))
        .replace("{{avatar}}", &or_dash(&identity.avatar))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{AgentSpec, Identity};

    #[test]
    fn identity_is_filled_in() {
        let agent = Agent {
            index: Some(0),
            spec: AgentSpec {
                id: "research".into(),
                name: Some("Research".into()),
                identity: Some(Identity {
                    emoji: Some("🔭".into()),
                    ..Identity::default()
                }),
                ..AgentSpec::default()
            },
            workspace: "/w".into(),
            agent_dir: "/a".into(),
            sessions_dir: "/s".into(),
        };
        let text = render(IDENTITY, &agent);
        assert!(text.contains("- Name: Research"), "{text}");
        assert!(text.contains("- Emoji: 🔭"), "{text}");
        assert!(text.contains("- Theme: —"), "{text}");
        assert!(!render("AGENTS.md", &agent).contains("{{"));
    }
}
