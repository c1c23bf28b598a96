//! `deepcli schema <agents|channels|bindings>`.

use std::io::Write;

use clap::{Args, ValueEnum};

use super::ExitStatus;
use crate::config::{FileKind, schema};

#[derive(Debug, Args)]
pub(super) struct SchemaArgs {
    /// Which file's schema to print.
    file: SchemaFile,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SchemaFile {
    /// agents.yaml: agents, their identity, workspace, model and runtime.
    Agents,
    /// channels.yaml: platform accounts and their credential references.
    Channels,
    /// bindings.yaml: which agent answers which conversation.
    Bindings,
}

pub(super) fn run(args: SchemaArgs) -> ExitStatus {
    let kind = match args.file {
        SchemaFile::Agents => FileKind::Agents,
        SchemaFile::Channels => FileKind::Channels,
        SchemaFile::Bindings => FileKind::Bindings,
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(schema::text(kind).as_bytes()) {
        Ok(()) => ExitStatus::Success,
        Err(_) => ExitStatus::Error,
    }
}
