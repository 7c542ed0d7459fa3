//! Flynn's skills: directories holding `SKILL.md` (instructions for the
//! model) and `manifest.json` (what the skill needs: OS, programs, env
//! vars; and what it may do: tools, paths, network).
//!
//! [`SkillSet::load`] merges three tiers (bundled < managed < workspace, a
//! later one overriding by name), gates each skill against an
//! [`Environment`], and lists what could not be loaded instead of failing.
//! The prompt carries only [`SkillSet::index`]; the model reads a skill's
//! instructions with [`READ_TOOL`] ([`SkillSet::instructions`]). While a
//! skill is used, the executor checks calls with [`Permissions`].
//! [`install`] and [`remove`] manage the managed tier and never run a
//! program.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod bundled;
mod environment;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod install;
pub mod manifest;
mod permissions;
mod set;

pub use environment::{Environment, FixedEnvironment, SystemEnvironment, unmet};
pub use error::{Error, Result};
pub use install::{
    InstallOptions, Installed, MAX_ARCHIVE_BYTES, MAX_ARCHIVE_ENTRIES, install, remove,
};
pub use manifest::{DeclaredPermissions, FsPermissions, InstallStep, Manifest, Os, Requirements};
pub use permissions::{Asked, Permissions, Refusal};
pub use set::{
    Availability, Broken, MANIFEST_FILE, READ_TOOL, SKILL_FILE, Skill, SkillSet, Sources, Tier,
    gate,
};
