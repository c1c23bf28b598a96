//! `import openclaw` and `export openclaw` as management calls: the CLI and the JSON-RPC
//! methods `config/import_openclaw` and `config/export_openclaw` share them.
//!
//! Import writes three new files (never edits): refused when any of them exists unless
//! `force`, written atomically, whole. The mapping itself is `crate::openclaw`'s.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{ManageContext, ManageError, Result};
use crate::config::{FileKind, LoadOptions};
use crate::openclaw::{self, Unsupported, agree, export};

/// What an import did and found.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    /// The directory written to.
    pub dir: String,
    /// The files written, by name.
    pub files: Vec<String>,
    /// Where the schemas their modelines name were written, relative to `dir`.
    pub schema_dir: String,
    /// Whether the result validates (deepcli's loader and rules).
    pub valid: bool,
    pub errors: usize,
    pub warnings: usize,
    /// Probes both routers answered, and how many agreed.
    pub routes: agree::Agreement,
    /// Messages both inbound gates decided (OpenClaw's on the original, deepcli's on the
    /// files), and how many they decide alike.
    pub policy: agree::PolicyAgreement,
    pub unsupported: Vec<Unsupported>,
    /// Environment variables the files reference that must be set before `deepcli up`.
    pub secrets: Vec<openclaw::SecretVar>,
    pub notes: Vec<String>,
    /// The agents imported without a runtime: `deepcli up` starts nothing for them until
    /// agents.yaml gives them one.
    pub no_runtime: Vec<String>,
    /// `validate --format json`'s document for the written files.
    pub findings: serde_json::Value,
    /// The same findings as `validate` prints them.
    #[serde(skip)]
    pub rendered: String,
}

impl ImportResult {
    /// Whether the command fails: the files do not validate, a route disagrees, or the
    /// inbound policy decides a message differently.
    pub fn failed(&self) -> bool {
        !self.valid
            || !self.routes.disagreements.is_empty()
            || !self.policy.disagreements.is_empty()
    }
}

/// Imports `openclaw.json` bytes into `out` (created if missing).
pub fn import_openclaw(
    load: &LoadOptions,
    bytes: &[u8],
    source: &str,
    out: &Path,
    force: bool,
) -> Result<ImportResult> {
    if out.exists() && !out.is_dir() {
        return Err(ManageError::usage(
            format!("`{}` is not a directory", out.display()),
            "pass the directory the three files go into with --out DIR",
        ));
    }
    let targets: Vec<(FileKind, PathBuf)> = FileKind::ALL
        .into_iter()
        .map(|k| (k, out.join(k.file_name())))
        .collect();
    let existing: Vec<String> = targets
        .iter()
        .filter(|(_, p)| p.exists())
        .map(|(k, _)| k.file_name().to_string())
        .collect();
    if !existing.is_empty() && !force {
        return Err(ManageError::Usage {
            message: format!(
                "{} already in `{}`; nothing was written",
                match existing.as_slice() {
                    [one] => format!("{one} is"),
                    many => format!("{} are", many.join(", ")),
                },
                out.display()
            ),
            hint: Some("pass --force to overwrite them, or --out DIR for another directory".into()),
        });
    }
    let imported = openclaw::import_bytes(bytes, source, out, load).map_err(|e| match e {
        openclaw::ImportError::Json5(e) => ManageError::Usage {
            message: format!("cannot import {source}: {e}"),
            hint: Some(match e {
                openclaw::json5::Json5Error::TooLarge { .. } => {
                    "an openclaw.json is a few kilobytes; is this the right file?".into()
                }
                _ => "fix the file (OpenClaw would not read it either) and run import again".into(),
            }),
        },
        openclaw::ImportError::Index(e) => ManageError::Refused {
            message: e.to_string(),
            hint: None,
        },
    })?;
    // A file over the loader's limit could never be loaded: it is not written (the import's
    // memory and output are bounded by the input's size, so only a near-limit input gets here).
    let too_large: Vec<String> = imported
        .files
        .iter()
        .filter(|f| f.text.len() as u64 > crate::config::MAX_FILE_BYTES)
        .map(|f| f.name.clone())
        .collect();
    if !too_large.is_empty() {
        return Err(ManageError::invalid(&imported.report, too_large));
    }
    std::fs::create_dir_all(out).map_err(|source| ManageError::Io {
        context: format!("cannot create `{}`", out.display()),
        source,
    })?;
    for file in &imported.files {
        let path = out.join(&file.name);
        crate::durable::write_file(&path, file.text.as_bytes(), true).map_err(|source| {
            ManageError::Io {
                context: format!("cannot write `{}`", path.display()),
                source,
            }
        })?;
    }
    // The schemas the files' modelines name, beside them as `init` writes them: editors check
    // the files offline.
    crate::scaffold::write_schemas(out).map_err(|e| match e {
        crate::scaffold::InitError::Io { path, source } => ManageError::Io {
            context: format!("cannot write `{}`", path.display()),
            source,
        },
        other => ManageError::Refused {
            message: other.to_string(),
            hint: None,
        },
    })?;
    let report = &imported.report;
    Ok(ImportResult {
        dir: out.display().to_string(),
        files: imported.files.iter().map(|f| f.name.clone()).collect(),
        schema_dir: crate::scaffold::SCHEMA_DIR.to_string(),
        valid: report.is_valid(),
        errors: report.errors(),
        warnings: report.warnings(),
        findings: serde_json::from_str(&crate::report::json(report)).unwrap_or_default(),
        rendered: if report.diagnostics.is_empty() {
            String::new()
        } else {
            crate::report::human(report)
        },
        routes: imported.agreement,
        policy: imported.policy,
        unsupported: imported.unsupported,
        secrets: imported.secrets,
        notes: imported.notes,
        no_runtime: imported.no_runtime,
    })
}

/// The config as an `openclaw.json` fragment.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportResult {
    pub openclaw: serde_json::Value,
    /// What OpenClaw has no key for, left out.
    pub left_out: Vec<export::LeftOut>,
    /// The fragment as text (JSON, or JSON5 when asked).
    pub text: String,
    /// OpenClaw's routes on the fragment against deepcli's on the config.
    pub routes: agree::Agreement,
    /// OpenClaw's inbound gate on the fragment against deepcli's on the config.
    pub policy: agree::PolicyAgreement,
}

impl ExportResult {
    /// Whether OpenClaw would route a message or gate one differently with the fragment.
    pub fn failed(&self) -> bool {
        !self.routes.disagreements.is_empty() || !self.policy.disagreements.is_empty()
    }
}

/// Exports the config directory; refused when it does not validate.
pub fn export_openclaw(ctx: &ManageContext, json5: bool) -> Result<ExportResult> {
    let report = crate::validate::validate_dir(&ctx.config_dir, &ctx.load)?;
    if !report.is_valid() {
        return Err(ManageError::invalid(&report, Vec::new()));
    }
    let exported = export::export(&report.config);
    let (routes, policy) =
        export::check(&report.config, &exported).map_err(|e| ManageError::Refused {
            message: e.to_string(),
            hint: None,
        })?;
    Ok(ExportResult {
        text: exported.text(json5),
        openclaw: exported.value,
        left_out: exported.left_out,
        routes,
        policy,
    })
}
