//! Mixed route inputs for the routing benches: built from a compiled plan's own bindings so
//! that every tier (and the default) really decides some of them, and checked to.
//! Included by `benches/routing.rs` and `benches/support/plan_mem.rs`.

use std::path::{Path, PathBuf};

use deepcli::config::{self, FileKind, LoadOptions, Loaded};
use deepcli::routing::scope::{AccountPattern, PeerPattern, Scope, Tier};

use super::generate::Rng;
use deepcli::routing::{MatchedBy, Peer, RouteInput, RoutingPlan};

/// Every outcome: the router's tiers in resolution order, then the default.
const TIERS: [MatchedBy; 9] = {
    let t = MatchedBy::TIERS;
    [
        t[0],
        t[1],
        t[2],
        t[3],
        t[4],
        t[5],
        t[6],
        t[7],
        MatchedBy::Default,
    ]
};

/// The generated routing config of `bindings` bindings (`generate::generate_routing`), loaded
/// as the benches load it.
pub fn load_generated(bindings: usize) -> Loaded {
    let g = super::generate::generate_routing(bindings);
    let texts = vec![
        (FileKind::Agents, PathBuf::from("agents.yaml"), g.agents),
        (
            FileKind::Channels,
            PathBuf::from("channels.yaml"),
            g.channels,
        ),
        (
            FileKind::Bindings,
            PathBuf::from("bindings.yaml"),
            g.bindings,
        ),
    ];
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/deepcli-state"),
        home: Some(PathBuf::from("/home/operator")),
    };
    config::load_texts(Path::new("."), texts, &options)
}

/// A channel with no binding in the generated config: its messages go to the default agent.
const UNBOUND_CHANNEL: &str = "cli";

/// The binding tier whose bindings an input must hit for `want` (`None`: the default).
fn source_tier(want: MatchedBy) -> Option<Tier> {
    Some(match want {
        MatchedBy::Peer | MatchedBy::Parent => Tier::Peer,
        MatchedBy::Wildcard => Tier::Wildcard,
        MatchedBy::GuildRoles => Tier::GuildRoles,
        MatchedBy::Guild => Tier::Guild,
        MatchedBy::Team => Tier::Team,
        MatchedBy::Account => Tier::Account,
        MatchedBy::Channel => Tier::Channel,
        MatchedBy::Default => return None,
    })
}

/// `count` inputs, each tier of `TIERS` equally often, in a seeded random order; each with the
/// tier that must decide it. Built from the plan's bindings, so they hit what is really there.
pub fn mixed_inputs(plan: &RoutingPlan, count: usize) -> Vec<(RouteInput, MatchedBy)> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let of_tier = |tier: Tier| -> Vec<&Scope> {
        let scopes: Vec<&Scope> = plan
            .bindings
            .iter()
            .map(|b| &b.scope)
            .filter(|s| s.tier() == tier)
            .collect();
        assert!(
            !scopes.is_empty(),
            "the config has no {} binding",
            tier.as_str()
        );
        scopes
    };
    let candidates: Vec<Vec<&Scope>> = TIERS
        .iter()
        .map(|&want| source_tier(want).map(of_tier).unwrap_or_default())
        .collect();
    let mut inputs: Vec<(RouteInput, MatchedBy)> = (0..count)
        .map(|k| {
            let t = k % TIERS.len();
            let scope =
                (!candidates[t].is_empty()).then(|| candidates[t][rng.below(candidates[t].len())]);
            (input_for(TIERS[t], scope, k), TIERS[t])
        })
        .collect();
    for i in (1..inputs.len()).rev() {
        inputs.swap(i, rng.below(i + 1));
    }
    inputs
}

/// An input decided by `want`, from a binding of its tier (`scope`; `None` for the default).
/// Every input carries a conversation, as real messages do; the ones that must miss the peer
/// tiers get ids no binding names.
fn input_for(want: MatchedBy, scope: Option<&Scope>, k: usize) -> RouteInput {
    let peer = |kind: &str, id: String| {
        Some(Peer {
            kind: kind.into(),
            id,
        })
    };
    let pattern_peer = |p: &PeerPattern, id: String| peer(p.kind.as_str(), id);
    let Some(s) = scope else {
        return RouteInput {
            channel: UNBOUND_CHANNEL.into(),
            peer: peer("direct", format!("dm-{k}")),
            ..RouteInput::default()
        };
    };
    let mut input = RouteInput {
        channel: s.channel.clone(),
        account_id: Some(match &s.account {
            AccountPattern::Exact(a) => a.clone(),
            // Every channel has its `default` account.
            AccountPattern::Any => "default".into(),
        }),
        guild_id: s.guild.clone(),
        team_id: s.team.clone(),
        // A role the binding does not ask for first, so role matching has to look further.
        member_role_ids: s
            .roles
            .first()
            .map(|r| vec!["member".to_string(), r.clone()])
            .unwrap_or_default(),
        ..RouteInput::default()
    };
    let named = s.peer.as_ref();
    input.peer = match want {
        MatchedBy::Peer => named.and_then(|p| pattern_peer(p, p.id.clone()?)),
        MatchedBy::Parent => {
            input.parent_peer = named.and_then(|p| pattern_peer(p, p.id.clone()?));
            named.and_then(|p| pattern_peer(p, format!("thread-{k}")))
        }
        MatchedBy::Wildcard => named.and_then(|p| pattern_peer(p, format!("w-{k}"))),
        MatchedBy::GuildRoles | MatchedBy::Guild | MatchedBy::Team => {
            peer("channel", format!("ch-{k}"))
        }
        MatchedBy::Account => peer("direct", format!("dm-{k}")),
        MatchedBy::Channel => {
            input.account_id = Some(format!("unbound-{k}"));
            peer("direct", format!("dm-{k}"))
        }
        MatchedBy::Default => unreachable!("the default has no binding"),
    };
    input
}

/// Panics unless every input is decided by its tier and every tier is there.
pub fn check_coverage(plan: &RoutingPlan, inputs: &[(RouteInput, MatchedBy)]) {
    let mut seen = [0usize; TIERS.len()];
    for (input, want) in inputs {
        let got = plan.resolve(input).matched_by;
        assert_eq!(
            got,
            *want,
            "input meant for {} got {}: {input:?}",
            want.as_str(),
            got.as_str()
        );
        seen[TIERS.iter().position(|t| t == want).expect("a tier")] += 1;
    }
    for (tier, n) in TIERS.iter().zip(seen) {
        assert!(n > 0, "no input is decided by {}", tier.as_str());
    }
}
