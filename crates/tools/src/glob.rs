//! Tool name globs (`*`, `?`), as the policy and the hooks match them.
//! `google.<glob>` also stands for each Google family (`google.*` matches
//! `gmail.send` and `calendar.list`).

use std::fmt;

use flynn_protocol::GOOGLE_TOOL_FAMILIES;
use wildmatch::WildMatch;

/// A compiled glob that remembers how it was written.
#[derive(Clone)]
pub(crate) struct Glob {
    text: String,
    matcher: WildMatch,
    /// For `google.<rest>`: `<rest>`, matched after a Google family.
    google: Option<WildMatch>,
}

impl Glob {
    pub(crate) fn new(text: &str) -> Self {
        Glob {
            text: text.to_owned(),
            matcher: WildMatch::new(text),
            google: text.strip_prefix("google.").map(WildMatch::new),
        }
    }

    pub(crate) fn matches(&self, name: &str) -> bool {
        self.matcher.matches(name)
            || self.google.as_ref().is_some_and(|rest| {
                name.split_once('.').is_some_and(|(family, tool)| {
                    GOOGLE_TOOL_FAMILIES.contains(&family) && rest.matches(tool)
                })
            })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

/// Whether any of `globs` matches `name`.
pub(crate) fn any_matches(globs: &[Glob], name: &str) -> bool {
    globs.iter().any(|glob| glob.matches(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_spans_dots_and_question_mark_is_one_character() {
        let matched = |glob: &str| {
            ["file.read", "file.write", "shell.exec", "web.fetch"]
                .into_iter()
                .filter(|name| Glob::new(glob).matches(name))
                .collect::<Vec<_>>()
        };
        assert_eq!(matched("file.*"), ["file.read", "file.write"]);
        assert_eq!(
            matched("*"),
            ["file.read", "file.write", "shell.exec", "web.fetch"]
        );
        assert_eq!(matched("*.e*"), ["shell.exec"]);
        assert_eq!(matched("web.fetc?"), ["web.fetch"]);
        assert_eq!(matched("file"), Vec::<&str>::new());
        assert_eq!(matched("File.read"), Vec::<&str>::new());
    }

    #[test]
    fn google_stands_for_each_google_family() {
        let names = [
            "gmail.send",
            "calendar.list",
            "drive.read",
            "web.fetch",
            "google",
        ];
        let matched = |glob: &str| {
            names
                .into_iter()
                .filter(|name| Glob::new(glob).matches(name))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            matched("google.*"),
            ["gmail.send", "calendar.list", "drive.read"]
        );
        assert_eq!(matched("google.list"), ["calendar.list"]);
        assert_eq!(matched("gmail.*"), ["gmail.send"]);
    }
}
