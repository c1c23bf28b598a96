//! `deepcli sandbox …`: what an agent's sandbox lets it touch (`explain`), and the forwarder an
//! `allowlist` sandbox runs in front of its command (`forward`, started by deepcli), and the
//! Landlock backend's wrapper (`exec`, started by deepcli).

use std::path::PathBuf;

use clap::Subcommand;

use super::{ExitStatus, GlobalSettings};
use crate::sandbox::{Host, Layout, Surroundings, explain};

#[derive(Debug, Subcommand)]
pub(super) enum SandboxCommand {
    /// What AGENT's runtime can and cannot touch: the paths it reads and writes, what stays
    /// hidden, its network, processes and environment (names only), and which backend
    /// enforces it here and why — from the config directory, as `deepcli up` starts it.
    #[command(after_help = "\
Exit codes:
  0  explained; the sandbox can be applied here (or the agent's sandbox is off)
  1  the sandbox cannot be applied on this host (the runtime would not start), or the config
     has errors
  2  the command could not run (no such agent, unreadable config)")]
    Explain {
        /// The agent's id.
        agent: String,
        /// Print the explanation as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inside an `allowlist` sandbox: listen on LISTEN and carry each connection to the egress
    /// proxy's socket while COMMAND runs (deepcli starts it; not for people).
    #[command(hide = true)]
    Forward {
        /// The address to listen on, inside the sandbox (127.0.0.1:3128).
        #[arg(long, value_name = "ADDR")]
        listen: String,
        /// The egress proxy's Unix socket.
        #[arg(long, value_name = "SOCKET")]
        to: PathBuf,
        /// The runtime's command, program first.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// The Landlock backend: join the runtime's cgroup, drop every capability, restrict this
    /// process with Landlock as SPEC says, then exec COMMAND (deepcli starts it; not for people).
    /// Nothing runs unless all of it is enforced.
    #[command(hide = true)]
    Exec {
        /// The restriction, as JSON (`sandbox::landlock::Spec`).
        #[arg(long, value_name = "JSON")]
        spec: String,
        /// The runtime's command, program first.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

pub(super) fn run(global: &GlobalSettings, command: SandboxCommand) -> ExitStatus {
    match command {
        SandboxCommand::Explain { agent, json } => run_explain(global, &agent, json),
        SandboxCommand::Forward {
            listen,
            to,
            command,
        } => match crate::sandbox::egress::forward(&listen, &to, &command) {
            Ok(0) => ExitStatus::Success,
            Ok(code) => std::process::exit(code),
            Err(e) => {
                eprintln!("deepcli sandbox forward: {e}");
                ExitStatus::Error
            }
        },
        SandboxCommand::Exec { spec, command } => run_exec(&spec, &command),
    }
}

/// `sandbox exec`: returns only when the command could not be started under the restriction.
fn run_exec(spec: &str, command: &[String]) -> ExitStatus {
    use std::os::unix::process::CommandExt;
    let spec: crate::sandbox::landlock::Spec = match serde_json::from_str(spec) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("deepcli sandbox exec: the restriction is not readable: {e}");
            return ExitStatus::Error;
        }
    };
    if let Err(e) = crate::sandbox::landlock::restrict_self(&spec) {
        eprintln!("deepcli sandbox exec: the sandbox cannot be applied, nothing runs: {e}");
        return ExitStatus::Error;
    }
    let Some((program, args)) = command.split_first() else {
        return ExitStatus::Error;
    };
    let error = std::process::Command::new(program).args(args).exec();
    eprintln!("deepcli sandbox exec: cannot start `{program}`: {error}");
    ExitStatus::Error
}

fn run_explain(global: &GlobalSettings, id: &str, json: bool) -> ExitStatus {
    let (report, ()) = match super::load_valid_with(global, "nothing is explained", |_| ()) {
        Ok(loaded) => loaded,
        Err(status) => return status,
    };
    let config = &report.config;
    let Some(agent) = config.agents.iter().find(|a| a.id() == id) else {
        let ids: Vec<&str> = config.agents.iter().map(|a| a.id()).collect();
        eprintln!("error: there is no agent `{id}`");
        eprintln!("hint: the agents are {}", ids.join(", "));
        return ExitStatus::Error;
    };
    let home = global.load.home.as_deref();
    let around = Surroundings::of(config, &global.load.state_dir, home);
    let layout = Layout::for_agent(agent, &around, home);
    if !agent.runtime_kind().starts_process() {
        eprintln!(
            "note: agent `{id}` starts no process here (its runtime kind is not `acp` or `process`): there is nothing to sandbox"
        );
    }
    let names = crate::sandbox::environment_names(agent, layout.as_ref());
    let explanation = explain::explain(id, layout.as_ref(), Host::get(), names);
    if json {
        match serde_json::to_string_pretty(&explanation) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitStatus::Error;
            }
        }
    } else {
        print!("{}", explanation.render());
    }
    if explanation.unavailable.is_some() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    }
}
