//! The embedded JSON Schemas and schema validation with positions.
//!
//! Each file is checked against its schema; every error becomes a `schema` diagnostic at the
//! offending node (for an unknown key: the key; for a missing key: the mapping that lacks it),
//! with a message written for people rather than the validator's default text.
//!
//! The big collections (`agents.list`, every channel's `accounts`, `bindings`) are checked item
//! by item, on every core: each item as a small JSON instance of its own against the item
//! schema the file's schema reaches it through (its `items` or `additionalProperties`, with the
//! root's `$defs`), and the rest of the file with those collections emptied. The schema stays
//! the only description of the files: which item schema applies is read from it, and a
//! collection is split only where that gives exactly the errors of the whole file — where
//! nothing above the items looks into them (no `allOf`, `if`, `minItems`, … on the way down:
//! see [`Collection::find`]). Errors keep the pointers of the whole file.

mod instance;

use std::sync::OnceLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use serde_json::Value as Json;

use super::source::{FileKind, SourceFile};
use super::yaml::{self, Node};
use crate::diagnostic::{Diagnostic, rules};
use instance::Tree;

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
    files: [FileSchema; 3],
    /// Every property name any schema declares, for "did you mean" hints.
    vocabulary: Vec<String>,
}

/// One file's schema, compiled.
struct FileSchema {
    validator: Validator,
    /// The schema as JSON, for looking up which keys a mapping allows.
    document: Json,
    /// The collections checked item by item.
    collections: Vec<Collection>,
}

/// Where a file's large collections are, from the root: the containers whose items (sequence
/// items or mapping values) may each be checked on their own. Which schema applies to them, and
/// whether splitting is exact, is the schema's to say ([`Collection::find`]).
fn containers(kind: FileKind) -> &'static [&'static [Step]] {
    match kind {
        FileKind::Agents => &[&[Step::Key("agents"), Step::Key("list")]],
        FileKind::Channels => &[&[Step::Key("channels"), Step::Any, Step::Key("accounts")]],
        FileKind::Bindings => &[&[Step::Key("bindings")]],
    }
}

/// One step of a container's path: a mapping key, or every key of a mapping.
#[derive(Debug, Clone, Copy)]
enum Step {
    Key(&'static str),
    Any,
}

/// A collection checked item by item.
struct Collection {
    /// The container's path; at an [`Step::Any`], the keys whose schema is not the one every
    /// other key gets (`properties` beside `additionalProperties`) are not followed.
    path: Vec<(Step, Vec<String>)>,
    /// The container is a sequence (else a mapping).
    sequence: bool,
    /// The items' schema, with the root's `$defs`, reading items in the tree.
    validator: Validator<Tree>,
    document: Json,
}

impl Collection {
    /// The container's pointer, where its path names every key.
    fn pointer(&self) -> Option<String> {
        self.path
            .iter()
            .map(|(step, _)| match step {
                Step::Key(key) => Some(format!("/{}", yaml::escape_pointer_token(key))),
                Step::Any => None,
            })
            .collect()
    }
}

/// Keywords that only describe.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$defs",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords of a schema above a split collection that never look into its items' values: the
/// rest of the file keeps every key, so these give the same errors without the items.
const ABOVE: &[&str] = &[
    "type",
    "properties",
    "additionalProperties",
    "required",
    "propertyNames",
    "$ref",
];

impl Collection {
    /// The collection at `path` in `document`, if checking its items one by one is exact: every
    /// schema on the way down has only keywords that look at keys ([`ABOVE`]), and the container's
    /// own schema is `items` (a sequence, left empty in the rest of the file) or
    /// `additionalProperties` with at most `propertyNames` (a mapping, whose values are replaced
    /// by `{}` in the rest of the file: that must be a valid item). `None` keeps the collection
    /// in the whole-file check.
    fn find(document: &Json, path: &[Step]) -> Option<Collection> {
        let allowed = |node: &Json, keywords: &[&str]| {
            node.as_object().is_some_and(|map| {
                map.keys()
                    .all(|k| keywords.contains(&k.as_str()) || ANNOTATIONS.contains(&k.as_str()))
            })
        };
        let mut node = resolve(document, document)?;
        let mut steps = Vec::with_capacity(path.len());
        for step in path {
            if !allowed(node, ABOVE) {
                return None;
            }
            let properties = node.get("properties").and_then(Json::as_object);
            let next = match step {
                Step::Key(key) => {
                    steps.push((*step, Vec::new()));
                    properties?.get(*key)?
                }
                Step::Any => {
                    let except = properties.map(|p| p.keys().cloned().collect());
                    steps.push((*step, except.unwrap_or_default()));
                    node.get("additionalProperties").filter(|s| s.is_object())?
                }
            };
            node = resolve(document, next)?;
        }
        let (sequence, item) = if allowed(node, &["type", "items"]) {
            (true, node.get("items")?)
        } else if allowed(node, &["type", "additionalProperties", "propertyNames"]) {
            (
                false,
                node.get("additionalProperties").filter(|s| s.is_object())?,
            )
        } else {
            return None;
        };
        // The item's schema with the root's definitions, which its `$ref`s point into.
        let mut sub = item.as_object()?.clone();
        for key in ["$schema", "$defs"] {
            if let Some(value) = document.get(key) {
                sub.insert(key.to_string(), value.clone());
            }
        }
        let document = Json::Object(sub);
        let validator = build_for::<Tree>(&document).ok()?;
        let empty = Node {
            span: Default::default(),
            value: yaml::Value::Map(Vec::new()),
        };
        if !sequence && !validator.is_valid(&empty) {
            return None;
        }
        Some(Collection {
            path: steps,
            sequence,
            validator,
            document,
        })
    }
}

/// Follows a local `$ref` whose siblings only describe.
fn resolve<'a>(document: &'a Json, mut node: &'a Json) -> Option<&'a Json> {
    for _ in 0..16 {
        let Some(target) = node.get("$ref") else {
            return Some(node);
        };
        let map = node.as_object()?;
        if !map
            .keys()
            .all(|k| k == "$ref" || ANNOTATIONS.contains(&k.as_str()))
        {
            return None;
        }
        node = document.pointer(target.as_str()?.strip_prefix('#')?)?;
    }
    None
}

fn build(schema: &Json) -> Result<Validator, ValidationError<'static>> {
    build_for::<jsonschema::json::SerdeJson>(schema)
}

/// A validator of instances in the representation `F`: JSON, or the tree ([`Tree`]).
fn build_for<F: jsonschema::json::Json>(
    schema: &Json,
) -> Result<Validator<F>, ValidationError<'static>> {
    jsonschema::options_for::<F>()
        .with_draft(jsonschema::Draft::Draft202012)
        .should_validate_formats(false)
        .build(schema)
}

fn compiled() -> &'static Compiled {
    static COMPILED: OnceLock<Compiled> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let mut vocabulary = Vec::new();
        // The schemas are part of the binary and covered by tests: failing here is a build
        // defect, not an input error.
        let files = FileKind::ALL.map(|kind| {
            let document =
                serde_json::from_str::<Json>(text(kind)).expect("embedded schema is valid JSON");
            collect_property_names(&document, &mut vocabulary);
            let validator = build(&document).expect("embedded schema compiles");
            let collections = containers(kind)
                .iter()
                .filter_map(|path| Collection::find(&document, path))
                .collect();
            FileSchema {
                validator,
                document,
                collections,
            }
        });
        vocabulary.sort();
        vocabulary.dedup();
        Compiled { files, vocabulary }
    })
}

/// How many of `kind`'s collections are checked item by item (for the test that keeps the
/// split in force as the schemas change).
#[doc(hidden)]
pub fn split_collections(kind: FileKind) -> usize {
    compiled().files[kind as usize].collections.len()
}

fn collect_property_names(schema: &Json, out: &mut Vec<String>) {
    match schema {
        Json::Object(map) => {
            if let Some(Json::Object(props)) = map.get("properties") {
                out.extend(props.keys().cloned());
            }
            for value in map.values() {
                collect_property_names(value, out);
            }
        }
        Json::Array(items) => {
            for item in items {
                collect_property_names(item, out);
            }
        }
        _ => {}
    }
}

/// One item of a split collection.
struct Item<'a> {
    /// The container's pointer, an index into [`Split::containers`].
    container: usize,
    /// The item's key in the container (its index in a sequence).
    key: Key<'a>,
    node: &'a Node,
    collection: &'a Collection,
}

enum Key<'a> {
    Index(usize),
    Name(&'a str),
}

/// The file cut for checking: the rest of the file as JSON, and the items.
#[derive(Default)]
struct Split<'a> {
    containers: Vec<String>,
    items: Vec<Item<'a>>,
}

impl<'a> Split<'a> {
    /// The JSON of `node` at `pointer`, with the containers of `active` collections (those whose
    /// path has come this far: collection, steps taken) emptied and their items taken aside.
    fn rest(
        &mut self,
        node: &'a Node,
        pointer: &mut String,
        active: &[(&'a Collection, usize)],
        skip: &[String],
    ) -> Json {
        if active.is_empty() {
            return node.to_json();
        }
        if let Some((collection, _)) = active.iter().find(|(c, step)| *step == c.path.len()) {
            match &node.value {
                yaml::Value::Seq(items) if collection.sequence => {
                    let container = self.container(pointer);
                    self.items
                        .extend(items.iter().enumerate().map(|(i, node)| Item {
                            container,
                            key: Key::Index(i),
                            node,
                            collection,
                        }));
                    return Json::Array(Vec::new());
                }
                yaml::Value::Map(entries) if !collection.sequence => {
                    let container = self.container(pointer);
                    self.items.extend(entries.iter().map(|e| Item {
                        container,
                        key: Key::Name(&e.key),
                        node: &e.value,
                        collection,
                    }));
                    return Json::Object(
                        entries
                            .iter()
                            .map(|e| (e.key.to_string(), Json::Object(Default::default())))
                            .collect(),
                    );
                }
                _ => return node.to_json(),
            }
        }
        let yaml::Value::Map(entries) = &node.value else {
            // Collections sit under mapping keys only.
            return node.to_json();
        };
        let mut map = serde_json::Map::with_capacity(entries.len());
        for entry in entries {
            if skip.iter().any(|k| *k == entry.key) {
                continue;
            }
            let next: Vec<_> = active
                .iter()
                .filter(|(c, step)| match &c.path[*step] {
                    (Step::Key(key), _) => *key == entry.key,
                    (Step::Any, except) => !except.iter().any(|k| *k == entry.key),
                })
                .map(|(c, step)| (*c, step + 1))
                .collect();
            let len = pointer.len();
            pointer.push('/');
            pointer.push_str(&yaml::escape_pointer_token(&entry.key));
            let value = self.rest(&entry.value, pointer, &next, &[]);
            pointer.truncate(len);
            map.insert(entry.key.to_string(), value);
        }
        Json::Object(map)
    }

    fn container(&mut self, pointer: &str) -> usize {
        self.containers.push(pointer.to_string());
        self.containers.len() - 1
    }

    fn pointer(&self, item: &Item<'_>) -> String {
        let container = &self.containers[item.container];
        match item.key {
            Key::Index(i) => format!("{container}/{i}"),
            Key::Name(name) => format!("{container}/{}", yaml::escape_pointer_token(name)),
        }
    }
}

/// Items below this many are checked on the calling thread.
const PARALLEL_ITEMS: usize = 512;

/// Validates `file` against the schema of `file.kind`, leaving out the top-level keys in `skip`
/// (reported as misplaced already).
pub fn validate(file: &SourceFile, skip: &[String]) -> Vec<Diagnostic> {
    let compiled = compiled();
    let schema = &compiled.files[file.kind as usize];
    let mut split = Split::default();
    let rest = match &file.root {
        Some(root) => {
            let active: Vec<_> = schema.collections.iter().map(|c| (c, 0)).collect();
            split.rest(root, &mut String::new(), &active, skip)
        }
        None => Json::Null,
    };
    let mut out = Vec::new();
    for error in schema.validator.iter_errors(&rest) {
        let pointer = error.instance_path().as_str().to_string();
        diagnose(file, &error, &pointer, &schema.document, compiled, &mut out);
    }
    drop(rest);
    let check = |_: usize, items: &[Item<'_>]| {
        let mut out = Vec::new();
        for item in items {
            let check = ItemCheck {
                collection: item.collection,
                compiled,
            };
            if !check.is_valid(item.node) {
                out.extend(check.errors(file, &split.pointer(item), item.node));
            }
        }
        out
    };
    if split.items.len() < PARALLEL_ITEMS {
        out.extend(check(0, &split.items));
    } else {
        out.extend(
            crate::threads::map_chunks(&split.items, check)
                .into_iter()
                .flatten(),
        );
    }
    out
}

/// The schema of the items of one of `kind`'s sequences (`/bindings`), checking an item on its
/// own: for a loader that never holds the whole list (`super::load_lean`). `None` where the
/// schema does not split that list ([`Collection::find`]).
pub(super) fn item_check(kind: FileKind, list: &str) -> Option<ItemCheck<'static>> {
    let compiled = compiled();
    let collection = compiled.files[kind as usize]
        .collections
        .iter()
        .find(|c| c.sequence && c.pointer().as_deref() == Some(list))?;
    Some(ItemCheck {
        collection,
        compiled,
    })
}

/// The check of one collection's items ([`item_check`]).
pub(super) struct ItemCheck<'c> {
    collection: &'c Collection,
    compiled: &'c Compiled,
}

impl ItemCheck<'_> {
    pub(super) fn is_valid(&self, item: &Node) -> bool {
        self.collection.validator.is_valid(item)
    }

    /// The diagnostics [`validate`] gives `item`, which is at `pointer` in `file`.
    pub(super) fn errors(&self, file: &SourceFile, pointer: &str, item: &Node) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let document = &self.collection.document;
        for error in self.collection.validator.iter_errors(item) {
            let at = format!("{pointer}{}", error.instance_path().as_str());
            diagnose(file, &error, &at, document, self.compiled, &mut out);
        }
        out
    }
}

/// [`validate`] with the whole file as one JSON instance, never split: what `validate` must
/// always agree with, for its equivalence tests (`tests/it/loader.rs`).
#[doc(hidden)]
pub fn validate_whole(file: &SourceFile, skip: &[String]) -> Vec<Diagnostic> {
    let compiled = compiled();
    let schema = &compiled.files[file.kind as usize];
    let mut instance = file.root.as_ref().map_or(Json::Null, Node::to_json);
    if let Json::Object(map) = &mut instance {
        for key in skip {
            map.shift_remove(key);
        }
    }
    let mut out = Vec::new();
    for error in schema.validator.iter_errors(&instance) {
        let pointer = error.instance_path().as_str().to_string();
        diagnose(file, &error, &pointer, &schema.document, compiled, &mut out);
    }
    out
}

fn diagnose(
    file: &SourceFile,
    error: &ValidationError<'_>,
    pointer: &str,
    document: &Json,
    compiled: &Compiled,
    out: &mut Vec<Diagnostic>,
) {
    let allowed = allowed_keys(document, error.schema_path().as_str());
    let vocabulary = allowed.as_deref().unwrap_or(&compiled.vocabulary);
    let what = describe(pointer);
    let node_type = file
        .subtree(pointer)
        .and_then(|(root, rest)| Some(root.pointer(rest)?.type_name()))
        .unwrap_or("value");
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
fn allowed_keys(document: &Json, schema_path: &str) -> Option<Vec<String>> {
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
                Json::Array(items) => items.get(token.parse::<usize>().ok()?)?,
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

fn scalar_text(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
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
