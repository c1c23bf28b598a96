//! The routing engine in-process: `RoutingPlan::compile` at growing sizes, and `resolve` over a
//! mix of inputs that hit every tier and the default, at 1k and 100k bindings (the cost of a
//! resolution should not depend on the number of bindings).
//!
//! The config is `generate::generate_routing`, the one `deepcli-plan-mem` measures.

#[path = "support/generate.rs"]
mod generate;

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deepcli::config::{self, FileKind, LoadOptions, Loaded};
use deepcli::routing::scope::{AccountPattern, PeerPattern, Scope, Tier};
use deepcli::routing::{MatchedBy, Peer, RouteInput, RoutingPlan};
use deepcli::validate;

// The shipped binary's allocator: resolve allocates its result's strings.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Inputs per resolve benchmark, the same at every size, so only the plan's size differs.
const INPUTS: usize = 9 * 1024;

fn load(bindings: usize) -> Loaded {
    let g = generate::generate_routing(bindings);
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
    let loaded = config::load_texts(Path::new("."), texts, &options);
    let errors: Vec<_> = loaded
        .diagnostics
        .iter()
        .chain(&validate::check(&loaded.config))
        .filter(|d| d.is_error())
        .map(|d| format!("{d:?}"))
        .collect();
    assert!(
        errors.is_empty(),
        "generated config is not valid: {errors:#?}"
    );
    loaded
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/compile");
    group.sample_size(10);
    for bindings in [1_000usize, 10_000, 100_000] {
        let loaded = load(bindings);
        group.throughput(Throughput::Elements(bindings as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(bindings),
            &loaded.config,
            |b, config| b.iter_with_large_drop(|| RoutingPlan::compile(black_box(config))),
        );
    }
    group.finish();
}

fn resolve(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/resolve");
    group.throughput(Throughput::Elements(1));
    for bindings in [1_000usize, 100_000] {
        let loaded = load(bindings);
        let plan = RoutingPlan::compile(&loaded.config);
        drop(loaded);
        let mixed = mixed_inputs(&plan, INPUTS);
        check_coverage(&plan, &mixed);
        let inputs: Vec<RouteInput> = mixed.into_iter().map(|(input, _)| input).collect();
        group.bench_function(BenchmarkId::from_parameter(bindings), |b| {
            let mut next = 0;
            b.iter(|| {
                let input = &inputs[next];
                next += 1;
                if next == inputs.len() {
                    next = 0;
                }
                plan.resolve(black_box(input))
            })
        });
    }
    group.finish();
}

// --- Mixed route inputs. The same code is in benches/support/plan_mem.rs (a bench cannot
// --- include a bin's module); keep the two in step.

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
fn mixed_inputs(plan: &RoutingPlan, count: usize) -> Vec<(RouteInput, MatchedBy)> {
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
fn check_coverage(plan: &RoutingPlan, inputs: &[(RouteInput, MatchedBy)]) {
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

criterion_group!(benches, compile, resolve);
criterion_main!(benches);
