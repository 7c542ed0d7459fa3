//! The YAML document as a tree of located nodes.
//!
//! serde-saphyr parses the text into [`Node`]s, each with the line and
//! column it starts at and its byte range in the text. Deserializing the
//! config from this tree (in `decode`) rather than straight from the text
//! lets every error carry its key path, lets `${VAR}` expansion happen per
//! value while positions keep pointing into the original text, and lets
//! validation find the line of any key after parsing.

use std::collections::HashSet;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, MessageFormatter, Spanned, UserMessageFormatter};

use crate::error::Problem;

/// A parsed document and the text it came from.
#[derive(Debug)]
pub(crate) struct Document<'t> {
    pub text: &'t str,
    pub root: Node,
}

/// One YAML node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub kind: NodeKind,
    /// 1-based line where the node starts.
    pub line: u64,
    /// 1-based column (in characters) where the node starts.
    pub column: u64,
    /// Where the node's text is, when known (for an alias: the anchored
    /// node's text).
    pub span: Option<Range<usize>>,
}

/// A node's value. Scalars are typed the way YAML 1.2 reads plain text
/// (`10` is an integer, `true` a boolean, `~` null); a string field still
/// gets the scalar's exact source text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NodeKind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Key, Node)>),
}

/// A mapping key, always read as text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Key {
    pub text: String,
    pub line: u64,
    pub column: u64,
}

/// A problem at a place in the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Located {
    pub problem: Box<Problem>,
    pub line: u64,
    pub column: u64,
    pub key_path: KeyPath,
}

impl<'t> Document<'t> {
    /// Parses `text`, which must hold one YAML document (an empty text is
    /// an empty document).
    pub fn parse(text: &'t str) -> Result<Self, Located> {
        let options = serde_saphyr::options! {
            // Duplicates are reported below, with their key path.
            duplicate_keys: DuplicateKeyPolicy::PassThrough,
            // YAML 1.2: `yes`/`no`/`on`/`off` are strings, as editors
            // validating with the JSON Schema read them.
            strict_booleans: true,
            with_snippet: false,
        };
        let raw: Spanned<RawValue> =
            serde_saphyr::from_str_with_options(text, options).map_err(syntax_error)?;
        let root = convert(raw, text, &KeyPath::root())?;
        Ok(Document { text, root })
    }

    /// Where the node at `path` starts; when part of the path is missing,
    /// where its deepest existing ancestor starts.
    pub fn locate(&self, path: &KeyPath) -> (u64, u64) {
        let mut node = &self.root;
        for segment in &path.0 {
            let child = match (segment, &node.kind) {
                (Segment::Key(key), NodeKind::Map(entries)) => entries
                    .iter()
                    .rev()
                    .find(|(k, _)| &k.text == key)
                    .map(|(_, value)| value),
                (Segment::Index(index), NodeKind::Seq(items)) => items.get(*index),
                _ => None,
            };
            match child {
                Some(child) => node = child,
                None => break,
            }
        }
        (node.line, node.column)
    }

    /// The node at exactly `path`, if the document has one.
    pub fn find(&self, path: &KeyPath) -> Option<&Node> {
        let mut node = &self.root;
        for segment in &path.0 {
            node = match (segment, &node.kind) {
                (Segment::Key(key), NodeKind::Map(entries)) => entries
                    .iter()
                    .rev()
                    .find(|(k, _)| &k.text == key)
                    .map(|(_, value)| value)?,
                (Segment::Index(index), NodeKind::Seq(items)) => items.get(*index)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The node's exact source text, when its span is known.
    pub fn source_of(&self, node: &Node) -> Option<&'t str> {
        node.span.clone().and_then(|span| self.text.get(span))
    }

    /// Line and column of a byte offset into the text.
    pub fn position_of(&self, offset: usize) -> (u64, u64) {
        let before = self.text.get(..offset).unwrap_or(self.text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        let column = before[line_start..].chars().count() + 1;
        (line as u64, column as u64)
    }
}

impl Node {
    /// Moves the node (and everything under it) to where it sits in a
    /// longer text that has `lines` more lines and `bytes` more bytes
    /// before it than the text it was parsed from.
    pub fn shift(&mut self, lines: u64, bytes: usize) {
        self.line += lines;
        if let Some(span) = &mut self.span {
            *span = span.start + bytes..span.end + bytes;
        }
        match &mut self.kind {
            NodeKind::Seq(items) => items.iter_mut().for_each(|item| item.shift(lines, bytes)),
            NodeKind::Map(entries) => {
                for (key, value) in entries {
                    key.line += lines;
                    value.shift(lines, bytes);
                }
            }
            _ => {}
        }
    }
}

/// `overlay` laid over `base`: mappings merge key by key, all the way
/// down; anything else (a scalar, a list, a mapping over a scalar) is
/// replaced by the overlay's value. An empty overlay changes nothing.
pub(crate) fn merge(base: Node, overlay: Node) -> Node {
    match (base.kind, overlay.kind) {
        (NodeKind::Map(mut entries), NodeKind::Map(over)) => {
            for (key, value) in over {
                match entries.iter_mut().rev().find(|(k, _)| k.text == key.text) {
                    Some(entry) => {
                        let old = std::mem::replace(&mut entry.1, Node::placeholder());
                        entry.1 = merge(old, value);
                    }
                    None => entries.push((key, value)),
                }
            }
            Node {
                kind: NodeKind::Map(entries),
                ..base
            }
        }
        (kind, NodeKind::Null) => Node { kind, ..base },
        (_, kind) => Node { kind, ..overlay },
    }
}

impl Node {
    fn placeholder() -> Node {
        Node {
            kind: NodeKind::Null,
            line: 0,
            column: 0,
            span: None,
        }
    }
}

fn syntax_error(error: serde_saphyr::Error) -> Located {
    let error = error.without_snippet();
    let (line, column) = error
        .location()
        .map_or((0, 0), |location| (location.line(), location.column()));
    Located {
        problem: Box::new(Problem::Syntax {
            message: UserMessageFormatter.format_message(error).into_owned(),
        }),
        line,
        column,
        key_path: KeyPath::root(),
    }
}

fn span_of(location: &serde_saphyr::Location) -> Option<Range<usize>> {
    let span = location.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    Some(start..start.checked_add(len)?)
}

fn convert(raw: Spanned<RawValue>, text: &str, path: &KeyPath) -> Result<Node, Located> {
    let line = raw.referenced.line();
    let column = raw.referenced.column();
    let span = span_of(&raw.defined);
    let kind = match raw.value {
        RawValue::Null => NodeKind::Null,
        RawValue::Bool(value) => NodeKind::Bool(value),
        RawValue::Int(value) => NodeKind::Int(value),
        RawValue::Float(value) => NodeKind::Float(value),
        RawValue::Str(value) => NodeKind::Str(value),
        RawValue::Seq(items) => NodeKind::Seq(
            items
                .into_iter()
                .enumerate()
                .map(|(index, item)| convert(item, text, &path.index(index)))
                .collect::<Result<_, _>>()?,
        ),
        RawValue::Map(entries) => {
            let mut seen = HashSet::new();
            let mut out = Vec::with_capacity(entries.len());
            for (raw_key, value) in entries {
                let key = Key {
                    text: match raw_key.value {
                        RawKey::Str(text) => text,
                        RawKey::Scalar(fallback) => span_of(&raw_key.defined)
                            .and_then(|span| text.get(span))
                            .map_or(fallback, str::to_owned),
                    },
                    line: raw_key.referenced.line(),
                    column: raw_key.referenced.column(),
                };
                let child = path.key(&key.text);
                if !seen.insert(key.text.clone()) {
                    return Err(Located {
                        problem: Box::new(Problem::DuplicateKey { key: key.text }),
                        line: key.line,
                        column: key.column,
                        key_path: child,
                    });
                }
                let value = convert(value, text, &child)?;
                out.push((key, value));
            }
            NodeKind::Map(out)
        }
    };
    Ok(Node {
        kind,
        line,
        column,
        span,
    })
}

/// A path from the document root: `models.tiers.fast[0]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyPath(Vec<Segment>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl KeyPath {
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    #[must_use]
    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        KeyPath(segments)
    }

    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        KeyPath(segments)
    }

    /// `a.b.c`, from a dotted list of plain keys.
    pub fn keys(keys: &[&str]) -> Self {
        KeyPath(keys.iter().map(|k| Segment::Key((*k).to_owned())).collect())
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) if is_plain_key(key) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(key)?;
                }
                Segment::Key(key) => write!(f, "[{key:?}]")?,
            }
        }
        Ok(())
    }
}

fn is_plain_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// What serde-saphyr gives us for a node, before positions are attached.
enum RawValue {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<RawValue>>),
    Map(Vec<(Spanned<RawKey>, Spanned<RawValue>)>),
}

impl<'de> Deserialize<'de> for RawValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawValueVisitor)
    }
}

struct RawValueVisitor;

impl<'de> Visitor<'de> for RawValueVisitor {
    type Value = RawValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawValue, E> {
        Ok(RawValue::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<RawValue, E> {
        Ok(RawValue::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawValue, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawValue, E> {
        Ok(RawValue::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawValue, E> {
        Ok(RawValue::Int(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawValue, E> {
        Ok(RawValue::Int(value.into()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<RawValue, E> {
        Ok(RawValue::Int(value))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<RawValue, E> {
        match i128::try_from(value) {
            Ok(value) => Ok(RawValue::Int(value)),
            Err(_) => Ok(RawValue::Float(value as f64)),
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawValue, E> {
        Ok(RawValue::Float(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawValue, E> {
        Ok(RawValue::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<RawValue, E> {
        Ok(RawValue::Str(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawValue, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(RawValue::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawValue, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(RawValue::Map(entries))
    }
}

/// A mapping key: its text when it is a string, otherwise a fallback
/// rendering used only when its source text cannot be found.
enum RawKey {
    Str(String),
    Scalar(String),
}

impl<'de> Deserialize<'de> for RawKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawKeyVisitor)
    }
}

struct RawKeyVisitor;

impl<'de> Visitor<'de> for RawKeyVisitor {
    type Value = RawKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar mapping key")
    }

    fn visit_unit<E: de::Error>(self) -> Result<RawKey, E> {
        Ok(RawKey::Scalar("null".to_owned()))
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_i128<E: de::Error>(self, value: i128) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_u128<E: de::Error>(self, value: u128) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawKey, E> {
        Ok(RawKey::Scalar(value.to_string()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<RawKey, E> {
        Ok(RawKey::Str(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<RawKey, E> {
        Ok(RawKey::Str(value))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn kinds(node: &Node) -> String {
        match &node.kind {
            NodeKind::Null => format!("null@{}:{}", node.line, node.column),
            NodeKind::Bool(b) => format!("{b}@{}:{}", node.line, node.column),
            NodeKind::Int(i) => format!("int {i}@{}:{}", node.line, node.column),
            NodeKind::Float(x) => format!("float {x}@{}:{}", node.line, node.column),
            NodeKind::Str(s) => format!("{s:?}@{}:{}", node.line, node.column),
            NodeKind::Seq(items) => format!(
                "[{}]@{}:{}",
                items.iter().map(kinds).collect::<Vec<_>>().join(", "),
                node.line,
                node.column
            ),
            NodeKind::Map(entries) => format!(
                "{{{}}}@{}:{}",
                entries
                    .iter()
                    .map(|(k, v)| format!("{}@{}:{}: {}", k.text, k.line, k.column, kinds(v)))
                    .collect::<Vec<_>>()
                    .join(", "),
                node.line,
                node.column
            ),
        }
    }

    #[test]
    fn nodes_carry_their_positions_and_types() {
        let doc = Document::parse("a: 1\nb:\n  - x\n  - \"y\"\nc: ~\nd: yes\n").unwrap();
        assert_eq!(
            kinds(&doc.root),
            "{a@1:1: int 1@1:4, b@2:1: [\"x\"@3:5, \"y\"@4:5]@3:3, c@5:1: null@5:4, d@6:1: \"yes\"@6:4}@1:1"
        );
    }

    #[test]
    fn source_text_of_scalars_is_exact() {
        let doc = Document::parse("a: 1.50\nb: 0x1F\n7: x\n").unwrap();
        let NodeKind::Map(entries) = &doc.root.kind else {
            panic!("not a map")
        };
        let sources: Vec<_> = entries
            .iter()
            .map(|(k, v)| (k.text.as_str(), doc.source_of(v)))
            .collect();
        assert_eq!(
            sources,
            [("a", Some("1.50")), ("b", Some("0x1F")), ("7", Some("x"))]
        );
    }

    #[test]
    fn duplicate_keys_are_reported_with_their_path() {
        assert_eq!(
            Document::parse("a:\n  b: 1\n  b: 2\n").unwrap_err(),
            Located {
                problem: Box::new(Problem::DuplicateKey {
                    key: "b".to_owned()
                }),
                line: 3,
                column: 3,
                key_path: KeyPath::keys(&["a", "b"]),
            }
        );
    }

    #[test]
    fn locate_falls_back_to_the_deepest_existing_node() {
        let doc = Document::parse("models:\n  tiers:\n    fast: [a/b, c/d]\n").unwrap();
        let fast = KeyPath::keys(&["models", "tiers", "fast"]);
        assert_eq!(doc.locate(&fast.index(1)), (3, 17));
        assert_eq!(doc.locate(&fast.index(5)), (3, 11));
        assert_eq!(doc.locate(&KeyPath::keys(&["models", "nope"])), (2, 3));
    }

    #[test]
    fn key_paths_print_like_a_user_would_write_them() {
        let path = KeyPath::keys(&["providers", "my.local", "headers"])
            .key("x-api-key")
            .index(2);
        assert_eq!(
            path.to_string(),
            "providers[\"my.local\"].headers.x-api-key[2]"
        );
        assert_eq!(KeyPath::root().to_string(), "");
    }

    #[test]
    fn position_of_counts_characters() {
        let doc = Document::parse("a: \"é${X}\"\n").unwrap();
        let offset = doc.text.find("${").unwrap();
        assert_eq!(doc.position_of(offset), (1, 6));
    }
}
