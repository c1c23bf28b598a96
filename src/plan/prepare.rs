//! The one assembly of planning, for `plan`, `apply`, the controller's reconcile and the
//! management service's trash preview: load → rules → desired state → world → diff.
//!
//! Independent stages run side by side: the live state is read while the files are parsed; the
//! semantic rules run while the desired state is built and the disk observed (their results are
//! dropped when a rule finds an error); the routing document a changed plan will publish is
//! rendered while the plan is diffed. Each caller keeps only what is its own: printing and
//! prompts, threads and look-ahead, a preview.

use std::path::Path;
use std::sync::Mutex;

use super::observe::HashCache;
use super::{Desired, Options, Plan, World, diff};
use crate::config::{self, LoadOptions};
use crate::state::{LiveState, StateDir, StateError};
use crate::threads;
use crate::validate::{self, Report};

/// Where the config comes from.
pub(crate) enum Source<'a> {
    /// Loaded from a directory, then checked.
    Dir {
        dir: &'a Path,
        load: &'a LoadOptions,
    },
    /// Already checked (a management edit's would-be config).
    Checked(Box<Report>),
}

/// How the world is known.
pub(crate) enum Sight<'a> {
    /// Looked at on disk, by the agents' paths (through a hash cache kept between calls when
    /// given).
    Observe(Option<&'a Mutex<HashCache>>),
    /// Taken from the live state as recorded (a plan against a `state export` snapshot).
    Assumed,
}

/// What to plan with.
pub(crate) struct Inputs<'a, L> {
    pub config: Source<'a>,
    /// Reads the live state; runs while the files are parsed. `None`: no state yet.
    pub live: L,
    pub state: &'a StateDir,
    pub sight: Sight<'a>,
    pub options: Options<'a>,
    /// Render the routing document a changed plan will publish (apply does; `plan` needs
    /// only its hash).
    pub render_routing: bool,
}

/// A plan and everything it was made from.
pub(crate) struct Prepared {
    /// The checked config and its warnings.
    pub report: Report,
    pub desired: Desired,
    pub live: LiveState,
    pub world: World,
    pub plan: Plan,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum PrepareError {
    /// The config directory could not be read at all.
    #[error(transparent)]
    Load(#[from] config::LoadError),
    /// The config has errors: nothing was planned.
    #[error("the config has {} errors", .0.errors())]
    Rejected(Box<Report>),
    /// The config directory holds none of the three files, and that was not allowed: a wrong
    /// `--config` looks like this, and would plan a hub of only the implicit `main`.
    #[error("config directory `{}` has none of agents.yaml, channels.yaml, bindings.yaml; nothing was planned", dir.display())]
    Empty {
        dir: std::path::PathBuf,
        /// The hash of the (empty) config, as a rejection names it.
        config_hash: String,
    },
    #[error(transparent)]
    State(#[from] StateError),
    /// The config is valid but its bindings outgrow the routing index.
    #[error(transparent)]
    Routing(#[from] crate::routing::IndexError),
}

/// Plans `inputs`.
pub(crate) fn prepare<L>(inputs: Inputs<'_, L>) -> Result<Prepared, PrepareError>
where
    L: FnOnce() -> Result<Option<LiveState>, StateError> + Send,
{
    let Inputs {
        config,
        live,
        state,
        sight,
        options,
        render_routing,
    } = inputs;
    let mut stages = Stages::start();
    let (config, live) = match config {
        Source::Dir { dir, load } => {
            let (loaded, live) = threads::join(|| config::load(dir, load), live);
            let loaded = loaded?;
            if loaded.config.sources.files.is_empty() && !options.allow_empty {
                return Err(PrepareError::Empty {
                    dir: dir.to_path_buf(),
                    config_hash: loaded.config.sources.hash(),
                });
            }
            (Config::Loaded(loaded), live)
        }
        Source::Checked(report) => (Config::Checked(*report), live()),
    };
    stages.done("load");
    let live = match live {
        Ok(live) => live.unwrap_or_else(LiveState::empty),
        // A config with errors is the first thing to say, as it is without a state.
        Err(e) => {
            let report = match config {
                Config::Loaded(loaded) => validate::finish(loaded),
                Config::Checked(report) => report,
            };
            return Err(match report.is_valid() {
                true => PrepareError::State(e),
                false => PrepareError::Rejected(Box::new(report)),
            });
        }
    };
    let observe = |agents: &[super::desired::DesiredAgent], live: &LiveState| match sight {
        Sight::Assumed => World::assumed(live),
        Sight::Observe(None) => World::observe(agents, live, state),
        Sight::Observe(Some(hashes)) => match hashes.lock() {
            Ok(mut hashes) => World::observe_with(agents, live, state, &mut hashes),
            Err(_) => World::observe(agents, live, state),
        },
    };
    let (mut report, mut desired, world) = match config {
        Config::Checked(report) => {
            if !report.is_valid() {
                return Err(PrepareError::Rejected(Box::new(report)));
            }
            let desired = Desired::from_config(&report.config)?;
            let world = observe(&desired.agents, &live);
            (report, desired, world)
        }
        Config::Loaded(loaded) => {
            if loaded.diagnostics.iter().any(|d| d.is_error()) {
                return Err(PrepareError::Rejected(Box::new(validate::finish(loaded))));
            }
            // The config loaded cleanly, so the desired state is built and the disk observed
            // while the semantic rules run: both are thrown away if a rule finds an error.
            let agents = Desired::agents(&loaded.config);
            let (report, made) = validate::finish_with(loaded, |config| {
                threads::join(
                    || Desired::without_agents(config),
                    || observe(&agents, &live),
                )
            });
            match made {
                Some((Ok(mut desired), world)) if report.is_valid() => {
                    desired.agents = agents;
                    (report, desired, world)
                }
                Some((Err(e), world)) if report.is_valid() => {
                    threads::drop_in_background((live, world, agents));
                    return Err(PrepareError::Routing(e));
                }
                made => {
                    threads::drop_in_background((live, made, agents));
                    return Err(PrepareError::Rejected(Box::new(report)));
                }
            }
        }
    };
    // The rules and the desired state (each binding's line) have what they need from
    // bindings.yaml's span tree, the bulk of a large config: it is freed before the diff and
    // the apply, and is not kept with the config the controller serves.
    threads::drop_in_background(report.config.sources.take_tree(config::FileKind::Bindings));
    stages.done("check+desired+observe");
    // When the routing changed, the document an apply will publish is rendered while the plan
    // is made.
    let published = live.routing.as_ref();
    let next = published.map_or(1, |r| r.generation + 1);
    let changed = published.map(|r| r.content_hash.as_str()) != Some(desired.routing_hash.as_str());
    let (plan, document) = threads::join(
        || diff(&desired, &live, &world, &options),
        || (render_routing && changed).then(|| desired.render_routing(next)),
    );
    desired.routing_document = document.map(|d| (next, d));
    stages.done("diff");
    Ok(Prepared {
        report,
        desired,
        live,
        world,
        plan,
    })
}

/// The config as far as it got before the rules.
enum Config {
    Loaded(config::Loaded),
    Checked(Report),
}

/// Times the stages of a plan, or of a reconcile, for the debug log (`RUST_LOG=deepcli=debug`).
pub(crate) struct Stages {
    last: std::time::Instant,
}

impl Stages {
    pub(crate) fn start() -> Stages {
        Stages {
            last: std::time::Instant::now(),
        }
    }

    pub(crate) fn done(&mut self, stage: &'static str) {
        let now = std::time::Instant::now();
        tracing::debug!(stage, ms = (now - self.last).as_secs_f64() * 1e3, "stage");
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FileKind;

    /// A plan frees bindings.yaml's span tree once the rules and the desired state have taken
    /// each binding's position from it; the text stays (snippets, the hash) and the desired
    /// bindings keep their lines.
    #[test]
    fn a_plan_frees_the_bindings_tree_and_keeps_every_binding_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/route");
        let load = LoadOptions {
            state_dir: tmp.path().to_path_buf(),
            home: None,
        };
        let state = StateDir::new(tmp.path());
        let guard = super::super::guard(&dir, &load);
        let prepared = prepare(Inputs {
            config: Source::Dir {
                dir: &dir,
                load: &load,
            },
            live: || Ok(None),
            state: &state,
            sight: Sight::Assumed,
            options: Options {
                allow_destroy: false,
                allow_mass_delete: false,
                allow_empty: false,
                guard: &guard,
            },
            render_routing: false,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let sources = &prepared.report.config.sources;
        let bindings = sources.get(FileKind::Bindings).unwrap();
        assert!(bindings.root.is_none(), "the bindings tree was kept");
        assert!(!bindings.text.is_empty());
        assert!(sources.get(FileKind::Channels).unwrap().root.is_some());
        assert!(prepared.desired.bindings.len() > 3);
        let tree = config::yaml::parse(&bindings.text).unwrap().unwrap();
        for (i, b) in prepared.desired.bindings.iter().enumerate() {
            let line = tree
                .pointer(&format!("/bindings/{i}"))
                .unwrap()
                .span
                .start
                .line;
            assert_eq!(b.line, line, "{}", b.describe);
        }
    }
}
