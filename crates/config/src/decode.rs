//! A serde `Deserializer` over the located [`Node`] tree.
//!
//! It does three things a plain YAML deserializer cannot: it knows the key
//! path of every value, so each error gets one; it expands `${VAR}` in
//! string values as they are read, reporting an unset variable at the
//! reference's own line and column; and it turns serde's errors into typed
//! [`Problem`]s with people's words ("a whole number from 0 to 255", not
//! "u8").
//!
//! Two conveniences, both documented for users in the crate docs:
//! - a mapping entry whose value is made of `${...}` references that expand
//!   to nothing is skipped, as if the key were not written, so
//!   `api_key: ${OPENAI_API_KEY:-}` leaves the key unset and a key with a
//!   default keeps its default;
//! - a block with nothing under it (`providers:` with every provider
//!   commented out) is an empty block.

use std::fmt;
use std::str::FromStr;

use serde::de::value::StringDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};

use crate::document::{Document, Key, KeyPath, Located, Node, NodeKind};
use crate::env::Env;
use crate::error::{Problem, did_you_mean};
use crate::expand::{self, Expansion};

/// Deserializes `T` from the document, expanding references from `env`.
pub(crate) fn decode<T: DeserializeOwned>(doc: &Document<'_>, env: &dyn Env) -> Result<T, Located> {
    let cx = Cx { doc, env };
    T::deserialize(NodeDe {
        node: &doc.root,
        path: KeyPath::root(),
        cx: &cx,
    })
    .map_err(|error| {
        let place = error.place.map_or(
            Place {
                line: doc.root.line,
                column: doc.root.column,
                key_path: KeyPath::root(),
            },
            |place| *place,
        );
        Located {
            problem: error.problem,
            line: place.line,
            column: place.column,
            key_path: place.key_path,
        }
    })
}

struct Cx<'a, 't> {
    doc: &'a Document<'t>,
    env: &'a dyn Env,
}

impl Cx<'_, '_> {
    /// Expands a string node's text; errors point at the reference itself.
    fn expand(&self, node: &Node, text: &str, path: &KeyPath) -> Result<Expansion, Error> {
        if !expand::has_dollar_brace(text) {
            return Ok(Expansion {
                text: text.to_owned(),
                had_reference: false,
            });
        }
        expand::expand(text, self.env).map_err(|error| {
            let (line, column) = self
                .reference_position(node, &error.reference, error.occurrence)
                .unwrap_or((node.line, node.column));
            Error {
                problem: error.problem,
                place: Some(Box::new(Place {
                    line,
                    column,
                    key_path: path.clone(),
                })),
            }
        })
    }

    /// Where the `occurrence`-th `reference` is in the node's source text,
    /// when the source spells it as the value does (escapes may not).
    fn reference_position(
        &self,
        node: &Node,
        reference: &str,
        occurrence: usize,
    ) -> Option<(u64, u64)> {
        let span = node.span.clone()?;
        let source = self.doc.text.get(span.clone())?;
        let (offset, _) = source.match_indices(reference).nth(occurrence)?;
        Some(self.doc.position_of(span.start + offset))
    }

    /// Whether a mapping entry's value expands to nothing (see module docs).
    fn is_absent(&self, node: &Node, path: &KeyPath) -> Result<bool, Error> {
        match &node.kind {
            NodeKind::Str(text) if expand::has_dollar_brace(text) => {
                let expansion = self.expand(node, text, path)?;
                Ok(expansion.had_reference && expansion.text.is_empty())
            }
            _ => Ok(false),
        }
    }
}

/// serde's error type while decoding: a problem, placed as soon as the
/// node it belongs to is known.
#[derive(Debug)]
pub(crate) struct Error {
    problem: Box<Problem>,
    place: Option<Box<Place>>,
}

#[derive(Debug)]
struct Place {
    line: u64,
    column: u64,
    key_path: KeyPath,
}

impl Error {
    fn new(problem: Problem) -> Self {
        Error {
            problem: Box::new(problem),
            place: None,
        }
    }

    fn at(mut self, line: u64, column: u64, path: &KeyPath) -> Self {
        if self.place.is_none() {
            self.place = Some(Box::new(Place {
                line,
                column,
                key_path: path.clone(),
            }));
        }
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.fmt(f)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error::new(Problem::Other {
            message: message.to_string(),
        })
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Error::new(Problem::WrongType {
            found: unexpected.to_string(),
            expected: expected.to_string(),
        })
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Error::invalid_type(unexpected, expected)
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        Error::new(Problem::UnknownValue {
            what: "value".to_owned(),
            value: variant.to_owned(),
            suggestion: did_you_mean(variant, expected.iter().copied()),
            expected: expected.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Error::new(Problem::UnknownKey {
            key: field.to_owned(),
            suggestion: did_you_mean(field, expected.iter().copied()),
            expected: expected.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    fn missing_field(field: &'static str) -> Self {
        Error::new(Problem::MissingKey {
            key: field.to_owned(),
        })
    }
}

/// Deserializes one node.
struct NodeDe<'a, 't> {
    node: &'a Node,
    path: KeyPath,
    cx: &'a Cx<'a, 't>,
}

impl NodeDe<'_, '_> {
    fn place<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        result.map_err(|e| e.at(self.node.line, self.node.column, &self.path))
    }

    fn wrong_type(&self, expected: impl Into<String>) -> Error {
        Error::new(Problem::WrongType {
            found: self.describe(),
            expected: expected.into(),
        })
        .at(self.node.line, self.node.column, &self.path)
    }

    /// The node, described for an error message. Values that came from
    /// the environment are not shown: they may be secrets.
    fn describe(&self) -> String {
        match &self.node.kind {
            NodeKind::Null => "an empty value".to_owned(),
            NodeKind::Bool(value) => format!("the boolean {value}"),
            NodeKind::Int(_) | NodeKind::Float(_) => format!("the number {}", self.scalar_text()),
            NodeKind::Str(text) if expand::has_dollar_brace(text) => {
                format!("the value of '{}'", shorten(text))
            }
            NodeKind::Str(text) => format!("the string '{}'", shorten(text)),
            NodeKind::Seq(_) => "a list".to_owned(),
            NodeKind::Map(_) => "a mapping".to_owned(),
        }
    }

    /// A non-string scalar's text exactly as written.
    fn scalar_text(&self) -> String {
        if let Some(source) = self.cx.doc.source_of(self.node) {
            return source.to_owned();
        }
        match &self.node.kind {
            NodeKind::Bool(value) => value.to_string(),
            NodeKind::Int(value) => value.to_string(),
            NodeKind::Float(value) => value.to_string(),
            _ => String::new(),
        }
    }

    /// The text of a string node after expansion, when it had references:
    /// the only strings read as numbers or booleans.
    fn expanded_scalar(&self) -> Result<Option<String>, Error> {
        match &self.node.kind {
            NodeKind::Str(text) if expand::has_dollar_brace(text) => {
                let expansion = self.cx.expand(self.node, text, &self.path)?;
                Ok(expansion.had_reference.then_some(expansion.text))
            }
            _ => Ok(None),
        }
    }

    fn integer<T>(&self, expected: &str) -> Result<T, Error>
    where
        T: TryFrom<i128> + FromStr,
    {
        let parsed = match &self.node.kind {
            NodeKind::Int(value) => T::try_from(*value).ok(),
            NodeKind::Str(_) => match self.expanded_scalar()? {
                Some(text) => text.trim().parse().ok(),
                None => None,
            },
            _ => None,
        };
        parsed.ok_or_else(|| self.wrong_type(expected))
    }

    fn float(&self) -> Result<f64, Error> {
        let parsed = match &self.node.kind {
            NodeKind::Int(value) => Some(*value as f64),
            NodeKind::Float(value) => Some(*value),
            NodeKind::Str(_) => match self.expanded_scalar()? {
                Some(text) => text.trim().parse().ok(),
                None => None,
            },
            _ => None,
        };
        parsed.ok_or_else(|| self.wrong_type("a number"))
    }

    fn string(&self) -> Result<String, Error> {
        match &self.node.kind {
            NodeKind::Str(text) => Ok(self.cx.expand(self.node, text, &self.path)?.text),
            NodeKind::Bool(_) | NodeKind::Int(_) | NodeKind::Float(_) => Ok(self.scalar_text()),
            _ => Err(self.wrong_type("a string")),
        }
    }

    fn seq_access(&self) -> SeqDe<'_, '_> {
        let items: &[Node] = match &self.node.kind {
            NodeKind::Seq(items) => items,
            _ => &[],
        };
        SeqDe {
            items: items.iter().enumerate(),
            path: &self.path,
            cx: self.cx,
        }
    }

    /// `fields`: a struct's keys, so an unknown key is reported as such
    /// even when its value expands to nothing.
    fn map_access(&self, fields: Option<&'static [&'static str]>) -> MapDe<'_, '_> {
        let entries: &[(Key, Node)] = match &self.node.kind {
            NodeKind::Map(entries) => entries,
            _ => &[],
        };
        MapDe {
            entries: entries.iter(),
            fields,
            pending: None,
            path: &self.path,
            cx: self.cx,
        }
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(MAX).collect();
        short.push_str("...");
        short
    }
}

/// "ProviderKind" -> "provider kind".
fn noun(type_name: &str) -> String {
    let mut out = String::new();
    for c in type_name.chars() {
        if c.is_uppercase() && !out.is_empty() {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    out
}

macro_rules! integer_methods {
    ($($method:ident => $ty:ty, $visit:ident, $expected:expr;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                let value: $ty = self.integer(&$expected)?;
                self.place(visitor.$visit(value))
            }
        )*
    };
}

fn unsigned_range(max: u128) -> String {
    format!("a whole number from 0 to {max}")
}

fn signed_range(min: i128, max: i128) -> String {
    format!("a whole number from {min} to {max}")
}

impl<'de> Deserializer<'de> for NodeDe<'_, '_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let result = match &self.node.kind {
            NodeKind::Null => visitor.visit_unit(),
            NodeKind::Bool(value) => visitor.visit_bool(*value),
            NodeKind::Int(value) => match (i64::try_from(*value), u64::try_from(*value)) {
                (Ok(value), _) => visitor.visit_i64(value),
                (_, Ok(value)) => visitor.visit_u64(value),
                _ => visitor.visit_i128(*value),
            },
            NodeKind::Float(value) => visitor.visit_f64(*value),
            NodeKind::Str(_) => visitor.visit_string(self.string()?),
            NodeKind::Seq(_) => visitor.visit_seq(self.seq_access()),
            NodeKind::Map(_) => visitor.visit_map(self.map_access(None)),
        };
        self.place(result)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let value = match &self.node.kind {
            NodeKind::Bool(value) => Some(*value),
            NodeKind::Str(_) => match self.expanded_scalar()?.as_deref().map(str::trim) {
                Some("true") => Some(true),
                Some("false") => Some(false),
                _ => None,
            },
            _ => None,
        };
        let value = value.ok_or_else(|| self.wrong_type("true or false"))?;
        self.place(visitor.visit_bool(value))
    }

    integer_methods! {
        deserialize_u8 => u8, visit_u8, unsigned_range(u8::MAX.into());
        deserialize_u16 => u16, visit_u16, unsigned_range(u16::MAX.into());
        deserialize_u32 => u32, visit_u32, unsigned_range(u32::MAX.into());
        deserialize_u64 => u64, visit_u64, "a whole number, 0 or more";
        deserialize_u128 => u128, visit_u128, "a whole number, 0 or more";
        deserialize_i8 => i8, visit_i8, signed_range(i8::MIN.into(), i8::MAX.into());
        deserialize_i16 => i16, visit_i16, signed_range(i16::MIN.into(), i16::MAX.into());
        deserialize_i32 => i32, visit_i32, signed_range(i32::MIN.into(), i32::MAX.into());
        deserialize_i64 => i64, visit_i64, "a whole number";
        deserialize_i128 => i128, visit_i128, "a whole number";
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let value = self.float()?;
        self.place(visitor.visit_f64(value))
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let text = self.string()?;
        let mut chars = text.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => self.place(visitor.visit_char(c)),
            _ => Err(self.wrong_type("a single character")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let text = self.string()?;
        self.place(visitor.visit_string(text))
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.node.kind {
            NodeKind::Null => self.place(visitor.visit_none()),
            _ => {
                let (line, column, path) = (self.node.line, self.node.column, self.path.clone());
                visitor
                    .visit_some(self)
                    .map_err(|e| e.at(line, column, &path))
            }
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.node.kind {
            NodeKind::Null => self.place(visitor.visit_unit()),
            _ => Err(self.wrong_type("an empty value")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let (line, column, path) = (self.node.line, self.node.column, self.path.clone());
        visitor
            .visit_newtype_struct(self)
            .map_err(|e| e.at(line, column, &path))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.node.kind {
            NodeKind::Seq(_) | NodeKind::Null => self.place(visitor.visit_seq(self.seq_access())),
            _ => Err(self.wrong_type("a list")),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.node.kind {
            NodeKind::Map(_) | NodeKind::Null => {
                self.place(visitor.visit_map(self.map_access(None)))
            }
            _ => Err(self.wrong_type("a mapping")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.node.kind {
            NodeKind::Map(_) | NodeKind::Null => {
                self.place(visitor.visit_map(self.map_access(Some(fields))))
            }
            _ if fields.is_empty() => Err(self.wrong_type("a mapping")),
            _ => Err(self.wrong_type(format!("a mapping with keys from: {}", fields.join(", ")))),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let result = match &self.node.kind {
            NodeKind::Str(_) => {
                let text = self.string()?;
                let access: StringDeserializer<Error> = text.into_deserializer();
                visitor.visit_enum(access)
            }
            NodeKind::Map(entries) if entries.len() == 1 => {
                let (key, value) = &entries[0];
                visitor.visit_enum(VariantDe {
                    key,
                    value,
                    path: self.path.key(&key.text),
                    cx: self.cx,
                })
            }
            _ => return Err(self.wrong_type(format!("one of: {}", variants.join(", ")))),
        };
        self.place(result.map_err(|mut error| {
            if let Problem::UnknownValue { what, .. } = error.problem.as_mut() {
                *what = noun(name);
            }
            error
        }))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.kind {
            NodeKind::Str(text) => self.place(visitor.visit_str(text)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.place(visitor.visit_unit())
    }
}

struct SeqDe<'a, 't> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Node>>,
    path: &'a KeyPath,
    cx: &'a Cx<'a, 't>,
}

impl<'de> SeqAccess<'de> for SeqDe<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some((index, node)) = self.items.next() else {
            return Ok(None);
        };
        let path = self.path.index(index);
        seed.deserialize(NodeDe {
            node,
            path: path.clone(),
            cx: self.cx,
        })
        .map(Some)
        .map_err(|e| e.at(node.line, node.column, &path))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapDe<'a, 't> {
    entries: std::slice::Iter<'a, (Key, Node)>,
    fields: Option<&'static [&'static str]>,
    pending: Option<&'a (Key, Node)>,
    path: &'a KeyPath,
    cx: &'a Cx<'a, 't>,
}

impl<'de> MapAccess<'de> for MapDe<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        for entry in self.entries.by_ref() {
            let (key, value) = entry;
            let path = self.path.key(&key.text);
            let known = self
                .fields
                .is_none_or(|fields| fields.contains(&key.text.as_str()));
            if known && self.cx.is_absent(value, &path)? {
                continue;
            }
            self.pending = Some(entry);
            return seed
                .deserialize(KeyDe { text: &key.text })
                .map(Some)
                .map_err(|e| e.at(key.line, key.column, &path));
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((key, node)) = self.pending.take() else {
            return Err(Error::new(Problem::Other {
                message: "a value was asked for before its key".to_owned(),
            }));
        };
        let path = self.path.key(&key.text);
        seed.deserialize(NodeDe {
            node,
            path: path.clone(),
            cx: self.cx,
        })
        .map_err(|e| e.at(node.line, node.column, &path))
    }
}

/// A mapping key: always text.
struct KeyDe<'a> {
    text: &'a str,
}

impl<'de> Deserializer<'de> for KeyDe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str(self.text)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// An enum written as a one-entry mapping: `variant: value`.
struct VariantDe<'a, 't> {
    key: &'a Key,
    value: &'a Node,
    path: KeyPath,
    cx: &'a Cx<'a, 't>,
}

impl<'de, 'a, 't> EnumAccess<'de> for VariantDe<'a, 't> {
    type Error = Error;
    type Variant = NodeDe<'a, 't>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Error> {
        let variant = seed
            .deserialize(KeyDe {
                text: &self.key.text,
            })
            .map_err(|e| e.at(self.key.line, self.key.column, &self.path))?;
        Ok((
            variant,
            NodeDe {
                node: self.value,
                path: self.path,
                cx: self.cx,
            },
        ))
    }
}

impl<'de> VariantAccess<'de> for NodeDe<'_, '_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_struct("", fields, visitor)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::env::MapEnv;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[serde(default)]
        name: Option<String>,
        #[serde(default = "ten")]
        count: u32,
        #[serde(default)]
        ratio: f64,
        #[serde(default)]
        flag: bool,
        #[serde(default)]
        list: Vec<String>,
        #[serde(default)]
        map: BTreeMap<String, String>,
    }

    fn ten() -> u32 {
        10
    }

    fn decode_with(text: &str, env: &MapEnv) -> Result<Sample, String> {
        let doc = Document::parse(text).map_err(|e| format!("{e:?}"))?;
        decode(&doc, env)
            .map_err(|e| format!("{}:{}: {}: {}", e.line, e.column, e.key_path, e.problem))
    }

    fn sample() -> Sample {
        Sample {
            name: None,
            count: 10,
            ratio: 0.0,
            flag: false,
            list: Vec::new(),
            map: BTreeMap::new(),
        }
    }

    #[test]
    fn string_fields_get_the_exact_source_text_of_plain_scalars() {
        let got = decode_with("name: 0x1F\nlist: [1.50, true, ~x]\n", &MapEnv::new()).unwrap();
        assert_eq!(
            got,
            Sample {
                name: Some("0x1F".to_owned()),
                list: vec!["1.50".to_owned(), "true".to_owned(), "~x".to_owned()],
                ..sample()
            }
        );
    }

    #[test]
    fn references_expand_into_strings_numbers_and_booleans() {
        let env = MapEnv::new()
            .with("NAME", "flynn")
            .with("COUNT", "42")
            .with("FLAG", "true");
        let text = "name: \"hi ${NAME}\"\ncount: ${COUNT}\nflag: ${FLAG}\nratio: ${R:-0.5}\nmap: {k: '${NAME}'}\n";
        assert_eq!(
            decode_with(text, &env).unwrap(),
            Sample {
                name: Some("hi flynn".to_owned()),
                count: 42,
                ratio: 0.5,
                flag: true,
                map: BTreeMap::from([("k".to_owned(), "flynn".to_owned())]),
                ..sample()
            }
        );
    }

    #[test]
    fn entries_that_expand_to_nothing_are_absent() {
        let text = "name: ${NAME:-}\ncount: \"${COUNT:-}\"\nmap: {k: '${V:-}', j: x}\n";
        assert_eq!(
            decode_with(text, &MapEnv::new()).unwrap(),
            Sample {
                map: BTreeMap::from([("j".to_owned(), "x".to_owned())]),
                ..sample()
            }
        );
    }

    #[test]
    fn unknown_keys_are_reported_even_when_their_value_expands_to_nothing() {
        for text in ["nmae: ${NAME:-}\n", "nmae: ${UNSET}\n"] {
            assert_eq!(
                decode_with(text, &MapEnv::new()),
                Err("1:1: nmae: unknown key 'nmae' (did you mean 'name'?), expected one of: name, count, ratio, flag, list, map".to_owned()),
                "{text}"
            );
        }
    }

    #[test]
    fn empty_blocks_are_empty() {
        assert_eq!(
            decode_with("list:\nmap:\n", &MapEnv::new()).unwrap(),
            sample()
        );
        assert_eq!(decode_with("", &MapEnv::new()).unwrap(), sample());
    }

    #[test]
    fn unset_variable_points_at_the_reference() {
        assert_eq!(
            decode_with("map:\n  k: \"a ${A:-x} ${MISSING}\"\n", &MapEnv::new()),
            Err("2:17: map.k: environment variable MISSING is not set, expected it to be set or a default as in ${MISSING:-default}".to_owned())
        );
    }

    #[test]
    fn wrong_types_say_what_was_found_and_expected() {
        let env = MapEnv::new().with("SECRET", "sk-live-123");
        for (text, message) in [
            (
                "count: ten",
                "1:8: count: found the string 'ten', expected a whole number from 0 to 4294967295",
            ),
            (
                "count: -1",
                "1:8: count: found the number -1, expected a whole number from 0 to 4294967295",
            ),
            (
                "count: \"10\"",
                "1:8: count: found the string '10', expected a whole number from 0 to 4294967295",
            ),
            (
                "count: ${SECRET}",
                "1:8: count: found the value of '${SECRET}', expected a whole number from 0 to 4294967295",
            ),
            (
                "flag: yes",
                "1:7: flag: found the string 'yes', expected true or false",
            ),
            (
                "list: x",
                "1:7: list: found the string 'x', expected a list",
            ),
            ("map: [1]", "1:6: map: found a list, expected a mapping"),
            ("name: [1]", "1:7: name: found a list, expected a string"),
            (
                "list: [[1]]",
                "1:8: list[0]: found a list, expected a string",
            ),
            (
                "[1]",
                "1:1: : found a list, expected a mapping with keys from: name, count, ratio, flag, list, map",
            ),
        ] {
            assert_eq!(decode_with(text, &env), Err(message.to_owned()), "{text}");
        }
    }

    #[test]
    fn unknown_keys_suggest_the_closest() {
        assert_eq!(
            decode_with("cuont: 3\n", &MapEnv::new()),
            Err("1:1: cuont: unknown key 'cuont' (did you mean 'count'?), expected one of: name, count, ratio, flag, list, map".to_owned())
        );
    }
}
