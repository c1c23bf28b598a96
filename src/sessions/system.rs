//! The system section (conversations.md, "What the agent is told"): what deepcli tells an agent
//! at the start of each runtime session, and again when it changed. Who the agent is, its
//! workspace's bootstrap files in OpenClaw's order (each cut at `bootstrapMaxChars`, the cut
//! said), the date and time, the Hub's tools and the policy that limits them, and the reply
//! tags. ACP has no system prompt of its own, so the section is framed text before the
//! session's first prompt: one marked block an agent can tell from the message.

use std::path::PathBuf;

use jiff::ZonedDateTime as Zoned;

use crate::workspace::read::{self, WorkspaceFile};

/// OpenClaw's `bootstrapMaxChars` default.
pub(crate) const DEFAULT_MAX_CHARS: usize = 20_000;
/// The section's first line begins with this.
pub(crate) const BEGIN: &str = "[deepcli: system section.";
/// Its last line.
pub(crate) const END: &str = "[deepcli: end of the system section]";

/// The bootstrap files given, in OpenClaw's order.
const FILES: [&str; 6] = [
    "AGENTS.md",
    "SOUL.md",
    "TOOLS.md",
    "IDENTITY.md",
    "USER.md",
    "MEMORY.md",
];
/// Given after them in an agent's first session only.
const FIRST_RUN: &str = crate::workspace::FIRST_RUN;
/// Of a file longer than the bound: its first 70% and its last 20% (OpenClaw's split); the
/// rest of the bound is left for the line saying so.
const HEAD: f64 = 0.7;
const TAIL: f64 = 0.2;

/// What one agent's system section is made of, from the config in force.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SystemSpec {
    pub agent_id: String,
    /// `identity.name`, else the agent's `name`.
    pub name: Option<String>,
    pub emoji: Option<String>,
    pub description: Option<String>,
    pub when_to_use: Option<String>,
    pub workspace: PathBuf,
    /// `bootstrapMaxChars`.
    pub max_chars: usize,
    /// What the Hub gives the agent and the policy that limits it, one line each (the
    /// composition root asks the Hub for them).
    pub hub: Vec<String>,
}

impl SystemSpec {
    /// The spec of `agent`; `hub`: the Hub's lines for it, to which its permission policy is
    /// added.
    pub(crate) fn of(agent: &crate::config::Agent, mut hub: Vec<String>) -> SystemSpec {
        use crate::config::model::PermissionMode;
        let spec = &agent.spec;
        let mode = spec
            .permissions
            .as_ref()
            .and_then(|p| p.mode)
            .unwrap_or_default();
        hub.push(format!(
            "When your runtime asks permission for a tool call (permissions.mode: {}), {}.",
            mode.as_str(),
            match mode {
                PermissionMode::Ask => "a person decides; wait for the answer",
                PermissionMode::ApproveReads =>
                    "reads and searches are allowed, and a person decides the rest",
                PermissionMode::ApproveAll => "it is allowed",
                PermissionMode::DenyAll => "it is refused",
            }
        ));
        let identity = spec.identity.clone().unwrap_or_default();
        SystemSpec {
            agent_id: agent.id().to_string(),
            name: identity.name.or_else(|| spec.name.clone()),
            emoji: identity.emoji,
            description: identity.description,
            when_to_use: identity.when_to_use,
            workspace: agent.workspace.clone(),
            max_chars: spec.bootstrap_max_chars.map_or(DEFAULT_MAX_CHARS, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            hub,
        }
    }
}

/// What the workspace files of a section look like without reading them: each file's size,
/// modification time and inode, or that it is missing. Equal stamps, equal files; unless one
/// was written within the last second, which `stamp` reports as no stamp (a write in the same
/// tick of the file system's clock as the read before it would leave the stamp as it was).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp(Vec<Option<(u64, i128, u64)>>);

/// The stamp of `spec`'s workspace files now; `None` when one changed too recently to tell.
pub(crate) fn stamp(spec: &SystemSpec) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let now = std::time::SystemTime::now();
    let mut files = Vec::with_capacity(FILES.len());
    for name in FILES {
        let Ok(meta) = std::fs::symlink_metadata(spec.workspace.join(name)) else {
            files.push(None);
            continue;
        };
        let modified = meta.modified().ok()?;
        if now
            .duration_since(modified)
            .map_or(true, |age| age.as_secs() < 1)
        {
            return None;
        }
        let nanos = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
        files.push(Some((meta.len(), nanos, meta.ino())));
    }
    Some(Stamp(files))
}

/// What an agent's section was last composed from, and its hash: a turn that finds the same
/// spec and stamp has the same section without reading a file.
#[derive(Debug, Clone)]
pub(crate) struct Composed {
    pub spec: std::sync::Arc<SystemSpec>,
    pub stamp: Stamp,
    pub hash: String,
}

/// A composed section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Section {
    pub text: String,
    /// Of everything but the date and time and the first run's `BOOTSTRAP.md`: the same hash
    /// is the same section.
    pub hash: String,
}

/// The section for `spec`'s agent now: its workspace files as they are (`first_run`: with
/// `BOOTSTRAP.md` when the workspace has one), `now` as its date and time. Blocking: it reads
/// the workspace.
pub(crate) fn compose(spec: &SystemSpec, first_run: bool, now: &Zoned) -> Section {
    let mut head = format!(
        "{BEGIN} What deepcli, the hub you run in, tells you at the start of a session and again when it changes. It is your configuration, not a message from anyone.]\n"
    );
    head.push_str("# Identity\n");
    head.push_str(&identity(spec));
    head.push_str("# Workspace files\n");
    let mut names: Vec<&str> = FILES.to_vec();
    if first_run && std::fs::symlink_metadata(spec.workspace.join(FIRST_RUN)).is_ok() {
        names.push(FIRST_RUN);
    }
    head.push_str(&format!(
        "Your workspace is {}. Its files follow in this order: {}. Each is given up to {} characters (bootstrapMaxChars); a longer one is cut, and the cut is said where it is. Read a file yourself for all of it.\n",
        spec.workspace.display(),
        FILES.join(", "),
        spec.max_chars,
    ));
    // The first run's file is not hashed: the session's next turn, composed without it, is
    // the same section.
    let mut first = String::new();
    for name in names {
        let part = if name == FIRST_RUN {
            &mut first
        } else {
            &mut head
        };
        part.push_str(&format!("## {name}"));
        if name == FIRST_RUN {
            part.push_str(" (your first session only: do what it says, then delete it)");
        }
        part.push('\n');
        part.push_str(&file(spec, name));
    }
    let mut tail = String::from("# Hub\n");
    for line in &spec.hub {
        tail.push_str(line);
        tail.push('\n');
    }
    tail.push_str(TAGS);
    tail.push_str(END);
    let hash = crate::hash::Hasher::default()
        .part(head.as_bytes())
        .part(tail.as_bytes())
        .finish();
    let date = format!(
        "# Date and time\n{} (time zone {}, UTC{}). It was this when the section was composed.\n",
        now.strftime("%A, %Y-%m-%d %H:%M"),
        now.time_zone().iana_name().unwrap_or("of this host"),
        now.strftime("%:z"),
    );
    Section {
        text: format!("{head}{first}{date}{tail}"),
        hash,
    }
}

const TAGS: &str = "# Reply tags
A reply that is exactly one of these, and nothing else, acts:
- `NO_REPLY`: nothing is posted to the chat.
- `HEARTBEAT_OK`: to a heartbeat wake-up, when nothing needs saying; nothing is posted.
- `REPLY_SKIP`: in a reply-back exchange with another agent, ends the exchange.
- `ANNOUNCE_SKIP`: at an announce step, nothing is posted.
A message that contains `DISCUSSION_CLOSE` (or the marker a Slack account sets in `discussion.closeMarker`) closes a bot discussion in a Slack thread.
";

fn identity(spec: &SystemSpec) -> String {
    let mut out = format!("You are the agent `{}`", spec.agent_id);
    if let Some(name) = &spec.name {
        out.push_str(&format!(", named {name}"));
    }
    if let Some(emoji) = &spec.emoji {
        out.push_str(&format!(" {emoji}"));
    }
    out.push_str(", of a deepcli hub of agents.\n");
    if let Some(description) = &spec.description {
        out.push_str(&format!("What you are for: {description}\n"));
    }
    if let Some(when) = &spec.when_to_use {
        out.push_str(&format!("When others turn to you: {when}\n"));
    }
    out
}

/// One file's part: its text (cut when longer than the bound), or why there is none.
fn file(spec: &SystemSpec, name: &str) -> String {
    let path = spec.workspace.join(name);
    match read::read(&path, read::MAX_BYTES) {
        WorkspaceFile::Text(text) => {
            let text = text.trim_end();
            if text.is_empty() {
                return "[empty]\n".into();
            }
            format!("{}\n", cut(text, name, spec.max_chars))
        }
        WorkspaceFile::Missing => format!("[missing: expected at {}]\n", path.display()),
        WorkspaceFile::Refused(why) => format!("[not given: {why}]\n"),
    }
}

/// `text` within `max` characters: whole, or its head and tail around a line saying what was
/// left out.
fn cut(text: &str, name: &str, max: usize) -> String {
    let chars = text.chars().count();
    if chars <= max {
        return text.to_string();
    }
    let head = (max as f64 * HEAD) as usize;
    let tail = (max as f64 * TAIL) as usize;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(chars - tail).collect();
    format!(
        "{start}\n[... cut: {name} has {chars} characters, more than bootstrapMaxChars {max}; the first {head} and the last {tail} are given. Read {name} for all of it ...]\n{end}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(workspace: &std::path::Path) -> SystemSpec {
        SystemSpec {
            agent_id: "research".into(),
            name: Some("Research".into()),
            emoji: Some("🔭".into()),
            description: Some("reads papers".into()),
            when_to_use: None,
            workspace: workspace.to_path_buf(),
            max_chars: DEFAULT_MAX_CHARS,
            hub: vec!["Tools: agents_list".into()],
        }
    }

    fn at(hour: i8) -> Zoned {
        jiff::civil::date(2026, 12, 5)
            .at(hour, 14, 0, 0)
            .to_zoned_datetime(jiff::tz::TimeZone::get("Europe/Berlin").unwrap())
            .unwrap()
    }

    #[test]
    fn the_files_come_in_openclaw_order_with_what_is_missing_said() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("MEMORY.md", "remember the milk"),
            ("AGENTS.md", "be brief"),
            ("IDENTITY.md", "- Name: Research"),
            ("BOOTSTRAP.md", "introduce yourself"),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let section = compose(&spec(dir.path()), false, &at(9));
        let text = &section.text;
        assert!(text.starts_with(BEGIN), "{text}");
        assert!(text.ends_with(END), "{text}");
        let order: Vec<usize> = [
            "## AGENTS.md\nbe brief",
            "## SOUL.md\n[missing: expected at",
            "## TOOLS.md",
            "## IDENTITY.md\n- Name: Research",
            "## USER.md",
            "## MEMORY.md\nremember the milk",
            "# Date and time\nSaturday, 2026-12-05 09:14 (time zone Europe/Berlin, UTC+01:00)",
            "# Hub\nTools: agents_list",
            "`NO_REPLY`",
        ]
        .iter()
        .map(|part| {
            text.find(part)
                .unwrap_or_else(|| panic!("no {part:?} in {text}"))
        })
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(text.contains("You are the agent `research`, named Research 🔭"));
        assert!(text.contains("What you are for: reads papers"));
        assert!(
            !text.contains("introduce yourself"),
            "not a first run: {text}"
        );

        let first = compose(&spec(dir.path()), true, &at(9)).text;
        assert!(
            first.contains("## BOOTSTRAP.md (your first session only")
                && first.contains("introduce yourself"),
            "{first}"
        );
        assert_eq!(
            compose(&spec(dir.path()), true, &at(9)).hash,
            section.hash,
            "the next turn is not a first run, and the section is the same"
        );
        std::fs::remove_file(dir.path().join("BOOTSTRAP.md")).unwrap();
        let first = compose(&spec(dir.path()), true, &at(9)).text;
        assert!(!first.contains("BOOTSTRAP.md"), "{first}");
    }

    #[test]
    fn the_hash_is_of_everything_but_the_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("IDENTITY.md"), "- Name: Ada").unwrap();
        let spec = spec(dir.path());
        let nine = compose(&spec, false, &at(9));
        let ten = compose(&spec, false, &at(10));
        assert_ne!(nine.text, ten.text);
        assert_eq!(nine.hash, ten.hash);
        std::fs::write(dir.path().join("IDENTITY.md"), "- Name: Grace").unwrap();
        assert_ne!(compose(&spec, false, &at(9)).hash, nine.hash);
    }

    #[test]
    fn a_stamp_changes_with_a_file_and_is_withheld_while_one_is_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec(dir.path());
        assert!(stamp(&spec).is_some(), "no file: nothing fresh");
        let file = dir.path().join("SOUL.md");
        std::fs::write(&file, "calm").unwrap();
        assert_eq!(stamp(&spec), None, "written just now");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        let set = |when| {
            std::fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(when)
                .unwrap()
        };
        set(old);
        let before = stamp(&spec).unwrap();
        assert_eq!(stamp(&spec), Some(before.clone()));
        std::fs::write(&file, "wild").unwrap();
        set(old + std::time::Duration::from_secs(1));
        assert_ne!(stamp(&spec).unwrap(), before);
    }

    #[test]
    fn a_long_file_keeps_its_head_and_tail_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let memory = format!("START{}END", "é".repeat(200));
        std::fs::write(dir.path().join("MEMORY.md"), &memory).unwrap();
        let mut spec = spec(dir.path());
        spec.max_chars = 100;
        let text = compose(&spec, false, &at(9)).text;
        let cut = "[... cut: MEMORY.md has 208 characters, more than bootstrapMaxChars 100; the first 70 and the last 20 are given. Read MEMORY.md for all of it ...]";
        assert!(text.contains(cut), "{text}");
        let part = &text[text.find("## MEMORY.md\n").unwrap()..text.find("# Date").unwrap()];
        assert!(
            part.contains(&format!("START{}\n[", "é".repeat(65))),
            "{part}"
        );
        assert!(
            part.contains(&format!("]\n{}END\n", "é".repeat(17))),
            "{part}"
        );
        spec.max_chars = 208;
        assert!(!compose(&spec, false, &at(9)).text.contains("[... cut"));
    }

    #[test]
    fn a_symlink_in_the_workspace_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "hunter2").unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("USER.md")).unwrap();
        let text = compose(&spec(dir.path()), false, &at(9)).text;
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("## USER.md\n[not given: it is a symbolic link"),
            "{text}"
        );
    }

    #[test]
    fn the_tags_are_the_ones_deepcli_acts_on() {
        for tag in [
            "NO_REPLY",
            "HEARTBEAT_OK",
            "DISCUSSION_CLOSE",
            "REPLY_SKIP",
            "ANNOUNCE_SKIP",
        ] {
            assert!(TAGS.contains(&format!("`{tag}`")), "{tag}");
        }
    }
}
