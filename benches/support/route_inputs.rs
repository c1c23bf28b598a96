//! Mixed route inputs for the routing benches: built from a compiled plan's own bindings so
//! that every tier (and the default) really decides some of them, and checked to.
//! Included by `benches/routing.rs` and `benches/support/plan_mem.rs`.

use deepcli::routing::scope::{AccountPattern, PeerPattern, Scope, Tier};
use deepcli::routing::{MatchedBy, Peer, RouteInput, RoutingPlan};

/// Every `MatchedBy`, in resolution order.
const TIERS: [MatchedBy; 9] = [
    MatchedBy::Peer,
    MatchedBy::Parent,
    MatchedBy::Wildcard,
    MatchedBy::GuildRoles,
    MatchedBy::Guild,
    MatchedBy::Team,
    MatchedBy::Account,
    MatchedBy::Channel,
    MatchedBy::Default,
];

/// A channel with no binding in the generated config: its messages go to the default agent.
const UNBOUND_CHANNEL: &str = "cli";

/// xorshift64*, as in generate.rs.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1) as u64) as usize
    }
}

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
