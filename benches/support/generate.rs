//! A seeded generator of large, valid configs for benchmarks: N agents, M bindings spread over
//! every routing tier, K channel accounts. Same seed, same files.

/// Sizes of a generated config.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub agents: usize,
    pub bindings: usize,
    pub accounts: usize,
    pub seed: u64,
}

/// The three files' texts.
pub struct Generated {
    pub agents: String,
    pub channels: String,
    pub bindings: String,
}

/// xorshift64*: tiny, deterministic, good enough to spread ids.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const CHANNELS: [&str; 3] = ["telegram", "discord", "slack"];

pub fn generate(size: Size) -> Generated {
    let mut rng = Rng(size.seed.max(1));
    let mut agents =
        String::from("agents:\n  defaults:\n    model: anthropic/claude-sonnet-4\n  list:\n");
    for i in 0..size.agents {
        agents.push_str(&format!("    - id: agent-{i}\n      name: Agent {i}\n"));
        if i == 0 {
            agents.push_str("      default: true\n");
        }
        if i % 7 == 0 {
            agents.push_str(&format!("      workspace: ~/agents/agent-{i}\n"));
        }
        if i % 11 == 0 {
            agents.push_str(
                "      runtime: {kind: process, command: [\"agent-runner\", \"--serve\"]}\n",
            );
        }
    }
    agents.push_str("session:\n  dmScope: per-channel-peer\n");

    // Accounts: `default` plus the rest spread round-robin over the channels.
    let mut accounts: Vec<Vec<String>> = CHANNELS
        .iter()
        .map(|_| vec!["default".to_string()])
        .collect();
    for j in 0..size.accounts.saturating_sub(CHANNELS.len()) {
        accounts[j % CHANNELS.len()].push(format!("acct-{j}"));
    }
    let mut channels = String::from("channels:\n  cli: {}\n");
    for (c, name) in CHANNELS.iter().enumerate() {
        channels.push_str(&format!("  {name}:\n    accounts:\n"));
        for account in &accounts[c] {
            let var = format!("{}_{}", name, account)
                .to_uppercase()
                .replace('-', "_");
            channels.push_str(&format!(
                "      {account}:\n        botToken: {{source: env, id: {var}}}\n        dmPolicy: pairing\n"
            ));
        }
    }

    let mut bindings = String::from("bindings:\n");
    let agent = |rng: &mut Rng| format!("agent-{}", rng.below(size.agents));
    // Every account gets its account-tier binding, so none is uncovered.
    let mut written = 0;
    for (c, name) in CHANNELS.iter().enumerate() {
        for account in &accounts[c] {
            if written == size.bindings {
                break;
            }
            bindings.push_str(&format!(
                "  - agentId: {}\n    match: {{channel: {name}, accountId: {account}}}\n",
                agent(&mut rng)
            ));
            written += 1;
        }
    }
    let mut i = 0;
    while written < size.bindings {
        let c = rng.below(CHANNELS.len());
        let name = CHANNELS[c];
        let account = &accounts[c][rng.below(accounts[c].len())];
        let who = agent(&mut rng);
        let m = match i % 10 {
            0..=3 => format!(
                "{{channel: {name}, accountId: {account}, peer: {{kind: direct, id: \"u{i}\"}}}}"
            ),
            4 => format!(
                "{{channel: {name}, accountId: \"*\", peer: {{kind: group, id: \"g{i}\"}}}}"
            ),
            5 => format!(
                "{{channel: {name}, accountId: {account}, peer: {{kind: channel, id: \"*\"}}, teamId: \"t{i}\"}}"
            ),
            6 => format!(
                "{{channel: {name}, accountId: {account}, guildId: \"guild{i}\", roles: [\"r{i}\", \"r{}\"]}}",
                i + 1
            ),
            7 => format!("{{channel: {name}, accountId: {account}, guildId: \"guild{i}\"}}"),
            8 => format!("{{channel: {name}, accountId: {account}, teamId: \"team{i}\"}}"),
            _ => format!(
                "{{channel: {name}, accountId: {account}, peer: {{kind: channel, id: \"c{i}\"}}, guildId: \"guild{i}\"}}"
            ),
        };
        bindings.push_str(&format!("  - agentId: {who}\n    match: {m}\n"));
        written += 1;
        i += 1;
    }
    Generated {
        agents,
        channels,
        bindings,
    }
}

/// How many channel-tier bindings [`generate_routing`] adds: one per channel.
#[allow(dead_code)] // used by the routing bench and `deepcli-plan-mem`, not by every includer
pub const CHANNEL_TIER_BINDINGS: usize = CHANNELS.len();

/// The config the routing benchmarks use: `bindings` bindings, sized as the validate bench sizes
/// them (agents = bindings/10, accounts = max(bindings/100, 3), seed 7).
///
/// [`generate`] writes no channel-tier binding (`accountId: "*"` with no peer, guild or team).
/// This asks it for `bindings - 3` bindings — the first `bindings - 3` of the validate bench's
/// config of the same size, as the random stream is consumed in order — and appends one
/// channel-tier binding per channel. `generate` itself is unchanged, so the validate figures
/// for a seed stay what they were.
#[allow(dead_code)] // used by the routing bench and `deepcli-plan-mem`, not by every includer
pub fn generate_routing(bindings: usize) -> Generated {
    assert!(
        bindings > CHANNEL_TIER_BINDINGS,
        "need more than {CHANNEL_TIER_BINDINGS} bindings"
    );
    let size = Size {
        agents: (bindings / 10).max(1),
        bindings: bindings - CHANNEL_TIER_BINDINGS,
        accounts: (bindings / 100).max(3),
        seed: 7,
    };
    let mut g = generate(size);
    for (c, name) in CHANNELS.iter().enumerate() {
        g.bindings.push_str(&format!(
            "  - agentId: agent-{}\n    match: {{channel: {name}, accountId: \"*\"}}\n",
            (c + 1) % size.agents
        ));
    }
    g
}
