//! Where a session's content came from. Output of tools that bring in the
//! outside world (web pages, search results, MCP servers) is wrapped as
//! untrusted, and from then on the session is *tainted* until the owner
//! clears it (`/trust`) or resets it: a page must not be able to drive the
//! agent's hands, read the owner's data or send it out. See
//! [`crate::taint`] for what a tainted session may still do.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use regex::Regex;

/// What one turn has read from outside Flynn, and what it may therefore
/// still do without a person. Shared by the turn's calls (and by the
/// sub-agents it starts, so their taint is the turn's too).
#[derive(Debug, Default)]
pub struct Provenance {
    /// What tainted the session before this turn, if anything.
    inherited: Option<String>,
    /// The first tool whose untrusted output entered this turn.
    first_source: OnceLock<String>,
    /// The message the turn answers: URLs and paths the owner names here
    /// may be used verbatim while tainted.
    owner_message: String,
    /// URLs in the untrusted content fetched this turn (links may be
    /// followed), and files this turn wrote (they may be read back).
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    urls: BTreeSet<String>,
    own_paths: BTreeSet<PathBuf>,
}

/// `http(s)://` URLs in text, up to whitespace, quotes or closing brackets.
static URL: std::sync::LazyLock<Option<Regex>> =
    std::sync::LazyLock::new(|| Regex::new(r#"https?://[^\s"'<>()\[\]{}`]+"#).ok());

impl Provenance {
    /// Untainted, for a call outside any turn: nothing inherited, no
    /// owner message.
    pub fn new() -> Self {
        Self::default()
    }

    /// For one turn answering `owner_message`, in a session that
    /// `inherited` says is tainted already (or not).
    pub fn for_turn(owner_message: impl Into<String>, inherited: Option<String>) -> Self {
        Provenance {
            inherited,
            owner_message: owner_message.into(),
            ..Self::default()
        }
    }

    /// Records that `tool`'s untrusted output (`content`) is now in the
    /// turn; links in it may be followed from now on.
    pub fn mark_untrusted(&self, tool: &str, content: &str) {
        // Only the first source is kept; later ones change nothing.
        let _ = self.first_source.set(tool.to_owned());
        let mut seen = lock(&self.seen);
        seen.urls.extend(urls(content));
    }

    /// The tool that first brought untrusted content into this turn, if
    /// any: what the session's taint records when the turn ends.
    pub fn new_source(&self) -> Option<&str> {
        self.first_source.get().map(String::as_str)
    }

    /// What taints the session, from an earlier turn or this one.
    pub fn untrusted_source(&self) -> Option<&str> {
        self.inherited.as_deref().or_else(|| self.new_source())
    }

    /// Records that this turn wrote `path` (canonical): reading it back
    /// is the turn's own data.
    pub fn record_written(&self, path: &Path) {
        lock(&self.seen).own_paths.insert(path.to_path_buf());
    }

    /// Whether this turn wrote `path`.
    pub fn wrote(&self, path: &Path) -> bool {
        lock(&self.seen).own_paths.contains(path)
    }

    /// Whether the owner's message says `text` word for word.
    pub fn named_by_owner(&self, text: &str) -> bool {
        let text = text.trim();
        !text.is_empty() && self.owner_message.contains(text)
    }

    /// Whether `url` appears verbatim in the owner's message or in the
    /// untrusted content already fetched (following a link is fine;
    /// composing a URL is how data leaves).
    pub fn knows_url(&self, url: &str) -> bool {
        self.named_by_owner(url) || lock(&self.seen).urls.contains(url.trim())
    }

    /// Whether `url`'s host appears in the owner's message or among the
    /// URLs already fetched.
    pub fn knows_host(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let owner = urls(&self.owner_message);
        let seen = lock(&self.seen);
        owner
            .iter()
            .chain(seen.urls.iter())
            .filter_map(|url| host_of(url))
            .any(|known| known == host)
    }
}

/// The URLs in `text`, trailing punctuation trimmed.
pub(crate) fn urls(text: &str) -> Vec<String> {
    let Some(pattern) = URL.as_ref() else {
        return Vec::new();
    };
    pattern
        .find_iter(text)
        .map(|m| {
            m.as_str()
                .trim_end_matches(['.', ',', ';', ':', '!', '?'])
                .to_owned()
        })
        .collect()
}

/// The lower-case host of an `http(s)://` URL.
pub(crate) fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host = if host.starts_with('[') {
        host.split(']').next().map(|h| format!("{h}]"))?
    } else {
        host.split(':').next()?.to_owned()
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    flynn_protocol::sync::lock(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_source_is_kept_and_an_inherited_taint_counts() {
        let provenance = Provenance::new();
        assert_eq!(provenance.untrusted_source(), None);
        provenance.mark_untrusted("web.fetch", "");
        provenance.mark_untrusted("web.search", "");
        assert_eq!(provenance.untrusted_source(), Some("web.fetch"));
        assert_eq!(provenance.new_source(), Some("web.fetch"));

        let later = Provenance::for_turn("ok", Some("web.fetch in turn 1".into()));
        assert_eq!(later.untrusted_source(), Some("web.fetch in turn 1"));
        assert_eq!(later.new_source(), None);
    }

    #[test]
    fn urls_from_the_owner_and_from_fetched_pages_are_known_composed_ones_not() {
        let provenance = Provenance::for_turn("Summarise https://news.example/today.", None);
        provenance.mark_untrusted(
            "web.fetch",
            "See [more](https://news.example/more?page=2) and https://other.example/a.",
        );
        assert!(provenance.knows_url("https://news.example/today"));
        assert!(provenance.knows_url("https://news.example/more?page=2"));
        assert!(provenance.knows_url("https://other.example/a"));
        assert!(!provenance.knows_url("https://other.example/a?d=c2VjcmV0"));
        assert!(!provenance.knows_url("https://attacker.example/"));
        assert!(provenance.knows_host("other.example"));
        assert!(!provenance.knows_host("attacker.example"));
    }

    #[test]
    fn hosts_are_read_from_urls() {
        assert_eq!(
            host_of("https://User@Example.COM:8080/x?y").as_deref(),
            Some("example.com")
        );
        assert_eq!(host_of("http://[::1]:80/").as_deref(), Some("[::1]"));
        assert_eq!(host_of("ftp://x"), None);
    }
}
