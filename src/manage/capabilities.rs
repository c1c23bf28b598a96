//! What each chat platform can do, as deepcli knows it: a static table (no network), for
//! `channels capabilities` and for hints.

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub channel: &'static str,
    pub display_name: &'static str,
    /// Replies in threads (and thread-scoped sessions).
    pub threads: bool,
    /// Several bot accounts in one deepcli (`accounts:` with more than `default`).
    pub multi_account: bool,
    /// Bots can see and answer other bots' mentions.
    pub bot_to_bot_mentions: bool,
    /// `allowBots: mentions` is honoured: deepcli gates on the mentions the adapter reports,
    /// so on every platform that has bots.
    pub allow_bots_mentions: bool,
    /// Guilds with roles (`match.guildId`, `match.roles`).
    pub guilds_and_roles: bool,
    /// Workspaces/teams (`match.teamId`).
    pub teams: bool,
    /// Group conversations.
    pub groups: bool,
    /// The secret fields an account takes (as references).
    pub credentials: &'static [&'static str],
    /// Who brings the platform's messages in.
    pub adapter: Served,
}

/// Who connects a platform to the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Served {
    /// deepcli's own adapter: `deepcli up` connects to the platform by itself.
    BuiltIn,
    /// The operator's own command line (`deepcli inbound send`).
    Local,
    /// An external bridge signs envelopes to `POST /v1/inbound`.
    Bridge,
}

impl Served {
    pub fn as_str(self) -> &'static str {
        match self {
            Served::BuiltIn => "built-in",
            Served::Local => "local",
            Served::Bridge => "bridge",
        }
    }
}

const fn caps(
    channel: &'static str,
    display_name: &'static str,
    flags: [bool; 7],
    credentials: &'static [&'static str],
) -> Capabilities {
    let adapter = match channel.as_bytes() {
        b"slack" | b"telegram" | b"discord" => Served::BuiltIn,
        b"cli" => Served::Local,
        _ => Served::Bridge,
    };
    Capabilities {
        adapter,
        channel,
        display_name,
        threads: flags[0],
        multi_account: flags[1],
        bot_to_bot_mentions: flags[2],
        allow_bots_mentions: flags[3],
        guilds_and_roles: flags[4],
        teams: flags[5],
        groups: flags[6],
        credentials,
    }
}

/// Every platform deepcli knows, by channel id.
//                                 threads multi  b2b   mentions guilds teams groups
pub const TABLE: &[Capabilities] = &[
    caps(
        "cli",
        "Command line",
        [false, false, false, false, false, false, false],
        &[],
    ),
    caps(
        "discord",
        "Discord",
        [true, true, true, true, true, false, true],
        &["token"],
    ),
    caps(
        "googlechat",
        "Google Chat",
        [true, true, false, true, false, false, true],
        &["apiKey", "clientSecret"],
    ),
    caps(
        "imessage",
        "iMessage",
        [false, false, false, true, false, false, true],
        &[],
    ),
    caps(
        "matrix",
        "Matrix",
        [true, true, true, true, false, false, true],
        &["token", "password"],
    ),
    caps(
        "msteams",
        "Microsoft Teams",
        [true, true, false, true, false, true, true],
        &["clientSecret"],
    ),
    caps(
        "signal",
        "Signal",
        [false, true, false, true, false, false, true],
        &["password"],
    ),
    caps(
        "slack",
        "Slack",
        [true, true, true, true, false, true, true],
        &["botToken", "appToken", "userToken", "signingSecret"],
    ),
    caps(
        "telegram",
        "Telegram",
        [true, true, false, true, false, false, true],
        &["botToken", "webhookSecret"],
    ),
    caps(
        "whatsapp",
        "WhatsApp",
        [false, true, false, true, false, false, true],
        &["token", "apiKey"],
    ),
];

pub fn lookup(channel: &str) -> Option<&'static Capabilities> {
    let channel = crate::ids::channel(channel);
    TABLE.iter().find(|c| c.channel == channel)
}

/// Where `channels status --probe` connects to see whether the platform answers.
pub fn probe_host(channel: &str) -> Option<&'static str> {
    Some(match crate::ids::channel(channel).as_ref() {
        "telegram" => "api.telegram.org:443",
        "discord" => "discord.com:443",
        "slack" => "slack.com:443",
        "whatsapp" => "graph.facebook.com:443",
        "msteams" => "login.microsoftonline.com:443",
        "googlechat" => "chat.googleapis.com:443",
        _ => return None,
    })
}
