//! The span tree as a JSON Schema instance: the item validators read [`Node`]s in place
//! instead of a `serde_json::Value` copy of each item.
//!
//! A node means here exactly what [`Node::to_json`] makes of it, and nothing else may differ:
//! an integral float (`4.0`) is the integer `4`, a float without a JSON form (`.nan`, `.inf`)
//! is the string of its value, a mapping's keys are strings in file order. The equivalence
//! tests (`tests/it/loader.rs`) hold the two to the same diagnostics, and
//! `tests::the_tree_passes_jsonschemas_conformance_check` to the validator's contract.

use std::borrow::Cow;

use jsonschema::JsonType;
use jsonschema::json::{Array, Json, JsonNumber, NodeIdentity, Object, cmp};
use serde_json::Value as JsonValue;

use crate::config::yaml::{Entry, Node, SmolStr, Value};

/// The representation: instances are `&Node`.
pub(super) struct Tree;

/// A name node for `propertyNames`, reused across calls.
pub(super) struct NameBuffer(Node);

impl Default for NameBuffer {
    fn default() -> NameBuffer {
        NameBuffer(Node {
            span: Default::default(),
            value: Value::Null,
        })
    }
}

impl Json for Tree {
    type Node<'a> = &'a Node;
    type PreparedKey = SmolStr;
    type StringBuffer = NameBuffer;

    // Mappings are scanned, not hashed: a members pass pays off soon.
    const KEYS_PER_LOOKUP: usize = 2;
    // Aliases are expanded into copies: no node is its own descendant.
    const ACYCLIC: bool = true;

    fn prepare_key(key: &str) -> SmolStr {
        SmolStr::new(key)
    }

    fn with_string_node<T>(buffer: &mut NameBuffer, string: &str, f: impl FnOnce(&Node) -> T) -> T {
        buffer.0.value = Value::String(SmolStr::new(string));
        f(&buffer.0)
    }
}

/// A number as JSON has it: [`Node::to_json`] turns integral floats into integers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Number {
    Int(i64),
    Float(f64),
}

impl Number {
    fn of(value: &Value) -> Option<Number> {
        match *value {
            Value::Int(i) => Some(Number::Int(i)),
            Value::Float(f) if integral(f) => Some(Number::Int(f as i64)),
            Value::Float(f) if f.is_finite() => Some(Number::Float(f)),
            _ => None,
        }
    }
}

/// Whether [`Node::to_json`] makes `f` an integer.
fn integral(f: f64) -> bool {
    f.fract() == 0.0 && f.abs() < 9.0e15
}

impl JsonNumber for Number {
    fn as_u64(&self) -> Option<u64> {
        match *self {
            Number::Int(i) => u64::try_from(i).ok(),
            Number::Float(_) => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match *self {
            Number::Int(i) => Some(i),
            Number::Float(_) => None,
        }
    }

    fn as_f64(&self) -> Option<f64> {
        match *self {
            Number::Int(i) => Some(i as f64),
            Number::Float(f) => Some(f),
        }
    }

    fn as_str(&self) -> Cow<'_, str> {
        Cow::Owned(self.to_number().to_string())
    }

    fn to_number(&self) -> Cow<'_, serde_json::Number> {
        Cow::Owned(match *self {
            Number::Int(i) => serde_json::Number::from(i),
            // Finite by construction (`Number::of`).
            Number::Float(f) => serde_json::Number::from_f64(f).unwrap_or(0.into()),
        })
    }

    fn is_integer(&self) -> bool {
        matches!(self, Number::Int(_))
    }

    fn is_written_as_integer(&self) -> bool {
        matches!(self, Number::Int(_))
    }
}

impl<'a> jsonschema::json::Node<'a, Tree> for &'a Node {
    type Object = &'a [Entry];
    type Array = &'a [Node];
    type Number = Number;

    fn as_object(&self) -> Option<&'a [Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&'a [Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        match &self.value {
            Value::String(s) => Some(Cow::Borrowed(s.as_str())),
            Value::Float(f) if !f.is_finite() => Some(Cow::Owned(f.to_string())),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<Number> {
        Number::of(&self.value)
    }

    fn as_boolean(&self) -> Option<bool> {
        match self.value {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    fn json_type(&self) -> JsonType {
        match &self.value {
            Value::Null => JsonType::Null,
            Value::Bool(_) => JsonType::Boolean,
            Value::Int(_) => JsonType::Number,
            Value::Float(f) if f.is_finite() => JsonType::Number,
            Value::Float(_) | Value::String(_) => JsonType::String,
            Value::Seq(_) => JsonType::Array,
            Value::Map(_) => JsonType::Object,
        }
    }

    fn equals_value(&self, expected: &JsonValue) -> bool {
        match (&self.value, expected) {
            (Value::String(s), JsonValue::String(e)) => s == e,
            (Value::String(_), _) => false,
            (Value::Bool(b), JsonValue::Bool(e)) => b == e,
            (Value::Null, JsonValue::Null) => true,
            _ => cmp::equal(&self.to_json(), expected),
        }
    }

    fn to_value(&self) -> Cow<'a, JsonValue> {
        Cow::Owned(self.to_json())
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::new(std::ptr::from_ref::<Node>(*self) as usize))
    }
}

pub(super) struct Members<'a>(std::slice::Iter<'a, Entry>);

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, &'a Node);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|e| (e.key.as_str(), &e.value))
    }
}

impl<'a> Object<'a, Tree> for &'a [Entry] {
    type Node = &'a Node;
    type MemberName = &'a str;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        <[Entry]>::len(self)
    }

    fn get(&self, key: &SmolStr) -> Option<&'a Node> {
        self.iter().find(|e| e.key == *key).map(|e| &e.value)
    }

    fn members(&self) -> Members<'a> {
        Members(self.iter())
    }
}

impl<'a> Array<'a, Tree> for &'a [Node] {
    type Node = &'a Node;
    type ElementsIter = std::slice::Iter<'a, Node>;

    fn len(&self) -> usize {
        <[Node]>::len(self)
    }

    fn elements(&self) -> std::slice::Iter<'a, Node> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(json: &JsonValue) -> Node {
        let text = serde_json::to_string(json).unwrap();
        crate::config::yaml::parse(&text).unwrap().unwrap()
    }

    #[test]
    fn the_tree_passes_jsonschemas_conformance_check() {
        let root = tree(&jsonschema::json::conformance::document());
        jsonschema::json::conformance::assert_conformance::<Tree>(&&root);
    }

    /// Each YAML scalar means to the validator what it means in `to_json`.
    #[test]
    fn scalars_are_what_to_json_makes_of_them() {
        use jsonschema::json::Node as _;
        let doc = "[4.0, 1.5, .nan, -.inf, 7, null, true, x, 9.5e15]";
        let root = crate::config::yaml::parse(doc).unwrap().unwrap();
        let Value::Seq(items) = &root.value else {
            panic!("a sequence");
        };
        for item in items {
            let json = item.to_json();
            let node = &item;
            let ty = match json {
                JsonValue::Null => JsonType::Null,
                JsonValue::Bool(_) => JsonType::Boolean,
                JsonValue::Number(_) => JsonType::Number,
                JsonValue::String(_) => JsonType::String,
                JsonValue::Array(_) => JsonType::Array,
                JsonValue::Object(_) => JsonType::Object,
            };
            assert_eq!(node.json_type(), ty, "{json}");
            assert_eq!(node.as_string().as_deref(), json.as_str(), "{json}");
            assert_eq!(
                node.as_number().map(|n| n.to_number().into_owned()),
                json.as_number().cloned(),
                "{json}"
            );
            assert!(node.equals_value(&json), "{json}");
            let integer = json.as_number().is_some_and(|n| n.is_i64() || n.is_u64());
            assert_eq!(
                node.as_number().is_some_and(|n| n.is_integer()),
                integer,
                "{json}"
            );
        }
    }
}
