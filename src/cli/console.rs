//! `deepcli console`: where the running controller serves its web console (docs/console.md),
//! opened in a browser when there is a display.

use std::io::Write;

use clap::Args;

use super::{ExitStatus, GlobalSettings};
use crate::controller::client::Client;
use crate::state::StateStore;

#[derive(Debug, Args)]
#[command(after_help = "\
It prints the console's URL. With a display (DISPLAY or WAYLAND_DISPLAY set) and without
--no-open it also runs `xdg-open URL`. Sign in with the operator token (<state>/operator-token).

Exit codes:
  0  printed (and opened)
  1  no controller runs on this state: start `deepcli up`
  2  could not run: no state in the directory, or a damaged state database")]
pub(super) struct ConsoleArgs {
    /// Only print the URL; start no browser.
    #[arg(long)]
    no_open: bool,
}

pub(super) fn run(global: &GlobalSettings, args: ConsoleArgs) -> ExitStatus {
    let dir = global.state();
    let store = match StateStore::open_existing(&dir) {
        Ok(Some(store)) => store,
        Ok(None) => {
            let _ = writeln!(
                anstream::stderr(),
                "error: no deepcli state in `{}`; start `deepcli up`",
                dir.root().display()
            );
            return ExitStatus::Error;
        }
        Err(e) => return super::state_error(&e),
    };
    let Some(client) = Client::find(&dir, &store) else {
        let _ = writeln!(
            anstream::stderr(),
            "error: no controller runs on `{}`: start `deepcli up`, which serves the console",
            dir.root().display()
        );
        return ExitStatus::Failure;
    };
    let mut addr = client.addr();
    // A controller listening on every address is reached on loopback.
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let url = format!("http://{addr}/console/");
    if writeln!(anstream::stdout(), "{url}").is_err() {
        return ExitStatus::Error;
    }
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|d| !d.is_empty()));
    if display && !args.no_open {
        let opened = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = opened {
            let _ = writeln!(
                anstream::stderr(),
                "note: could not run `xdg-open` ({e}); open the URL above in a browser"
            );
        }
    }
    ExitStatus::Success
}
