//! The embedded JSON Schemas and schema validation with positions.
//!
//! Each file is checked against its schema; every error becomes a `schema` diagnostic at the
//! offending node (for an unknown key: the key; for a missing key: the mapping that lacks it),
//! with a message written for people rather than the validator's default text.

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};

use super::source::{FileKind, SourceFile};
use crate::diagnostic::{Diagnostic, rules};

pub const AGENTS: &str = include_str!("../../schema/agents.schema.json");
pub const CHANNELS: &str = include_str!("../../schema/channels.schema.json");
pub const BINDINGS: &str = include_str!("../../schema/bindings.schema.json");

/// The schema text of one file, as `deepcli schema` prints it.
pub fn text(kind: FileKind) -> &'static str {
    match kind {
        FileKind::Agents => AGENTS,
        FileKind::Channels => CHANNELS,
        FileKind::Bindings => BINDINGS,
    }
}

struct Compiled {
    validators: [Validator; 3],
    /// The schemas as JSON, for looking up which keys a mapping allows.
    documents: [serde_json::Value; 3],
    /// Every property name any schema declares, for "did you mean" hints.
    vocabulary: Vec<String>,
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let mut vocabulary = Vec::new();
        // The schemas are part of the binary and covered by tests: failing here is a build
        // defect, not an input error.
        let documents = FileKind::ALL.map(|kind| {
            serde_json::from_str::<serde_json::Value>(text(kind))
                .expect("embedded schema is valid JSON")
        });
        let validators = documents.each_ref().map(|schema| {
            collect_property_names(schema, &mut vocabulary);
            jsonschema::draft202012::options()
                .should_validate_formats(false)
                .build(schema)
                .expect("embedded schema compiles")
        });
        vocabulary.sort();
        vocabulary.dedup();
        Compiled {
            validators,
            documents,
            vocabulary,
        }
    })
}

fn collect_property_names(schema: &serde_json::Value, out: &mut Vec<String>) {
    match schema {
        serde_json::Value::Object(map) => {
            if let Some(serde_json::Value::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            for value in map.values() {
                collect_property_names(value, out);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                collect_property_names(item, out);
            }
        }
        _ => {}
    }
}

/// Validates `instance` (the file's YAML as JSON) against the schema of `file.kind`.
pub fn validate(file: &SourceFile, instance: &serde_json::Value) -> Vec<Diagnostic> {
    let compiled = compiled();
    let validator = &compiled.validators[file.kind as usize];
    let mut out = Vec::new();
    let document = &compiled.documents[file.kind as usize];
    for error in validator.iter_errors(instance) {
        let allowed = allowed_keys(document, error.schema_path().as_str());
        let vocabulary = allowed.as_deref().unwrap_or(&compiled.vocabulary);
        diagnose(file, &error, vocabulary, &mut out);
    }
    out
}

fn diagnose(
    file: &SourceFile,
    error: &ValidationError<'_>,
    vocabulary: &[String],
    out: &mut Vec<Diagnostic>,
) {
    let pointer = error.instance_path().as_str();
    let what = describe(pointer);
    let node_type = file
        .root
        .as_ref()
        .and_then(|r| r.pointer(pointer))
        .map_or("value", |n| n.type_name());
    let diagnostic = match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            for key in unexpected {
                let key_pointer = format!("{pointer}/{}", super::yaml::escape_pointer_token(key));
                let mut d =
                    Diagnostic::new(rules::SCHEMA, format!("unknown key `{key}` in {what}"))
                        .at(file.locate_key(&key_pointer));
                d = match crate::suggest::closest(key, vocabulary.iter().map(String::as_str)) {
                    Some(near) => d.hint(format!("did you mean `{near}`?")),
                    None => d.hint("remove it; `deepcli schema` lists every key this file takes"),
                };
                out.push(d);
            }
            return;
        }
        ValidationErrorKind::Required { property } => {
            let key = property.as_str().unwrap_or_default();
            Diagnostic::new(
                rules::SCHEMA,
                format!("{what} is missing the required key `{key}`"),
            )
            .at(file.locate(pointer))
        }
        ValidationErrorKind::Type { kind } => {
            let expected = type_names(kind);
            let mut d = Diagnostic::new(
                rules::SCHEMA,
                format!("{what} must be {expected}, found {node_type}"),
            )
            .at(file.locate(pointer));
            if expected.contains("string") && matches!(node_type, "integer" | "number" | "boolean")
            {
                // Quote what was written (`0777`), not the parsed value (`777`).
                let written = d
                    .location
                    .as_ref()
                    .and_then(|l| source_text(file, l.span))
                    .unwrap_or_else(|| scalar_text(error.instance()));
                d = d.hint(format!(
                    "YAML reads this as {node_type}; quote it to make it a string, e.g. \"{written}\""
                ));
            }
            d
        }
        ValidationErrorKind::Enum { options } => {
            let choices = options
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|v| format!("`{}`", scalar_text(v)))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            Diagnostic::new(
                rules::SCHEMA,
                format!(
                    "`{}` is not a valid value for {what}",
                    scalar_text(error.instance())
                ),
            )
            .hint(format!("use one of {choices}"))
            .at(file.locate(pointer))
        }
        ValidationErrorKind::Constant { expected_value } => Diagnostic::new(
            rules::SCHEMA,
            format!("{what} must be `{}`", scalar_text(expected_value)),
        )
        .at(file.locate(pointer)),
        ValidationErrorKind::Pattern { pattern } => {
            let value = scalar_text(error.instance());
            let mut d = Diagnostic::new(
                rules::SCHEMA,
                format!("`{value}` is not a valid value for {what}"),
            )
            .at(file.locate(pointer));
            d = if pattern == "\\S" {
                return out.push(
                    Diagnostic::new(rules::SCHEMA, format!("{what} must not be blank"))
                        .hint("write the id, or remove the key")
                        .at(file.locate(pointer)),
                );
            } else if pattern.contains("a-z0-9][a-z0-9_-]") {
                d.hint(format!(
                    "ids are 1–64 lowercase letters, digits, `_` or `-`, starting with a letter or digit (e.g. `{}`)",
                    crate::ids::agent_id(&value)
                ))
            } else {
                d.hint(format!("it must match the pattern `{pattern}`"))
            };
            d
        }
        ValidationErrorKind::PropertyNames { error: inner } => {
            // The instance path names the mapping; the bad key is the inner error's instance.
            let key = scalar_text(inner.instance());
            let key_pointer = format!("{pointer}/{}", super::yaml::escape_pointer_token(&key));
            Diagnostic::new(
                rules::SCHEMA,
                format!("`{key}` is not a valid key in {what}"),
            )
            .hint(format!(
                "names here are 1–64 lowercase letters, digits, `_` or `-` (e.g. `{}`)",
                crate::ids::account_id(&key)
            ))
            .at(file.locate_key(&key_pointer))
        }
        ValidationErrorKind::OneOfNotValid { .. } | ValidationErrorKind::AnyOf { .. } => {
            let expected = if pointer_is_secret(pointer) {
                "a secret reference: \"${VAR}\", {source: env, id: VAR} or {source: file, path: PATH}"
                    .to_string()
            } else {
                "one of the shapes the schema allows here".to_string()
            };
            Diagnostic::new(
                rules::SCHEMA,
                format!("{what} must be {expected}, found {node_type}"),
            )
            .hint("`deepcli schema` prints the accepted shapes with descriptions")
            .at(file.locate(pointer))
        }
        ValidationErrorKind::MinItems { limit } => Diagnostic::new(
            rules::SCHEMA,
            format!("{what} needs at least {limit} item(s)"),
        )
        .at(file.locate(pointer)),
        ValidationErrorKind::MinLength { .. } => {
            Diagnostic::new(rules::SCHEMA, format!("{what} must not be empty"))
                .at(file.locate(pointer))
        }
        _ => {
            let mut message = error.to_string();
            if message.len() > 200 {
                let cut = message.floor_char_boundary(200);
                message.truncate(cut);
                message.push('…');
            }
            Diagnostic::new(rules::SCHEMA, format!("{what}: {message}")).at(file.locate(pointer))
        }
    };
    out.push(diagnostic);
}

/// The keys the schema allows where an `additionalProperties` error arose: the `properties`
/// beside the failing keyword, following local `$ref`s along the schema path.
fn allowed_keys(document: &serde_json::Value, schema_path: &str) -> Option<Vec<String>> {
    let mut node = document;
    let tokens: Vec<_> = super::yaml::pointer_tokens(schema_path).collect();
    let (last, path) = tokens.split_last()?;
    if last != "additionalProperties" {
        return None;
    }
    for token in path {
        node = if token == "$ref" {
            let target = node.get("$ref")?.as_str()?.strip_prefix('#')?;
            document.pointer(target)?
        } else {
            match node {
                serde_json::Value::Array(items) => items.get(token.parse::<usize>().ok()?)?,
                _ => node.get(token.as_ref())?,
            }
        };
    }
    let properties = node.get("properties")?.as_object()?;
    Some(properties.keys().cloned().collect())
}

fn pointer_is_secret(pointer: &str) -> bool {
    let last = pointer.rsplit('/').next().unwrap_or_default();
    super::model::SECRET_FIELDS.contains(&last) || pointer.contains("/runtime/env/")
}

/// "`match.peer.kind`" style names for messages; the root is "the file".
pub(crate) fn describe(pointer: &str) -> String {
    if pointer.is_empty() {
        return "the file".to_string();
    }
    let path: Vec<String> = super::yaml::pointer_tokens(pointer)
        .map(|t| {
            if t.parse::<usize>().is_ok() {
                format!("[{t}]")
            } else {
                format!(".{t}")
            }
        })
        .collect();
    format!("`{}`", path.concat().trim_start_matches('.'))
}

fn type_names(kind: &TypeKind) -> String {
    let name = |t: &jsonschema::JsonType| match t.to_string().as_str() {
        "object" => "a mapping".to_string(),
        "array" => "a list".to_string(),
        "integer" => "an integer".to_string(),
        "null" => "empty".to_string(),
        other => format!("a {other}"),
    };
    match kind {
        TypeKind::Single(t) => name(t),
        TypeKind::Multiple(set) => set
            .iter()
            .map(|t| name(&t))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// The text of a single-line span, as written in the file.
fn source_text(file: &SourceFile, span: super::yaml::Span) -> Option<String> {
    if span.start.line != span.end.line || span.end.column <= span.start.column {
        return None;
    }
    let line = file.line(span.start.line)?;
    let from = span.start.column as usize - 1;
    let len = (span.end.column - span.start.column) as usize;
    Some(line.chars().skip(from).take(len).collect())
}

fn scalar_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_names_paths_readably() {
        assert_eq!(
            describe("/bindings/3/match/peer"),
            "`bindings[3].match.peer`"
        );
        assert_eq!(describe(""), "the file");
    }
}
