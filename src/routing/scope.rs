//! A route binding's `match`, normalized the way the router reads it: its tier (routing.md §4),
//! the key it is indexed by inside that tier, and its match key (config.md, "Binding conflict").

use crate::config::model::MatchSpec;
use crate::ids::{self, PeerClass, PeerKind};

/// Which accounts a binding covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccountPattern {
    /// `accountId: "*"`.
    Any,
    /// A normalized account id (`default` when omitted).
    Exact(String),
}

impl AccountPattern {
    pub fn parse(raw: Option<&str>) -> AccountPattern {
        match raw.map(str::trim) {
            Some("*") => AccountPattern::Any,
            Some(id) => AccountPattern::Exact(ids::account_id(id).into_owned()),
            None => AccountPattern::Exact(ids::DEFAULT_ACCOUNT.to_string()),
        }
    }

    /// Whether every account this pattern's `other` covers is covered by `self`.
    pub fn covers(&self, other: &AccountPattern) -> bool {
        match (self, other) {
            (AccountPattern::Any, _) => true,
            (AccountPattern::Exact(a), AccountPattern::Exact(b)) => a == b,
            (AccountPattern::Exact(_), AccountPattern::Any) => false,
        }
    }

    pub fn matches(&self, account: &str) -> bool {
        match self {
            AccountPattern::Any => true,
            AccountPattern::Exact(a) => a == account,
        }
    }
}

/// The peer a binding names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerPattern {
    pub kind: PeerKind,
    /// Trimmed; `None` for the wildcard `*`.
    pub id: Option<String>,
}

/// The tiers of routing.md §4, in resolution order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    Peer,
    Wildcard,
    GuildRoles,
    Guild,
    Team,
    Account,
    Channel,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Peer => "peer",
            Tier::Wildcard => "peer wildcard",
            Tier::GuildRoles => "guild+roles",
            Tier::Guild => "guild",
            Tier::Team => "team",
            Tier::Account => "account",
            Tier::Channel => "channel",
        }
    }
}

/// A normalized `match`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub channel: String,
    pub account: AccountPattern,
    pub peer: Option<PeerPattern>,
    pub guild: Option<String>,
    pub team: Option<String>,
    /// Sorted, unique; empty means no role constraint.
    pub roles: Vec<String>,
}

/// Everything that decides which messages a route binding claims: two bindings with equal keys
/// claim exactly the same conversations.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MatchKey {
    pub channel: String,
    pub peer: Option<(Option<PeerClass>, Option<String>)>,
    pub guild: Option<String>,
    pub team: Option<String>,
    pub roles: Vec<String>,
    pub account: AccountPattern,
}

/// [`MatchKey`] borrowed from its [`Scope`]: equal exactly when the owned keys are (the owned
/// key is made from this one), for the rules that key a map by every binding's match without
/// copying its strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatchKeyRef<'a> {
    pub channel: &'a str,
    pub peer: Option<(Option<PeerClass>, Option<&'a str>)>,
    pub guild: Option<&'a str>,
    pub team: Option<&'a str>,
    pub roles: &'a [String],
    pub account: &'a AccountPattern,
}

impl MatchKeyRef<'_> {
    pub fn owned(self) -> MatchKey {
        MatchKey {
            channel: self.channel.to_string(),
            peer: self.peer.map(|(class, id)| (class, id.map(str::to_string))),
            guild: self.guild.map(str::to_string),
            team: self.team.map(str::to_string),
            roles: self.roles.to_vec(),
            account: self.account.clone(),
        }
    }
}

/// Where a binding sits in its tier: bindings with equal tier keys compete in config order.
/// Borrowed from its [`Scope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TierKey<'a> {
    pub channel: &'a str,
    pub tier: Tier,
    /// The peer's class (its kind, for a kind outside the three), for the peer and wildcard
    /// tiers; empty for the others.
    pub class: &'a str,
    /// The peer id, the guild or the team; for the account tier the account. Empty for the
    /// wildcard and channel tiers.
    pub key: &'a str,
}

fn non_empty(raw: Option<&str>) -> Option<String> {
    raw.map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl Scope {
    pub fn from_spec(spec: &MatchSpec) -> Scope {
        let mut roles: Vec<String> = spec
            .roles
            .iter()
            .flatten()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        roles.sort();
        roles.dedup();
        Scope {
            channel: ids::channel(&spec.channel).into_owned(),
            account: AccountPattern::parse(spec.account_id.as_deref()),
            peer: spec.peer.as_ref().map(|p| {
                let id = p.id.trim();
                PeerPattern {
                    kind: PeerKind::parse(&p.kind),
                    id: (id != "*").then(|| id.to_string()),
                }
            }),
            guild: non_empty(spec.guild_id.as_deref()),
            team: non_empty(spec.team_id.as_deref()),
            roles,
        }
    }

    /// The tier this binding sits in (the first rule of §4 that applies).
    pub fn tier(&self) -> Tier {
        match &self.peer {
            Some(PeerPattern { id: Some(_), .. }) => Tier::Peer,
            Some(PeerPattern { id: None, .. }) => Tier::Wildcard,
            None if self.guild.is_some() && !self.roles.is_empty() => Tier::GuildRoles,
            None if self.guild.is_some() => Tier::Guild,
            None if self.team.is_some() => Tier::Team,
            None if self.account != AccountPattern::Any => Tier::Account,
            None => Tier::Channel,
        }
    }

    pub fn tier_key(&self) -> TierKey<'_> {
        let tier = self.tier();
        fn class(p: &PeerPattern) -> &str {
            match p.kind.class() {
                Some(class) => class.as_str(),
                None => p.kind.as_str(),
            }
        }
        let (class, key) = match (tier, &self.peer) {
            (Tier::Peer, Some(p)) => (class(p), p.id.as_deref().unwrap_or_default()),
            (Tier::Wildcard, Some(p)) => (class(p), ""),
            (Tier::GuildRoles | Tier::Guild, _) => ("", self.guild.as_deref().unwrap_or_default()),
            (Tier::Team, _) => ("", self.team.as_deref().unwrap_or_default()),
            (Tier::Account, _) => match &self.account {
                AccountPattern::Exact(a) => ("", a.as_str()),
                AccountPattern::Any => ("", ""),
            },
            _ => ("", ""),
        };
        TierKey {
            channel: &self.channel,
            tier,
            class,
            key,
        }
    }

    pub fn match_key(&self) -> MatchKey {
        self.match_key_ref().owned()
    }

    /// [`Scope::match_key`] without copies.
    pub fn match_key_ref(&self) -> MatchKeyRef<'_> {
        MatchKeyRef {
            channel: &self.channel,
            peer: self
                .peer
                .as_ref()
                .map(|p| (p.kind.class(), p.id.as_deref())),
            guild: self.guild.as_deref(),
            team: self.team.as_deref(),
            roles: &self.roles,
            account: &self.account,
        }
    }

    /// Whether every message `later` matches is also matched by `self`, given that both sit at
    /// the same tier key (so channel, tier and the tier's own key are already equal).
    pub fn covers(&self, later: &Scope) -> bool {
        let same_or_unset =
            |mine: &Option<String>, theirs: &Option<String>| mine.is_none() || mine == theirs;
        let peer_ok = match (&self.peer, &later.peer) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.kind.class() == b.kind.class() && (a.id.is_none() || a.id == b.id)
            }
            _ => false,
        };
        let roles_ok = self.roles.is_empty()
            || (!later.roles.is_empty()
                && later
                    .roles
                    .iter()
                    .all(|r| self.roles.binary_search(r).is_ok()));
        peer_ok
            && self.account.covers(&later.account)
            && same_or_unset(&self.guild, &later.guild)
            && same_or_unset(&self.team, &later.team)
            && roles_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::PeerSpec;

    fn scope(spec: MatchSpec) -> Scope {
        Scope::from_spec(&spec)
    }

    fn m(channel: &str) -> MatchSpec {
        MatchSpec {
            channel: channel.into(),
            ..MatchSpec::default()
        }
    }

    #[test]
    fn tiers_follow_the_first_rule_that_applies() {
        let peer = MatchSpec {
            peer: Some(PeerSpec {
                kind: "channel".into(),
                id: "c1".into(),
            }),
            guild_id: Some("g1".into()),
            ..m("discord")
        };
        assert_eq!(scope(peer).tier(), Tier::Peer);
        let roles = MatchSpec {
            guild_id: Some("g".into()),
            roles: Some(vec!["r".into()]),
            ..m("discord")
        };
        assert_eq!(scope(roles).tier(), Tier::GuildRoles);
        let empty_roles = MatchSpec {
            guild_id: Some("g".into()),
            roles: Some(vec![]),
            ..m("discord")
        };
        assert_eq!(scope(empty_roles).tier(), Tier::Guild);
        assert_eq!(scope(m("telegram")).tier(), Tier::Account);
        let any = MatchSpec {
            account_id: Some("*".into()),
            ..m("telegram")
        };
        assert_eq!(scope(any).tier(), Tier::Channel);
    }

    #[test]
    fn match_keys_fold_spellings() {
        let a = MatchSpec {
            account_id: Some(" Biz ".into()),
            peer: Some(PeerSpec {
                kind: "dm".into(),
                id: "1".into(),
            }),
            ..m("Telegram")
        };
        let b = MatchSpec {
            account_id: Some("biz".into()),
            peer: Some(PeerSpec {
                kind: "direct".into(),
                id: "1".into(),
            }),
            ..m("telegram")
        };
        assert_eq!(scope(a).match_key(), scope(b).match_key());
        let g = MatchSpec {
            peer: Some(PeerSpec {
                kind: "group".into(),
                id: "x".into(),
            }),
            ..m("discord")
        };
        let c = MatchSpec {
            peer: Some(PeerSpec {
                kind: "channel".into(),
                id: "x".into(),
            }),
            ..m("discord")
        };
        assert_eq!(scope(g).match_key(), scope(c).match_key());
        let omitted = m("slack");
        let default = MatchSpec {
            account_id: Some("default".into()),
            ..m("slack")
        };
        assert_eq!(scope(omitted).match_key(), scope(default).match_key());
    }

    /// The borrowed key is equal, and hashes equal, exactly where the owned key does.
    #[test]
    fn the_borrowed_match_key_is_the_owned_one() {
        use std::hash::BuildHasher;
        let peer = |kind: &str, id: &str| {
            Some(PeerSpec {
                kind: kind.into(),
                id: id.into(),
            })
        };
        let specs = [
            m("telegram"),
            m("Telegram"),
            m("slack"),
            MatchSpec {
                account_id: Some("default".into()),
                ..m("slack")
            },
            MatchSpec {
                account_id: Some("*".into()),
                ..m("slack")
            },
            MatchSpec {
                account_id: Some("Biz".into()),
                peer: peer("dm", "1"),
                ..m("telegram")
            },
            MatchSpec {
                account_id: Some("biz".into()),
                peer: peer("direct", "1"),
                ..m("telegram")
            },
            MatchSpec {
                peer: peer("group", "x"),
                ..m("discord")
            },
            MatchSpec {
                peer: peer("channel", "x"),
                ..m("discord")
            },
            MatchSpec {
                peer: peer("channel", "*"),
                ..m("discord")
            },
            MatchSpec {
                guild_id: Some("g".into()),
                roles: Some(vec!["b".into(), "a".into()]),
                ..m("discord")
            },
            MatchSpec {
                guild_id: Some("g".into()),
                roles: Some(vec!["a".into(), "b".into(), "a".into()]),
                ..m("discord")
            },
            MatchSpec {
                guild_id: Some("g".into()),
                ..m("discord")
            },
            MatchSpec {
                team_id: Some("g".into()),
                ..m("discord")
            },
        ];
        let scopes: Vec<Scope> = specs.into_iter().map(scope).collect();
        let hasher = std::collections::hash_map::RandomState::new();
        let mut equal_pairs = 0;
        for a in &scopes {
            for b in &scopes {
                let owned = a.match_key() == b.match_key();
                assert_eq!(a.match_key_ref() == b.match_key_ref(), owned, "{a:?} {b:?}");
                if owned {
                    equal_pairs += 1;
                    assert_eq!(
                        hasher.hash_one(a.match_key_ref()),
                        hasher.hash_one(b.match_key_ref())
                    );
                }
            }
            assert_eq!(a.match_key_ref().owned(), a.match_key());
        }
        // Each of the 14 with itself, and both ways the five pairs written differently that are
        // the same binding (channel case, omitted default account, account case and `dm` for
        // `direct`, `group` for `channel`, roles' order and repeats): 14 + 5 * 2.
        assert_eq!(equal_pairs, 24);
    }

    #[test]
    fn roles_superset_covers() {
        let wide = scope(MatchSpec {
            guild_id: Some("g".into()),
            roles: Some(vec!["a".into(), "b".into()]),
            ..m("discord")
        });
        let narrow = scope(MatchSpec {
            guild_id: Some("g".into()),
            roles: Some(vec!["a".into()]),
            ..m("discord")
        });
        assert!(wide.covers(&narrow));
        assert!(!narrow.covers(&wide));
    }
}
