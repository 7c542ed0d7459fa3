//! The audit log: one JSON line per tool call in `tools.jsonl` (under
//! `FLYNN_HOME/audit` by default), rotated by size, secrets redacted.
//! Writing it never fails a call: a write error is logged once and the
//! call goes on.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde_json::Value;

/// Bytes of a call's output kept in its record.
const OUTPUT_KEPT: usize = 2048;

/// One tool call, as the audit log keeps it. Arguments, output and error
/// must already be redacted.
#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch, when the call ended.
    pub time_ms: u64,
    pub session: String,
    /// Who sent the message the turn answers: `owner`,
    /// `guest:<channel>:<id>` or `automation:<source>`.
    pub principal: String,
    pub agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<u64>,
    pub call_id: String,
    pub tool: String,
    /// The tool's declared effect; absent for an unknown tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<&'static str>,
    /// What the gate did before the call: `silent`, `log`, `confirm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<&'static str>,
    /// Why the gate asked (untrusted content in the turn), when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate_reason: Option<String>,
    /// `ok`, `error`, `denied`, `timeout`, `cancelled`, `unknown_tool`,
    /// `invalid_arguments`.
    pub outcome: &'static str,
    pub duration_ms: u64,
    pub arguments: Value,
    /// The start of the output (or the error message).
    pub output: String,
    /// The output's full length in bytes.
    pub output_bytes: usize,
    /// Whether the output came from outside (web) and was wrapped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub untrusted: bool,
}

impl AuditRecord {
    /// Keeps at most the first 2 KB of `output` (on a character boundary).
    pub fn clip(output: &str) -> String {
        if output.len() <= OUTPUT_KEPT {
            return output.to_owned();
        }
        let end = output.floor_char_boundary(OUTPUT_KEPT);
        format!("{}…", &output[..end])
    }
}

/// An append-only JSONL file rotated when it would pass `max_bytes`:
/// `tools.jsonl` → `tools.1.jsonl` → … → `tools.<keep>.jsonl`, the oldest
/// dropped.
#[derive(Debug)]
pub struct AuditLog {
    dir: PathBuf,
    max_bytes: u64,
    keep: u32,
    file: Mutex<Option<Open>>,
    warned: AtomicBool,
}

#[derive(Debug)]
struct Open {
    file: File,
    len: u64,
}

impl AuditLog {
    /// A log in `dir`, created (mode 0700) on the first record.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64, keep: u32) -> Self {
        AuditLog {
            dir: dir.into(),
            max_bytes: max_bytes.max(1024),
            keep,
            file: Mutex::new(None),
            warned: AtomicBool::new(false),
        }
    }

    /// The current file: `<dir>/tools.jsonl`.
    pub fn path(&self) -> PathBuf {
        self.dir.join("tools.jsonl")
    }

    /// Appends one record. Never fails; the first write error is logged.
    pub fn record(&self, record: &AuditRecord) {
        let mut line = match serde_json::to_vec(record) {
            Ok(line) => line,
            Err(error) => return self.warn(&error),
        };
        line.push(b'\n');
        // A panic while another record was written leaves the lock
        // poisoned; the file handle behind it is still good (and is
        // reopened below if not), so recording carries on.
        let mut guard = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = self.write(&mut guard, &line) {
            // Reopen next time: the file may have been moved or removed.
            *guard = None;
            drop(guard);
            self.warn(&error);
        }
    }

    fn write(&self, open: &mut Option<Open>, line: &[u8]) -> std::io::Result<()> {
        if let Some(current) = open.as_ref()
            && current.len > 0
            && current.len + line.len() as u64 > self.max_bytes
        {
            *open = None;
            self.rotate()?;
        }
        let current = match open {
            Some(current) => current,
            None => open.insert(self.open()?),
        };
        current.file.write_all(line)?;
        current.len += line.len() as u64;
        Ok(())
    }

    fn open(&self) -> std::io::Result<Open> {
        create_private_dir(&self.dir)?;
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(self.path())?;
        let len = file.metadata()?.len();
        Ok(Open { file, len })
    }

    fn rotate(&self) -> std::io::Result<()> {
        let numbered = |n: u32| self.dir.join(format!("tools.{n}.jsonl"));
        if self.keep == 0 {
            return remove_if_exists(&self.path());
        }
        remove_if_exists(&numbered(self.keep))?;
        for n in (1..self.keep).rev() {
            rename_if_exists(&numbered(n), &numbered(n + 1))?;
        }
        rename_if_exists(&self.path(), &numbered(1))
    }

    fn warn(&self, error: &dyn std::fmt::Display) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                dir = %self.dir.display(),
                "cannot write the tool audit log: {error}; tool calls go on unrecorded"
            );
        }
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn remove_if_exists(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn rename_if_exists(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(output: &str) -> AuditRecord {
        AuditRecord {
            time_ms: 1,
            session: "local:default".into(),
            principal: "owner".into(),
            agent: "main".into(),
            turn: Some(3),
            call_id: "c1".into(),
            tool: "shell.exec".into(),
            effect: Some("runs_processes"),
            gate: Some("confirm"),
            gate_reason: None,
            outcome: "ok",
            duration_ms: 2,
            arguments: json!({"command": "ls"}),
            output: output.into(),
            output_bytes: output.len(),
            untrusted: false,
        }
    }

    #[test]
    fn records_are_json_lines_and_the_file_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path().join("audit"), 1024, 2);
        let big = "x".repeat(400);
        for _ in 0..8 {
            log.record(&record(&big));
        }
        let read = |name: &str| std::fs::read_to_string(dir.path().join("audit").join(name));
        let current = read("tools.jsonl").unwrap();
        for line in current.lines() {
            let value: Value = serde_json::from_str(line).unwrap();
            assert_eq!(value["tool"], "shell.exec");
            assert_eq!(value["turn"], 3);
        }
        assert!(current.len() <= 1024, "{} bytes", current.len());
        assert!(read("tools.1.jsonl").is_ok());
        assert!(read("tools.2.jsonl").is_ok());
        assert!(
            read("tools.3.jsonl").is_err(),
            "only two rotated files are kept"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(log.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn records_go_on_after_a_panic_poisoned_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path().join("audit"), 1 << 20, 2);
        log.record(&record("before"));
        let poisoned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = log.file.lock().unwrap();
            panic!("a bug while a record was written");
        }));
        assert!(poisoned.is_err() && log.file.is_poisoned());
        log.record(&record("after"));
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("\"output\":\"after\""), "{text}");
    }

    #[test]
    fn long_output_is_clipped_on_a_character_boundary() {
        let clipped = AuditRecord::clip(&"é".repeat(2000));
        assert!(clipped.len() <= OUTPUT_KEPT + "…".len());
        assert!(clipped.ends_with('…'));
    }
}
