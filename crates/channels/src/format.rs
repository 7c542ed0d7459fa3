//! The model's markdown in each platform's own markup: Telegram's HTML
//! mode (only `&`, `<` and `>` need escaping, unlike MarkdownV2's 18
//! characters), Slack's mrkdwn, and Discord's markdown with mass mentions
//! defused. Text that is not markup is escaped, so nothing a model writes
//! becomes markup it did not mean.

/// One inline piece of markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Inline {
    Text(String),
    Code(String),
    Bold(Vec<Inline>),
    Italic(Vec<Inline>),
    Strike(Vec<Inline>),
    Link { text: Vec<Inline>, url: String },
}

/// Parses inline markdown: `code`, **bold**, __bold__, *italic*,
/// _italic_, ~~strike~~, [text](url). Unclosed markers stay text.
fn inline(text: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut plain = String::new();
    let mut rest = text;
    let flush = |plain: &mut String, out: &mut Vec<Inline>| {
        if !plain.is_empty() {
            out.push(Inline::Text(std::mem::take(plain)));
        }
    };
    let mut prev: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        // snake_case and 2*3 are not emphasis: `_` inside a word never is.
        let in_word = c == '_' && prev.is_some_and(char::is_alphanumeric);
        let parsed = match c {
            _ if in_word => None,
            '`' => rest[1..]
                .find('`')
                .map(|end| (Inline::Code(rest[1..1 + end].to_owned()), end + 2)),
            '*' | '_' | '~' => {
                let double = format!("{c}{c}");
                if rest.starts_with(&double) {
                    rest[2..].find(&double).filter(|end| *end > 0).map(|end| {
                        let inner = inline(&rest[2..2 + end]);
                        let node = match c {
                            '~' => Inline::Strike(inner),
                            _ => Inline::Bold(inner),
                        };
                        (node, end + 4)
                    })
                } else if c != '~' {
                    let closing = rest[1..]
                        .find(c)
                        .filter(|end| *end > 0 && !rest[1..].starts_with(char::is_whitespace));
                    closing.map(|end| (Inline::Italic(inline(&rest[1..1 + end])), end + 2))
                } else {
                    None
                }
            }
            '[' => link(rest),
            _ => None,
        };
        match parsed {
            Some((node, used)) => {
                flush(&mut plain, &mut out);
                out.push(node);
                rest = &rest[used..];
            }
            None => {
                plain.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        prev = Some(c);
    }
    flush(&mut plain, &mut out);
    out
}

/// `[text](url)` at the start of `rest`, with an http(s) or mailto URL.
fn link(rest: &str) -> Option<(Inline, usize)> {
    let close = rest.find("](")?;
    let end = rest[close + 2..].find(')')? + close + 2;
    let url = &rest[close + 2..end];
    let safe =
        url.starts_with("https://") || url.starts_with("http://") || url.starts_with("mailto:");
    (safe && !url.contains(char::is_whitespace)).then(|| {
        (
            Inline::Link {
                text: inline(&rest[1..close]),
                url: url.to_owned(),
            },
            end + 1,
        )
    })
}

/// A line of the text: in a code block or not.
enum Block<'a> {
    Code { lang: &'a str, body: Vec<&'a str> },
    Line(&'a str),
}

fn blocks(text: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            let mut body = Vec::new();
            for inner in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                body.push(inner);
            }
            out.push(Block::Code {
                lang: lang.trim(),
                body,
            });
        } else {
            out.push(Block::Line(line));
        }
    }
    out
}

fn heading(line: &str) -> Option<&str> {
    let trimmed = line.trim_start_matches('#');
    (trimmed.len() < line.len() && line.len() - trimmed.len() <= 6 && trimmed.starts_with(' '))
        .then(|| trimmed.trim())
}

fn bullet(line: &str) -> Option<(&str, &str)> {
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|m| trimmed.strip_prefix(m))
        .map(|item| (indent, item))
}

// ------------------------------------------------------------- Telegram

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn telegram_inline(nodes: &[Inline], out: &mut String) {
    for node in nodes {
        match node {
            Inline::Text(text) => out.push_str(&html_escape(text)),
            Inline::Code(code) => {
                out.push_str("<code>");
                out.push_str(&html_escape(code));
                out.push_str("</code>");
            }
            Inline::Bold(inner) => wrap_html("b", inner, out),
            Inline::Italic(inner) => wrap_html("i", inner, out),
            Inline::Strike(inner) => wrap_html("s", inner, out),
            Inline::Link { text, url } => {
                out.push_str("<a href=\"");
                out.push_str(&html_escape(url).replace('"', "&quot;"));
                out.push_str("\">");
                telegram_inline(text, out);
                out.push_str("</a>");
            }
        }
    }
}

fn wrap_html(tag: &str, inner: &[Inline], out: &mut String) {
    out.push('<');
    out.push_str(tag);
    out.push('>');
    telegram_inline(inner, out);
    out.push_str("</");
    out.push_str(tag);
    out.push('>');
}

/// Markdown as Telegram HTML (`parse_mode: "HTML"`).
pub fn telegram_html(markdown: &str) -> String {
    let mut lines = Vec::new();
    for block in blocks(markdown) {
        match block {
            Block::Code { lang, body } => {
                let class = if lang.is_empty() {
                    String::new()
                } else {
                    format!(" class=\"language-{}\"", html_escape(lang).replace('"', ""))
                };
                lines.push(format!(
                    "<pre><code{class}>{}</code></pre>",
                    html_escape(&body.join("\n"))
                ));
            }
            Block::Line(line) => {
                let mut out = String::new();
                if let Some(title) = heading(line) {
                    wrap_html("b", &inline(title), &mut out);
                } else if let Some((indent, item)) = bullet(line) {
                    out.push_str(indent);
                    out.push_str("• ");
                    telegram_inline(&inline(item), &mut out);
                } else {
                    telegram_inline(&inline(line), &mut out);
                }
                lines.push(out);
            }
        }
    }
    lines.join("\n")
}

// ---------------------------------------------------------------- Slack

/// Slack's three escapes (`&`, `<`, `>`).
fn slack_escape(text: &str) -> String {
    html_escape(text)
}

fn slack_inline(nodes: &[Inline], out: &mut String) {
    for node in nodes {
        match node {
            Inline::Text(text) => out.push_str(&slack_escape(text)),
            Inline::Code(code) => {
                out.push('`');
                out.push_str(&slack_escape(code));
                out.push('`');
            }
            Inline::Bold(inner) => wrap_marks('*', inner, out),
            Inline::Italic(inner) => wrap_marks('_', inner, out),
            Inline::Strike(inner) => wrap_marks('~', inner, out),
            Inline::Link { text, url } => {
                out.push('<');
                out.push_str(&slack_escape(url).replace('|', "%7C"));
                out.push('|');
                let mut label = String::new();
                slack_inline(text, &mut label);
                out.push_str(&label.replace('|', "¦"));
                out.push('>');
            }
        }
    }
}

fn wrap_marks(mark: char, inner: &[Inline], out: &mut String) {
    out.push(mark);
    slack_inline(inner, out);
    out.push(mark);
}

/// Markdown as Slack mrkdwn.
pub fn slack_mrkdwn(markdown: &str) -> String {
    let mut lines = Vec::new();
    for block in blocks(markdown) {
        match block {
            Block::Code { body, .. } => {
                lines.push(format!("```\n{}\n```", slack_escape(&body.join("\n"))));
            }
            Block::Line(line) => {
                let mut out = String::new();
                if let Some(title) = heading(line) {
                    wrap_marks('*', &inline(title), &mut out);
                } else if let Some((indent, item)) = bullet(line) {
                    out.push_str(indent);
                    out.push_str("• ");
                    slack_inline(&inline(item), &mut out);
                } else {
                    slack_inline(&inline(line), &mut out);
                }
                lines.push(out);
            }
        }
    }
    lines.join("\n")
}

// -------------------------------------------------------------- Discord

/// Markdown for Discord, which renders it natively: unchanged, except that
/// `@everyone`, `@here` and role or user mentions a model might write are
/// defused with a zero-width space so they notify nobody.
pub fn discord(markdown: &str) -> String {
    markdown
        .replace("@everyone", "@\u{200b}everyone")
        .replace("@here", "@\u{200b}here")
        .replace("<@", "<\u{200b}@")
}

// ------------------------------------------------------------- WhatsApp

/// Which of WhatsApp's marks are open around a piece of text: a mark is
/// written once, so `**bold with *more* inside**` does not close early.
#[derive(Clone, Copy, Default)]
struct WhatsAppMarks {
    bold: bool,
    italic: bool,
    strike: bool,
}

fn whatsapp_inline(nodes: &[Inline], marks: WhatsAppMarks, out: &mut String) {
    for node in nodes {
        match node {
            Inline::Text(text) => out.push_str(text),
            Inline::Code(code) => {
                out.push('`');
                out.push_str(code);
                out.push('`');
            }
            Inline::Bold(inner) => {
                let mark = (!marks.bold).then_some('*');
                let marks = WhatsAppMarks {
                    bold: true,
                    ..marks
                };
                whatsapp_wrap(mark, inner, marks, out);
            }
            Inline::Italic(inner) => {
                let mark = (!marks.italic).then_some('_');
                let marks = WhatsAppMarks {
                    italic: true,
                    ..marks
                };
                whatsapp_wrap(mark, inner, marks, out);
            }
            Inline::Strike(inner) => {
                let mark = (!marks.strike).then_some('~');
                let marks = WhatsAppMarks {
                    strike: true,
                    ..marks
                };
                whatsapp_wrap(mark, inner, marks, out);
            }
            Inline::Link { text, url } => {
                // WhatsApp has no link markup; it links bare URLs itself.
                let mut label = String::new();
                whatsapp_inline(text, marks, &mut label);
                if label.is_empty() || label == *url {
                    out.push_str(url);
                } else {
                    out.push_str(&label);
                    out.push_str(" (");
                    out.push_str(url);
                    out.push(')');
                }
            }
        }
    }
}

fn whatsapp_wrap(mark: Option<char>, inner: &[Inline], marks: WhatsAppMarks, out: &mut String) {
    out.extend(mark);
    whatsapp_inline(inner, marks, out);
    out.extend(mark);
}

/// Markdown as WhatsApp formatting: `*bold*`, `_italic_`, `~strike~`,
/// ```` ```monospace``` ```` blocks, `` `inline code` ``, `- ` lists and
/// `> ` quotes. Headings become bold lines and links `text (url)`.
/// WhatsApp has no escape character, so text outside markup is left as
/// written.
pub fn whatsapp(markdown: &str) -> String {
    let mut lines = Vec::new();
    for block in blocks(markdown) {
        match block {
            Block::Code { body, .. } => {
                // Monospace runs from the opening to the closing backticks,
                // line breaks included; an empty block shows nothing.
                let body = body.join("\n");
                if !body.trim().is_empty() {
                    lines.push(format!("```{body}```"));
                }
            }
            Block::Line(line) => {
                let mut out = String::new();
                let plain = WhatsAppMarks::default();
                if let Some(title) = heading(line) {
                    whatsapp_wrap(
                        Some('*'),
                        &inline(title),
                        WhatsAppMarks {
                            bold: true,
                            ..plain
                        },
                        &mut out,
                    );
                } else if let Some((indent, item)) = bullet(line) {
                    out.push_str(indent);
                    out.push_str("- ");
                    whatsapp_inline(&inline(item), plain, &mut out);
                } else if let Some(quoted) = line.trim_start().strip_prefix('>') {
                    out.push_str("> ");
                    whatsapp_inline(&inline(quoted.trim_start()), plain, &mut out);
                } else {
                    whatsapp_inline(&inline(line), plain, &mut out);
                }
                lines.push(out);
            }
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn plain_text_passes_every_formatter_unchanged(
            text in "[a-zA-Z0-9é😀 ,?!\n]{0,300}",
        ) {
            let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
            for (name, format) in [
                ("telegram", telegram_html as fn(&str) -> String),
                ("slack", slack_mrkdwn),
                ("discord", discord),
                ("whatsapp", whatsapp),
            ] {
                let out = format(&text);
                prop_assert_eq!(words(&out), words(&text), "{}: {:?}", name, out);
            }
        }
    }

    const SAMPLE: &str = "# Plan\nUse **bold**, *italic*, ~~old~~ and `a<b>&c`.\n- see [docs](https://example.com/a?b=1&c=2)\n```rust\nif a < b && c > d {}\n```";

    #[test]
    fn telegram_gets_html_with_everything_else_escaped() {
        assert_eq!(
            telegram_html(SAMPLE),
            "<b>Plan</b>\nUse <b>bold</b>, <i>italic</i>, <s>old</s> and <code>a&lt;b&gt;&amp;c</code>.\n• see <a href=\"https://example.com/a?b=1&amp;c=2\">docs</a>\n<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c &gt; d {}</code></pre>"
        );
        // A model's raw HTML is text.
        assert_eq!(
            telegram_html("<b onclick=x>hi</b> & bye"),
            "&lt;b onclick=x&gt;hi&lt;/b&gt; &amp; bye"
        );
        // Only web and mail links become links.
        assert_eq!(
            telegram_html("[x](javascript:alert(1))"),
            "[x](javascript:alert(1))"
        );
    }

    #[test]
    fn slack_gets_mrkdwn() {
        assert_eq!(
            slack_mrkdwn(SAMPLE),
            "*Plan*\nUse *bold*, _italic_, ~old~ and `a&lt;b&gt;&amp;c`.\n• see <https://example.com/a?b=1&amp;c=2|docs>\n```\nif a &lt; b &amp;&amp; c &gt; d {}\n```"
        );
        assert_eq!(slack_mrkdwn("<!channel> hi"), "&lt;!channel&gt; hi");
    }

    #[test]
    fn discord_keeps_markdown_and_defuses_mass_mentions() {
        assert_eq!(
            discord("**hi** @everyone and @here, <@123>"),
            "**hi** @\u{200b}everyone and @\u{200b}here, <\u{200b}@123>"
        );
    }

    #[test]
    fn unclosed_markers_and_lone_symbols_stay_text() {
        assert_eq!(
            telegram_html("2 * 3 = 6, snake_case_name, **open"),
            "2 * 3 = 6, snake_case_name, **open"
        );
        assert_eq!(telegram_html("_lean_ in"), "<i>lean</i> in");
        assert_eq!(telegram_html("price: 5 < 6"), "price: 5 &lt; 6");
    }

    #[test]
    fn whatsapp_gets_its_own_marks() {
        assert_eq!(
            whatsapp(SAMPLE),
            "*Plan*\nUse *bold*, _italic_, ~old~ and `a<b>&c`.\n- see docs (https://example.com/a?b=1&c=2)\n```if a < b && c > d {}```"
        );
        // Quotes, nested and repeated marks, bare links, numbered lists.
        assert_eq!(
            whatsapp(
                "> **all *of* it**\n1. [https://x.org](https://x.org)\n  * __deep__\n# **Title**"
            ),
            "> *all _of_ it*\n1. https://x.org\n  - *deep*\n*Title*"
        );
        // A block keeps its lines inside one pair of backticks; an empty
        // one disappears; unclosed markers stay text.
        assert_eq!(
            whatsapp("```sh\nls\ncd /\n```\n```\n```\n2 * 3, snake_case"),
            "```ls\ncd /```\n2 * 3, snake_case"
        );
    }
}
