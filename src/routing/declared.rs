//! The channel accounts a hub declares, for `deepcli route` to say when it routes a message the
//! Access API would refuse: a channel channels.yaml does not declare, or an account of a
//! channel that lists its accounts and not this one (the Access API answers both with 404).
//! Channel `a2a` is declared by channels.yaml's `a2a:` block, with its one account `default`.
//! Routing itself does not look: a route is what the bindings say, declared or not. Pure.

use std::collections::{BTreeMap, BTreeSet};

use super::document::{PlanBody, StoredAccount};
use crate::config::Config;
use crate::ids;

/// Declared channels (normalized), each with its declared accounts (normalized); `None` for a
/// channel that lists no accounts (the built-in `cli`), whose accounts are not checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Declared {
    channels: BTreeMap<String, Option<BTreeSet<String>>>,
}

/// A route the Access API would refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Undeclared {
    /// No such channel.
    Channel { channel: String },
    /// The channel lists its accounts, and this is not one of them.
    Account { channel: String, account: String },
}

impl std::fmt::Display for Undeclared {
    /// `telegarm` or `telegram/work`: the channel account, as the Access API names it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undeclared::Channel { channel } => f.write_str(channel),
            Undeclared::Account { channel, account } => write!(f, "{channel}/{account}"),
        }
    }
}

impl Declared {
    /// What `config`'s channels.yaml declares.
    pub fn of_config(config: &Config) -> Declared {
        let mut channels = BTreeMap::new();
        for channel in &config.channels {
            let accounts: BTreeSet<String> = channel.accounts().map(|a| a.normalized).collect();
            channels.insert(
                ids::channel(&channel.id).into_owned(),
                (!accounts.is_empty()).then_some(accounts),
            );
        }
        // The hub's A2A server takes channel `a2a` as its one account, `default` (a2a.md).
        if config.a2a.is_some() {
            channels.insert(
                "a2a".to_string(),
                Some(BTreeSet::from([ids::DEFAULT_ACCOUNT.to_string()])),
            );
        }
        Declared { channels }
    }

    /// What a published plan says was declared: its accounts section, and the channels its
    /// bindings name (a channel without accounts, like `cli`, is in no accounts section).
    /// `None` when the plan has no accounts section (none declared, or an older plan): then
    /// nothing can be told.
    pub fn of_plan(body: &PlanBody) -> Option<Declared> {
        if body.accounts.is_empty() {
            return None;
        }
        let mut channels: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        for StoredAccount {
            channel,
            account_id,
            ..
        } in &body.accounts
        {
            channels
                .entry(channel.clone())
                .or_insert_with(|| Some(BTreeSet::new()))
                .get_or_insert_with(BTreeSet::new)
                .insert(account_id.clone());
        }
        let bound = body.bindings.iter().map(|b| &b.channel);
        for channel in bound.chain(body.acp.iter().map(|a| &a.channel)) {
            channels.entry(channel.clone()).or_insert(None);
        }
        Some(Declared { channels })
    }

    /// Whether the Access API would know the channel account a route resolved to (normalized
    /// ids, as a [`super::RouteResult`] carries them).
    pub fn check(&self, channel: &str, account: &str) -> Option<Undeclared> {
        match self.channels.get(channel) {
            None => Some(Undeclared::Channel {
                channel: channel.to_string(),
            }),
            Some(Some(accounts)) if !accounts.contains(account) => Some(Undeclared::Account {
                channel: channel.to_string(),
                account: account.to_string(),
            }),
            Some(_) => None,
        }
    }

    /// The declared word closest to the undeclared one (a typo's fix), if any is close.
    pub fn closest(&self, undeclared: &Undeclared) -> Option<&str> {
        match undeclared {
            Undeclared::Channel { channel } => {
                crate::suggest::closest(channel, self.channels.keys().map(String::as_str))
            }
            Undeclared::Account { channel, account } => {
                let accounts = self.channels.get(channel)?.as_ref()?;
                crate::suggest::closest(account, accounts.iter().map(String::as_str))
            }
        }
    }

    /// The declared accounts of `channel`, in order.
    pub fn accounts(&self, channel: &str) -> Vec<&str> {
        self.channels
            .get(channel)
            .and_then(Option::as_ref)
            .map(|a| a.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Declared {
        let mut channels = BTreeMap::new();
        channels.insert("cli".to_string(), None);
        channels.insert(
            "telegram".to_string(),
            Some(["default", "personal"].map(String::from).into()),
        );
        Declared { channels }
    }

    #[test]
    fn an_undeclared_channel_or_account_is_told() {
        let d = declared();
        assert_eq!(d.check("telegram", "default"), None);
        assert_eq!(d.check("cli", "anything"), None, "cli lists no accounts");
        let typo = d.check("telegarm", "default").unwrap();
        assert_eq!(typo.to_string(), "telegarm");
        assert_eq!(d.closest(&typo), Some("telegram"));
        let work = d.check("telegram", "work").unwrap();
        assert_eq!(work.to_string(), "telegram/work");
        assert_eq!(d.accounts("telegram"), ["default", "personal"]);
    }

    #[test]
    fn the_a2a_block_declares_channel_a2a_with_its_one_account() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("channels.yaml"), "a2a:\n  expose: []\n").unwrap();
        let options = crate::config::LoadOptions {
            state_dir: dir.path().join("state"),
            home: None,
        };
        let config = crate::config::load(dir.path(), &options).unwrap().config;
        let d = Declared::of_config(&config);
        assert_eq!(d.check("a2a", "default"), None);
        assert_eq!(d.check("a2a", "other").unwrap().to_string(), "a2a/other");
        std::fs::write(dir.path().join("channels.yaml"), "channels: {}\n").unwrap();
        let config = crate::config::load(dir.path(), &options).unwrap().config;
        let d = Declared::of_config(&config);
        assert!(d.check("a2a", "default").is_some());
    }
}
