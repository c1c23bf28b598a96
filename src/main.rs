use std::process::ExitCode;

// Loading a large config allocates millions of small nodes; mimalloc halves that cost.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    deepcli::cli::run().into()
}
