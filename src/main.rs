use std::process::ExitCode;

fn main() -> ExitCode {
    deepcli::cli::run().into()
}
