//! A page's accessibility tree as a few lines of text for a prompt: the
//! elements one can act on numbered (`[3] button "Send"`), headings, images
//! and text around them, indented by nesting.

use std::collections::HashMap;
use std::fmt::Write as _;

/// One node of the accessibility tree, as Chromium reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) ignored: bool,
    pub(crate) role: String,
    pub(crate) name: String,
    pub(crate) value: Option<String>,
    /// Properties by name (`checked`, `level`, `disabled`…), as text.
    pub(crate) properties: Vec<(String, String)>,
    pub(crate) children: Vec<String>,
    /// The DOM node it stands for, which actions address.
    pub(crate) backend: Option<i64>,
}

impl Node {
    fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An element a number stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ref {
    pub(crate) backend: i64,
    pub(crate) role: String,
    pub(crate) name: String,
}

impl Ref {
    /// `button "Send"`, as the snapshot showed it. The name is the page's
    /// text: only for output marked untrusted, never in an error (errors
    /// say the role alone).
    pub(crate) fn describe(&self) -> String {
        if self.name.is_empty() {
            self.role.clone()
        } else {
            format!("{} \"{}\"", self.role, shorten(&self.name, 60))
        }
    }
}

/// The rendered tree and what its numbers stand for (`refs[n - 1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) text: String,
    pub(crate) refs: Vec<Ref>,
    /// Lines left out to keep within the size cap.
    pub(crate) cut_lines: usize,
}

/// Roles one acts on: each gets a number.
const INTERACTIVE: &[&str] = &[
    "button",
    "link",
    "textbox",
    "searchbox",
    "combobox",
    "listbox",
    "checkbox",
    "radio",
    "switch",
    "slider",
    "spinbutton",
    "menuitem",
    "menuitemcheckbox",
    "menuitemradio",
    "tab",
    "treeitem",
    "option",
];

/// Roles shown (unnumbered) when they have a name.
const MEANINGFUL: &[&str] = &[
    "heading",
    "img",
    "image",
    "alert",
    "dialog",
    "alertdialog",
    "form",
    "navigation",
    "main",
    "table",
    "row",
    "listitem",
    "status",
    "progressbar",
    "meter",
];

/// Roles whose options are listed under them (chosen with
/// `browser.select`), not numbered themselves.
const CHOOSERS: &[&str] = &["combobox", "listbox"];

/// The longest text line kept.
const MAX_TEXT: usize = 300;

/// Deepest indentation shown.
const MAX_INDENT: usize = 12;

/// Renders `nodes` (the first is the root) within about `max_bytes`.
pub(crate) fn render(nodes: &[Node], max_bytes: usize) -> Snapshot {
    let by_id: HashMap<&str, &Node> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut out = Render {
        by_id,
        text: String::new(),
        refs: Vec::new(),
        cut_lines: 0,
        max_bytes,
        last_text: String::new(),
    };
    if let Some(root) = nodes.first() {
        out.walk(root, 0, 0);
    }
    Snapshot {
        text: out.text,
        refs: out.refs,
        cut_lines: out.cut_lines,
    }
}

struct Render<'a> {
    by_id: HashMap<&'a str, &'a Node>,
    text: String,
    refs: Vec<Ref>,
    cut_lines: usize,
    max_bytes: usize,
    /// The last text line, so a name repeated by its text is said once.
    last_text: String,
}

impl<'a> Render<'a> {
    fn children(&self, node: &'a Node) -> Vec<&'a Node> {
        node.children
            .iter()
            .filter_map(|id| self.by_id.get(id.as_str()).copied())
            .collect()
    }

    /// Adds a line, unless the cap is reached; says whether it was added.
    fn line(&mut self, depth: usize, line: &str) -> bool {
        let indent = depth.min(MAX_INDENT) * 2;
        if self.text.len() + indent + line.len() + 1 > self.max_bytes {
            self.cut_lines += 1;
            return false;
        }
        self.text.extend(std::iter::repeat_n(' ', indent));
        self.text.push_str(line);
        self.text.push('\n');
        true
    }

    fn walk(&mut self, node: &'a Node, depth: usize, guard: usize) {
        // A tree deeper than any real page is a hostile one.
        if guard > 512 {
            return;
        }
        let role = node.role.as_str();
        let hidden = node.ignored
            || node.property("hidden") == Some("true")
            || matches!(role, "none" | "presentation" | "generic" | "InlineTextBox");
        if hidden {
            for child in self.children(node) {
                self.walk(child, depth, guard + 1);
            }
            return;
        }
        if role == "RootWebArea" || role == "WebArea" {
            for child in self.children(node) {
                self.walk(child, depth, guard + 1);
            }
            return;
        }
        if role == "StaticText" {
            let text = collapse(&node.name);
            if !text.is_empty() && text != self.last_text {
                self.line(depth, &shorten(&text, MAX_TEXT));
                self.last_text = text;
            }
            return;
        }
        let name = collapse(&node.name);
        if INTERACTIVE.contains(&role) {
            let mut line = String::new();
            let number = self.refs.len() + 1;
            let _ = write!(line, "[{number}] {role}");
            if !name.is_empty() {
                let _ = write!(line, " \"{}\"", shorten(&name, 100));
            }
            if let Some(value) = node.value.as_deref().map(collapse)
                && !value.is_empty()
                && value != name
            {
                let _ = write!(line, " value=\"{}\"", shorten(&value, 100));
            }
            flags(node, &mut line);
            if let Some(backend) = node.backend
                && self.line(depth, &line)
            {
                self.refs.push(Ref {
                    backend,
                    role: role.to_owned(),
                    name: name.clone(),
                });
                self.last_text = name;
                if CHOOSERS.contains(&role) {
                    self.options(node, depth + 1, guard + 1);
                }
            }
            // What an element contains is said by its name.
            return;
        }
        let mut shown = false;
        if MEANINGFUL.contains(&role) && !name.is_empty() {
            let mut line = format!("{role} \"{}\"", shorten(&name, MAX_TEXT));
            if let Some(level) = node.property("level") {
                let _ = write!(line, " (level {level})");
            }
            shown = self.line(depth, &line);
            self.last_text = name;
        }
        let depth = if shown { depth + 1 } else { depth };
        for child in self.children(node) {
            self.walk(child, depth, guard + 1);
        }
    }

    /// The options under a combobox or listbox, unnumbered.
    fn options(&mut self, node: &'a Node, depth: usize, guard: usize) {
        if guard > 512 {
            return;
        }
        for child in self.children(node) {
            if child.role == "option" {
                let mut line = format!("- option \"{}\"", shorten(&collapse(&child.name), 100));
                if child.property("selected") == Some("true") {
                    line.push_str(" (selected)");
                }
                self.line(depth, &line);
            } else {
                self.options(child, depth, guard + 1);
            }
        }
    }
}

/// ` (checked)`, ` (disabled)` and such.
fn flags(node: &Node, line: &mut String) {
    let mut said = Vec::new();
    match node.property("checked") {
        Some("true") => said.push("checked"),
        Some("mixed") => said.push("partly checked"),
        Some("false") if matches!(node.role.as_str(), "checkbox" | "radio" | "switch") => {
            said.push("unchecked");
        }
        _ => {}
    }
    for (property, word) in [
        ("disabled", "disabled"),
        ("required", "required"),
        ("focused", "focused"),
        ("readonly", "read-only"),
        ("selected", "selected"),
    ] {
        if node.property(property) == Some("true") {
            said.push(word);
        }
    }
    if node.property("expanded") == Some("true") {
        said.push("expanded");
    }
    if !said.is_empty() {
        let _ = write!(line, " ({})", said.join(", "));
    }
}

/// Whitespace runs as one space, trimmed.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, role: &str, name: &str, children: &[&str]) -> Node {
        Node {
            id: id.to_owned(),
            role: role.to_owned(),
            name: name.to_owned(),
            children: children.iter().map(|c| (*c).to_owned()).collect(),
            backend: id.parse().ok(),
            ..Node::default()
        }
    }

    fn tree() -> Vec<Node> {
        let mut nodes = vec![
            node("1", "RootWebArea", "Shop", &["2", "3", "4", "9"]),
            node("2", "heading", "Order a shirt", &["20"]),
            node("20", "StaticText", "Order a shirt", &[]),
            node("3", "generic", "", &["30", "31"]),
            node("30", "StaticText", "  Price:\n 12.50 EUR ", &[]),
            node("31", "textbox", "Name", &[]),
            node("4", "combobox", "Size", &["40"]),
            node("40", "MenuListPopup", "", &["41", "42"]),
            node("41", "option", "Small", &[]),
            node("42", "option", "Large", &[]),
            node("9", "button", "Send", &["90"]),
            node("90", "StaticText", "Send", &[]),
        ];
        nodes[1].properties.push(("level".into(), "1".into()));
        nodes[5].value = Some("Ada".into());
        nodes[5].properties.push(("required".into(), "true".into()));
        nodes[6].value = Some("Small".into());
        nodes[8].properties.push(("selected".into(), "true".into()));
        nodes
    }

    #[test]
    fn numbers_what_one_acts_on_and_keeps_the_text_around_it() {
        let snapshot = render(&tree(), 10_000);
        assert_eq!(
            snapshot.text,
            "heading \"Order a shirt\" (level 1)\n\
             Price: 12.50 EUR\n\
             [1] textbox \"Name\" value=\"Ada\" (required)\n\
             [2] combobox \"Size\" value=\"Small\"\n\
             \x20 - option \"Small\" (selected)\n\
             \x20 - option \"Large\"\n\
             [3] button \"Send\"\n"
        );
        assert_eq!(
            snapshot.refs.iter().map(Ref::describe).collect::<Vec<_>>(),
            ["textbox \"Name\"", "combobox \"Size\"", "button \"Send\""]
        );
        assert_eq!(snapshot.refs[2].backend, 9);
        assert_eq!(snapshot.cut_lines, 0);
    }

    #[test]
    fn stops_at_the_cap_and_counts_what_it_left_out() {
        let snapshot = render(&tree(), 60);
        assert_eq!(
            snapshot.text,
            "heading \"Order a shirt\" (level 1)\nPrice: 12.50 EUR\n"
        );
        assert!(snapshot.refs.is_empty());
        assert_eq!(snapshot.cut_lines, 3);
    }

    #[test]
    fn a_cycle_or_a_missing_child_does_not_hang_or_panic() {
        let nodes = vec![
            node("1", "RootWebArea", "", &["2", "404"]),
            node("2", "generic", "", &["1"]),
        ];
        assert_eq!(render(&nodes, 1000).text, "");
        assert_eq!(render(&[], 1000).text, "");
    }
}
