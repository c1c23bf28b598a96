//! The inbound policy's gate in-process (policy.md): what deciding costs per envelope once the
//! plan is compiled — account lookup, group entry, the decision order, a mention check — with
//! 10,000 senders in `allowFrom` (the target: under 2 µs per envelope), and compiling the plan.
//!
//! The state lookups a verdict may ask for (a pairing approval, thread participation) are the
//! Access layer's and not measured here.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deepcli::config::{self, FileKind, LoadOptions};
use deepcli::policy::{Conversation, Message, PolicyPlan, Verdict};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ALLOW_FROM: usize = 10_000;

/// A Slack account with `ALLOW_FROM` senders, a listed channel and the agent's name pattern.
fn config(senders: usize) -> config::Config {
    let ids: Vec<String> = (0..senders).map(|i| format!("\"U{i:08}\"")).collect();
    let channels = format!(
        "channels:\n  slack:\n    groups:\n      C0GENERAL: {{}}\n    accounts:\n      default:\n        botUserId: U0BOT\n        dmPolicy: allowlist\n        allowFrom: [{}]\n",
        ids.join(", ")
    );
    let agents = "agents:\n  list:\n    - id: main\n      identity: {name: Helper}\n";
    let options = LoadOptions {
        state_dir: PathBuf::from("/srv/state"),
        home: None,
    };
    let loaded = config::load_texts(
        Path::new("/cfg"),
        vec![
            (
                FileKind::Channels,
                PathBuf::from("/cfg/channels.yaml"),
                channels,
            ),
            (
                FileKind::Agents,
                PathBuf::from("/cfg/agents.yaml"),
                agents.to_string(),
            ),
        ],
        &options,
    );
    assert!(
        !loaded.diagnostics.iter().any(|d| d.is_error()),
        "{:?}",
        loaded.diagnostics
    );
    loaded.config
}

fn gate(c: &mut Criterion) {
    let plan = PolicyPlan::compile(&config(ALLOW_FROM));
    let mentions = ["U0BOT".to_string()];
    let text =
        "could someone look at the deploy? the staging build has been red since this morning";
    let dm = |sender: &'static str| Message {
        conversation: Conversation::Direct,
        sender_id: Some(sender),
        is_bot: false,
        mentions: &[],
        reply_to_sender_id: None,
        in_thread: false,
        text,
        guild_id: None,
        roles: &[],
    };
    let group = |sender: &'static str, mentions: &'static [String], text: &'static str| Message {
        conversation: Conversation::Group,
        text,
        mentions,
        ..dm(sender)
    };
    // Leaked: the cases borrow them for the whole run.
    let mentions: &'static [String] = Box::leak(Box::new(mentions));
    let cases: [(&str, Message<'static>, bool); 6] = [
        ("dm-allowed", dm("U00009999"), true),
        ("dm-not-allowed", dm("U99999999"), false),
        (
            "group-mentioned-by-id",
            group("U00004242", mentions, text),
            true,
        ),
        (
            "group-mentioned-by-name",
            group("U00004242", &[], "@helper could you look at the deploy?"),
            true,
        ),
        ("group-not-mentioned", group("U00004242", &[], text), false),
        (
            "group-sender-not-allowed",
            group("U99999999", mentions, text),
            false,
        ),
    ];
    let mut g = c.benchmark_group(format!("policy/gate/allowFrom={ALLOW_FROM}"));
    g.throughput(Throughput::Elements(1));
    for (name, message, delivers) in &cases {
        let verdict = plan.verdict(
            "slack",
            "default",
            "main",
            Some("C0GENERAL"),
            None,
            message,
            false,
        );
        assert_eq!(
            matches!(verdict, Some(Verdict::Deliver)),
            *delivers,
            "{name}: {verdict:?}"
        );
        g.bench_with_input(BenchmarkId::from_parameter(name), message, |b, message| {
            b.iter(|| {
                plan.verdict(
                    black_box("slack"),
                    black_box("default"),
                    black_box("main"),
                    black_box(Some("C0GENERAL")),
                    None,
                    black_box(message),
                    false,
                )
            })
        });
    }
    g.finish();
}

fn compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy/compile");
    g.sample_size(10);
    for senders in [1_000usize, ALLOW_FROM, 100_000] {
        let config = config(senders);
        g.throughput(Throughput::Elements(senders as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(senders),
            &config,
            |b, config| b.iter_with_large_drop(|| PolicyPlan::compile(black_box(config))),
        );
    }
    g.finish();
}

criterion_group!(benches, gate, compile);
criterion_main!(benches);
