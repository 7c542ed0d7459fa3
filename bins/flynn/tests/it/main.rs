//! The real `flynn` binary against the fake model servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agents;
#[cfg(feature = "telegram")]
mod automation;
mod backup;
#[cfg(any(feature = "telegram", feature = "whatsapp"))]
mod channels;
#[cfg(all(
    feature = "telegram",
    feature = "whatsapp",
    feature = "slack",
    feature = "discord"
))]
mod chaos;
mod cluster;
mod config;
mod crash;
mod daemon;
mod doctor;
#[cfg(target_os = "linux")]
mod faults;
#[cfg(target_os = "linux")]
mod google;
mod live;
mod mcp;
mod memory;
mod models;
mod onboard;
mod pairing;
mod panics;
mod send;
mod sessions;
mod setup;
mod skills;
#[cfg(all(feature = "telegram", feature = "whatsapp"))]
mod soak;
mod store;
mod taint;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

/// A scratch home for one test: `FLYNN_HOME`, `HOME` and the config dir all
/// live in it, and the child sees no variable of the developer's own.
pub struct Env {
    pub dir: TempDir,
    vars: Vec<(String, String)>,
}

impl Default for Env {
    fn default() -> Self {
        Self::new()
    }
}

impl Env {
    pub fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
            vars: Vec::new(),
        }
    }

    pub fn var(mut self, name: &str, value: impl Into<String>) -> Self {
        self.vars.push((name.to_owned(), value.into()));
        self
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The `flynn` binary built for these tests, or the one
    /// `FLYNN_TEST_BIN` names (`cargo xtask chaos` runs the tests against
    /// the release build that way).
    pub fn command(&self, args: &[&str]) -> Command {
        let binary = std::env::var_os("FLYNN_TEST_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_flynn").into());
        let mut command = Command::new(binary);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path())
            .env("FLYNN_HOME", self.path().join("home"))
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .current_dir(self.path())
            .stdin(Stdio::null());
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
