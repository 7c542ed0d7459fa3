//! Readability extraction + markdown of a generated ~1 MB article page
//! (navigation, sidebar, scripts, comments and a long article), the work
//! `web.fetch` does for every HTML page. Target: under 50 ms.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use flynn_tools::builtin::web::{Format, extract};

const WORDS: &[&str] = &[
    "starter",
    "flour",
    "water",
    "culture",
    "yeast",
    "bacteria",
    "dough",
    "crumb",
    "crust",
    "oven",
    "temperature",
    "ferment",
    "loaf",
    "bread",
    "salt",
    "hydration",
    "proof",
    "shape",
    "bake",
    "steam",
    "the",
    "a",
    "of",
    "and",
    "with",
    "while",
    "because",
    "every",
    "slowly",
    "gently",
    "overnight",
    "morning",
    "rises",
    "folds",
    "rests",
    "tastes",
    "keeps",
    "needs",
];

/// A deterministic sentence generator (a linear congruential sequence).
struct Words(u64);

impl Words {
    fn sentence(&mut self, len: usize) -> String {
        let mut out = String::new();
        for i in 0..len {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let word = WORDS[(self.0 >> 33) as usize % WORDS.len()];
            if i > 0 {
                out.push(' ');
            }
            out.push_str(word);
        }
        out.push('.');
        out
    }
}

/// A news-site-like page of about `target` bytes.
fn page(target: usize) -> String {
    let mut words = Words(42);
    let mut html = String::from(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>The Long Guide to Sourdough | The Bread Blog</title>\
         <style>body{font-family:serif}.nav a{color:red}.sidebar{float:right}</style>\
         <script>window.dataLayer=[];function track(e){dataLayer.push(e)}</script>\
         </head><body><header class=\"site-header\"><nav class=\"nav\">",
    );
    for i in 0..40 {
        let _ = write!(html, "<a href=\"/section/{i}\">Section {i}</a> ");
    }
    html.push_str("</nav></header><div id=\"sidebar\" class=\"sidebar\"><h3>Popular</h3><ul>");
    for i in 0..200 {
        let _ = write!(
            html,
            "<li><a href=\"/p/{i}\">{}</a></li>",
            words.sentence(6)
        );
    }
    html.push_str("</ul></div><main><article><h1>The Long Guide to Sourdough</h1>");
    let mut section = 0;
    // The article takes most of the page; comments and footer follow.
    while html.len() < target * 8 / 10 {
        section += 1;
        let _ = write!(html, "<h2>Part {section}</h2>");
        for _ in 0..6 {
            let _ = write!(
                html,
                "<p>{} <a href=\"/guides/{section}\">{}</a> {} <em>{}</em> {}</p>",
                words.sentence(30),
                words.sentence(3),
                words.sentence(25),
                words.sentence(4),
                words.sentence(20)
            );
        }
        html.push_str("<ul>");
        for _ in 0..4 {
            let _ = write!(html, "<li>{}</li>", words.sentence(10));
        }
        let _ = write!(
            html,
            "</ul><pre><code>ratio = {section} : 1 : 1</code></pre>"
        );
    }
    html.push_str("</article></main><section class=\"comments\"><h3>Comments</h3>");
    while html.len() < target * 97 / 100 {
        let _ = write!(
            html,
            "<div class=\"comment\"><span class=\"author\">reader</span><p>{}</p>\
             <a class=\"reply\" href=\"#\">Reply</a></div>",
            words.sentence(15)
        );
    }
    html.push_str("</section><footer class=\"site-footer\"><p>© The Bread Blog</p><ul>");
    while html.len() < target {
        html.push_str("<li><a href=\"/legal\">Legal</a></li>");
    }
    html.push_str("</ul></footer><script src=\"/app.js\"></script></body></html>");
    html
}

fn bench(c: &mut Criterion) {
    let html = page(1024 * 1024);
    let article = extract(&html, "https://bread.example/guide", Format::Markdown);
    // The benchmark measures a real extraction: the article, not the rest.
    assert!(
        article.content.starts_with("## Part 1\n"),
        "{}",
        &article.content[..200]
    );
    assert!(!article.content.contains("Reply") && !article.content.contains("Section 1"));
    let mut group = c.benchmark_group("web_fetch_extract");
    group.sample_size(20);
    group.bench_function("markdown_1mb_article", |b| {
        b.iter(|| {
            extract(
                black_box(&html),
                "https://bread.example/guide",
                Format::Markdown,
            )
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
