use std::process::ExitCode;

// Loading a large config allocates millions of small nodes; mimalloc halves that cost.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    huge_pages_off();
    let cli = deepcli::parse_args();
    if cli.is_long_running() {
        purge_freed_memory();
    }
    deepcli::run_cli(cli).into()
}

/// Transparent huge pages off for this process (Linux `PR_SET_THP_DISABLE`; kept across the
/// `exec` below). mimalloc asks for huge pages on its arenas, and with them each first touch of
/// fresh memory makes the kernel zero 2 MiB at once, and the process keeps whole huge pages
/// resident where it uses a part of them, so a large config's load and reconcile peak higher
/// (docs/controller.md#memory). The flag is inherited: agent runtimes that `up` starts run
/// without huge pages too. `deepcli validate` of a large config turns them back on (see
/// `cli/validate.rs`). Where the system refuses, nothing changes.
fn huge_pages_off() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
}

/// The long-running commands (`up`, `access serve`) give the memory of each reconcile back to
/// the system when it is done. mimalloc frees pages only after a delay and only on threads that
/// keep allocating, so an idle controller would keep the peak of its last reconcile
/// (docs/controller.md#memory). Its options are read once, from the environment, when
/// it starts: so the process sets `MIMALLOC_PURGE_DELAY=0` and executes itself again, once
/// (same pid, same arguments). Which command runs is clap's answer, not a look at the words
/// (`deepcli --state-dir up plan` is a plan).
fn purge_freed_memory() {
    use std::os::unix::process::CommandExt;
    const KEY: &str = "MIMALLOC_PURGE_DELAY";
    if std::env::var_os(KEY).is_some() {
        return;
    }
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    // `exec` returns only when it failed: then run as we are.
    let _ = std::process::Command::new(me)
        .args(std::env::args_os().skip(1))
        .env(KEY, "0")
        .exec();
}
