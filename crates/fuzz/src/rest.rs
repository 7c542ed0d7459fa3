//! The other parsers of untrusted input: web pages, the gateway's
//! requests, session keys and memory namespaces, skills, cron, memory
//! files and stored histories.

use std::path::Path;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use flynn_automation::{Heartbeat, Schedule};
use flynn_memory::{Namespace, Scope};
use flynn_protocol::{ContentBlock, Message, Role, SessionKey};
#[cfg(feature = "gateway")]
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::{fields, text};

/// `kind body`: a page reduced to its article (markdown or text), a
/// body decoded as `web.fetch` decodes it, DuckDuckGo's result page,
/// a snippet made plain.
pub fn web(data: &[u8]) {
    use flynn_tools::builtin::web::{Format, extract, fuzzing};
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    match kind % 4 {
        0 => {
            let format = if kind & 4 == 0 {
                Format::Markdown
            } else {
                Format::Text
            };
            let _ = extract(&text(body), "https://example.com/a/b.html", format);
        }
        1 => {
            let types = [
                None,
                Some("text/html"),
                Some("text/html; charset=iso-8859-1"),
                Some("text/plain; charset=shift_jis"),
                Some("application/json"),
                Some("application/octet-stream"),
            ];
            let content_type = types[usize::from(kind >> 2) % types.len()];
            let _ = fuzzing::read(body, content_type, kind & 0x80 != 0);
        }
        2 => {
            let _ = fuzzing::duckduckgo(&text(body));
        }
        _ => {
            let _ = fuzzing::plain(&text(body));
        }
    }
}

#[cfg(feature = "gateway")]
/// `authorization NUL query NUL origin NUL host NUL params`: the token a
/// request presents, whether its origin is trusted, and JSON-RPC
/// parameters read.
pub fn gateway(data: &[u8]) {
    use flynn_gateway::fuzzing;
    let [authorization, query, origin, host, params] = fields(data, 5)[..] else {
        return;
    };
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("authorization", authorization),
        ("origin", origin),
        ("host", host),
        ("x-forwarded-host", host),
    ] {
        if let (Ok(name), Ok(value)) = (HeaderName::from_str(name), HeaderValue::from_bytes(value))
        {
            headers.insert(name, value);
        }
    }
    let query = text(query);
    for upgrade in [false, true] {
        let _ = fuzzing::presented_token(&headers, Some(&query), upgrade);
    }
    let _ = fuzzing::percent_decode(&query);
    let allowed = vec!["https://flynn.example".to_owned()];
    for tailscale in [false, true] {
        let _ = fuzzing::origin_allowed(&headers, &allowed, tailscale);
    }
    let _ = fuzzing::params(&text(params));
}

/// A session key and a memory namespace: a session's namespace stays
/// under `sessions/` and is itself valid; a namespace that parses has no
/// `..` or `.` segment.
pub fn session_keys(data: &[u8]) {
    let text = text(data);
    if let Ok(key) = SessionKey::from_str(&text) {
        let namespace = Namespace::of_session(&key);
        let name = namespace.as_str();
        let file = name
            .strip_prefix("sessions/")
            .unwrap_or_else(|| panic!("{name} is not under sessions/"));
        assert!(!file.contains('/'), "{name} nests under sessions/");
        assert!(Namespace::parse(name).is_ok(), "{name} does not parse back");
        let scope = Scope {
            session: Some(key),
            today: NaiveDate::from_ymd_opt(2026, 11, 26).unwrap_or_default(),
        };
        let _ = Namespace::resolve(&text, &scope);
    }
    if let Ok(namespace) = Namespace::parse(&text) {
        assert!(
            namespace
                .as_str()
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."),
            "{text:?} parsed"
        );
    }
    let scope = Scope {
        session: None,
        today: NaiveDate::from_ymd_opt(2026, 11, 26).unwrap_or_default(),
    };
    if let Ok(namespace) = Namespace::resolve(&text, &scope) {
        assert!(
            !namespace.as_str().split('/').any(|s| s == ".."),
            "{text:?} resolved"
        );
    }
}

/// A skill's `manifest.json`.
pub fn skill_manifest(data: &[u8]) {
    let _ = flynn_skills::manifest::Manifest::parse(&text(data), Path::new("manifest.json"));
}

/// `flag archive`: a skill archive (gzipped here when the flag's low
/// bit is set, so the fuzzer works on the tar) unpacked into a staging
/// directory: nothing lands outside it, and it holds no link.
pub fn skill_archive(data: &[u8]) {
    use std::io::Write;
    let Some((&flag, body)) = data.split_first() else {
        return;
    };
    let base = Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    };
    let Ok(dir) = dir else {
        return;
    };
    let archive = dir.path().join("skill.tar.gz");
    let bytes = if flag & 1 == 1 {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if encoder.write_all(body).is_err() {
            return;
        }
        match encoder.finish() {
            Ok(bytes) => bytes,
            Err(_) => return,
        }
    } else {
        body.to_vec()
    };
    if std::fs::write(&archive, bytes).is_err() {
        return;
    }
    let stage = dir.path().join("stage");
    let _ = flynn_skills::fuzzing::unpack(&archive, &stage);
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        names.iter().all(|n| n == "skill.tar.gz" || n == "stage"),
        "the archive wrote beside the staging directory: {names:?}"
    );
    let mut pending = vec![stage];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let kind = entry.file_type().ok();
            assert!(
                !kind.is_some_and(|k| k.is_symlink()),
                "a link in the staging directory: {}",
                entry.path().display()
            );
            if kind.is_some_and(|k| k.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
}

/// `seconds(4) tz NUL expression NUL HEARTBEAT.md`: a cron schedule and
/// its next runs (each later than the last), and a heartbeat file
/// parsed and checked.
pub fn cron(data: &[u8]) {
    let [a, b, c, d, ref rest @ ..] = data[..] else {
        return;
    };
    let [tz, expr, heartbeat] = fields(rest, 3)[..] else {
        return;
    };
    let base = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default();
    let after: DateTime<Utc> =
        base + chrono::Duration::seconds(i64::from(u32::from_le_bytes([a, b, c, d])));
    let tz = text(tz);
    if let Ok(schedule) = Schedule::parse(&text(expr), &tz) {
        // `upcoming` is `next_after` from `after`, then from each run: the
        // first run is `next_after(after)` (asking for it again doubled
        // the cost of an expression that never matches, whose search
        // walks the calendar for centuries).
        let runs = schedule.upcoming(after, 4);
        if let Some(next) = runs.first() {
            assert!(*next > after, "{next} is not after {after}");
        }
        assert!(
            runs.windows(2).all(|w| w[0] < w[1]),
            "{runs:?} are not in order"
        );
    }
    let contents = text(heartbeat);
    let _ = Heartbeat::parse(&contents);
    if let Some(heartbeat) = Heartbeat::new(&tz).or_else(|| Heartbeat::new("UTC")) {
        let _ = heartbeat.check(&contents, after, Some(base));
    }
}

/// A memory file cut into chunks: lines in order, within the file.
pub fn memory_chunk(data: &[u8]) {
    let text = text(data);
    let lines = text.lines().count().max(1) as u32;
    let mut last = 0;
    for chunk in flynn_memory::chunk::chunk(&text) {
        assert!(
            chunk.start_line >= 1 && chunk.start_line <= chunk.end_line,
            "{chunk:?}"
        );
        assert!(chunk.end_line <= lines, "{chunk:?} is past line {lines}");
        assert!(
            // A line too long for one chunk is cut: its pieces share it.
            chunk.start_line >= last,
            "{chunk:?} starts before line {last}"
        );
        last = chunk.end_line;
    }
}

/// A stored history from bytes (per message: a byte for the role and
/// the number of blocks, a byte per block for its kind and call id),
/// made ready to send: every call is answered in the next message,
/// and every result answers a call of the previous one.
pub fn history(data: &[u8]) {
    let mut bytes = data.iter().copied();
    let mut history = Vec::new();
    while let Some(head) = bytes.next() {
        let role = if head & 1 == 0 {
            Role::User
        } else {
            Role::Assistant
        };
        let mut content = Vec::new();
        for _ in 0..(head >> 1) % 5 {
            let Some(block) = bytes.next() else {
                break;
            };
            let id = format!("call_{}", (block >> 3) % 4);
            content.push(match block % 8 {
                0 | 1 => ContentBlock::text(if block & 0x80 == 0 { "hello" } else { " " }),
                2 | 3 => ContentBlock::ToolUse {
                    id,
                    name: "shell".to_owned(),
                    input: serde_json::json!({}),
                },
                4 | 5 => ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: "done".to_owned(),
                    is_error: false,
                },
                6 => ContentBlock::Thinking {
                    thinking: "hmm".to_owned(),
                    signature: None,
                },
                _ => ContentBlock::text(""),
            });
        }
        history.push(Message { role, content });
    }
    let _ = flynn_context::normalize(history.clone());
    let _ = flynn_context::repair(history.clone());
    let prepared = flynn_context::prepare(history);
    let mut seen = std::collections::HashSet::new();
    for (i, message) in prepared.iter().enumerate() {
        let calls: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        for id in &calls {
            assert!(
                seen.insert(*id),
                "call id {id} of message {i} was used before: {prepared:?}"
            );
        }
        let answered = |j: usize| -> Vec<&str> {
            prepared.get(j).map_or_else(Vec::new, |m| {
                m.content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
                        _ => None,
                    })
                    .collect()
            })
        };
        let next = answered(i + 1);
        for id in &calls {
            assert!(
                next.contains(id),
                "call {id} of message {i} is not answered: {prepared:?}"
            );
        }
        let asked: Vec<&str> = if i == 0 {
            Vec::new()
        } else {
            prepared[i - 1]
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                    _ => None,
                })
                .collect()
        };
        for id in answered(i) {
            assert!(
                asked.contains(&id),
                "result {id} of message {i} answers no call: {prepared:?}"
            );
        }
    }
}
