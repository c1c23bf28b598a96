//! A serde [`Deserializer`](serde::Deserializer) over the span tree: typed values straight from
//! [`Node`]s, with no JSON copy of the file in between.
//!
//! It reads a node exactly as `serde_json` reads [`Node::to_json`] of it, so a type decodes to
//! the same value either way (the loader's equivalence test holds the two together): integers
//! are unsigned when not negative, a float without a fractional part is an integer, NaN and the
//! infinities are their text, a mapping is a map with string keys. An error carries the span of
//! the innermost node it arose in.

use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{Entry, Node, Span, Value};

/// Why a node did not decode into a type, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeError {
    pub message: String,
    /// The node it arose in; `None` only for errors made outside any node.
    pub span: Option<Span>,
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            span: None,
        }
    }
}

/// Decodes `node` into `T`.
pub fn from_node<'a, T: de::Deserialize<'a>>(node: &'a Node) -> Result<T, DeError> {
    T::deserialize(NodeDeserializer::new(node))
}

/// Decodes `node` into `T` without the parts of its tree `hidden` names.
pub fn from_node_hiding<'a, T: de::Deserialize<'a>>(
    node: &'a Node,
    hidden: &'a Hidden<'a>,
) -> Result<T, DeError> {
    T::deserialize(NodeDeserializer { node, hidden })
}

/// Parts of a tree a decode leaves out, by address (nodes and entries of the tree decoded).
#[derive(Debug, Default)]
pub struct Hidden<'a> {
    /// Mappings and sequences read as empty ones.
    pub empty: Vec<&'a Node>,
    /// Mapping entries read as absent.
    pub skip: Vec<&'a Entry>,
}

static NOTHING: Hidden<'static> = Hidden {
    empty: Vec::new(),
    skip: Vec::new(),
};

impl Hidden<'_> {
    fn empties(&self, node: &Node) -> bool {
        self.empty.iter().any(|n| std::ptr::eq(*n, node))
    }

    fn skips(&self, entry: &Entry) -> bool {
        self.skip.iter().any(|e| std::ptr::eq(*e, entry))
    }
}

/// Reads one node; see the module docs.
#[derive(Clone, Copy)]
pub struct NodeDeserializer<'a> {
    node: &'a Node,
    hidden: &'a Hidden<'a>,
}

impl<'a> NodeDeserializer<'a> {
    pub fn new(node: &'a Node) -> NodeDeserializer<'a> {
        NodeDeserializer {
            node,
            hidden: &NOTHING,
        }
    }

    fn child(self, node: &'a Node) -> NodeDeserializer<'a> {
        NodeDeserializer {
            node,
            hidden: self.hidden,
        }
    }

    /// The innermost node's span on an error that has none yet.
    fn at<T>(self, result: Result<T, DeError>) -> Result<T, DeError> {
        result.map_err(|mut e| {
            e.span.get_or_insert(self.node.span);
            e
        })
    }

    /// The node's entries, all of them, or none when it is hidden as empty.
    fn entries(self) -> &'a [Entry] {
        match &self.node.value {
            Value::Map(entries) if !self.hidden.empties(self.node) => entries,
            _ => &[],
        }
    }

    fn items(self) -> &'a [Node] {
        match &self.node.value {
            Value::Seq(items) if !self.hidden.empties(self.node) => items,
            _ => &[],
        }
    }
}

/// What [`Node::to_json`] makes of a float: an integer when it has no fractional part (JSON
/// Schema counts `4.0` as an integer), its text when JSON has no number for it.
enum FloatAs {
    Int(i64),
    Float(f64),
    Text(String),
}

fn float_as(f: f64) -> FloatAs {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        FloatAs::Int(f as i64)
    } else if f.is_finite() {
        FloatAs::Float(f)
    } else {
        FloatAs::Text(f.to_string())
    }
}

fn visit_int<'de, V: Visitor<'de>>(i: i64, visitor: V) -> Result<V::Value, DeError> {
    // serde_json keeps a non-negative integer as unsigned.
    match u64::try_from(i) {
        Ok(u) => visitor.visit_u64(u),
        Err(_) => visitor.visit_i64(i),
    }
}

impl<'de> de::Deserializer<'de> for NodeDeserializer<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Int(i) => visit_int(*i, visitor),
            Value::Float(f) => match float_as(*f) {
                FloatAs::Int(i) => visit_int(i, visitor),
                FloatAs::Float(f) => visitor.visit_f64(f),
                FloatAs::Text(t) => visitor.visit_string(t),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Seq(_) => {
                let items = self.items();
                let mut seq = SeqAccess {
                    de: self,
                    items: items.iter(),
                };
                let value = visitor.visit_seq(&mut seq)?;
                match seq.items.len() {
                    0 => Ok(value),
                    left => Err(de::Error::invalid_length(
                        items.len() - left,
                        &"fewer elements in sequence",
                    )),
                }
            }
            Value::Map(_) => {
                let entries = self.entries();
                let mut map = MapAccess {
                    de: self,
                    entries: entries.iter(),
                    value: None,
                };
                let value = visitor.visit_map(&mut map)?;
                match map.entries.filter(|e| !self.hidden.skips(e)).count() {
                    0 => Ok(value),
                    left => Err(de::Error::invalid_length(
                        entries.len() - left,
                        &"fewer elements in map",
                    )),
                }
            }
        };
        self.at(result)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.node.value {
            Value::Null => self.at(visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let result = match &self.node.value {
            Value::String(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Map(_) => match self.entries() {
                [entry] if !self.hidden.skips(entry) => {
                    visitor.visit_enum(EnumAccess { de: self, entry })
                }
                _ => Err(de::Error::invalid_value(
                    de::Unexpected::Map,
                    &"map with a single key",
                )),
            },
            _ => Err(de::Error::invalid_type(
                unexpected(self.node),
                &"string or map",
            )),
        };
        self.at(result)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

fn unexpected(node: &Node) -> de::Unexpected<'_> {
    match &node.value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Int(i) => de::Unexpected::Signed(*i),
        Value::Float(f) => de::Unexpected::Float(*f),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Seq(_) => de::Unexpected::Seq,
        Value::Map(_) => de::Unexpected::Map,
    }
}

struct SeqAccess<'a> {
    de: NodeDeserializer<'a>,
    items: std::slice::Iter<'a, Node>,
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'de> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some(node) => seed.deserialize(self.de.child(node)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapAccess<'a> {
    de: NodeDeserializer<'a>,
    entries: std::slice::Iter<'a, Entry>,
    value: Option<&'a Node>,
}

impl<'de> de::MapAccess<'de> for MapAccess<'de> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let hidden = self.de.hidden;
        match self
            .entries
            .find(|e| hidden.skip.is_empty() || !hidden.skips(e))
        {
            Some(entry) => {
                self.value = Some(&entry.value);
                seed.deserialize(KeyDeserializer(entry))
                    .map(Some)
                    .map_err(|mut e| {
                        e.span.get_or_insert(entry.key_span);
                        e
                    })
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some(node) => seed.deserialize(self.de.child(node)),
            None => Err(de::Error::custom(
                "a map value was asked for before its key",
            )),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A mapping key: a string, as in JSON.
struct KeyDeserializer<'a>(&'a Entry);

impl<'de> de::Deserializer<'de> for KeyDeserializer<'de> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_borrowed_str(&self.0.key)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_enum(self.0.key.as_str().into_deserializer())
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

struct EnumAccess<'a> {
    de: NodeDeserializer<'a>,
    entry: &'a Entry,
}

impl<'de> de::EnumAccess<'de> for EnumAccess<'de> {
    type Error = DeError;
    type Variant = VariantAccess<'de>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, VariantAccess<'de>), DeError> {
        let variant = seed.deserialize(KeyDeserializer(self.entry))?;
        Ok((
            variant,
            VariantAccess {
                de: self.de.child(&self.entry.value),
            },
        ))
    }
}

struct VariantAccess<'a> {
    de: NodeDeserializer<'a>,
}

impl<'de> de::VariantAccess<'de> for VariantAccess<'de> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        de::Deserialize::deserialize(self.de)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self.de)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_seq(self.de, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_map(self.de, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(text: &str) -> Node {
        super::super::parse(text).unwrap().unwrap()
    }

    #[test]
    fn values_read_as_their_json_reads() {
        // `4.0` is an integer, as JSON Schema counts it; `.inf` has no JSON number: its text.
        assert_eq!(from_node::<u32>(&node("4.0")).unwrap(), 4);
        assert_eq!(from_node::<String>(&node(".inf")).unwrap(), "inf");
        assert_eq!(from_node::<i64>(&node("-7")).unwrap(), -7);
        assert_eq!(from_node::<Option<bool>>(&node("~")).unwrap(), None);
        let json = serde_json::json!({"a": [1, "x", null, 1.5]});
        assert_eq!(
            from_node::<serde_json::Value>(&node("a: [1, x, ~, 1.5]\n")).unwrap(),
            json
        );
    }

    #[test]
    fn an_error_carries_the_span_of_the_node_it_arose_in() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct T {
            a: Vec<u32>,
        }
        let e = from_node::<T>(&node("a:\n  - 1\n  - no\n")).unwrap_err();
        let at = e.span.unwrap().start;
        assert_eq!((at.line, at.column), (3, 5), "{e:?}");
    }

    #[test]
    fn hidden_parts_are_left_out() {
        let root = node("a: {x: 1}\nb: [1, 2]\nc: 3\n");
        let Value::Map(entries) = &root.value else {
            unreachable!()
        };
        let hidden = Hidden {
            empty: vec![&entries[0].value, &entries[1].value],
            skip: vec![&entries[2]],
        };
        let json: serde_json::Value = from_node_hiding(&root, &hidden).unwrap();
        assert_eq!(json, serde_json::json!({"a": {}, "b": []}));
    }
}
