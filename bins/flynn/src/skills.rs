//! `flynn skills`: the skills Flynn offers its agents (bundled, installed
//! into `FLYNN_HOME/skills`, or in `<workspace>/skills`), whether each can
//! run here, and installing or removing managed ones. Installing copies
//! files only: a skill's setup step is shown, never run.

use flynn_core::config;
use flynn_core::skills::{
    Availability, InstallOptions, Skill, SkillSet, Sources, SystemEnvironment, install, remove,
};
use serde_json::json;

use crate::cli::{SkillsArgs, SkillsCommand};
use crate::env::CliEnv;
use crate::exit::Failure;

pub fn run(args: SkillsArgs) -> Result<(), Failure> {
    let loaded = config::load(args.config.as_deref(), &CliEnv)?;
    let workspace = match loaded.config.tools.workspace.clone() {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| Failure::other(format!("cannot read the current directory: {e}")))?,
    };
    let sources = Sources::new(&loaded.paths.home, &workspace);
    match args.command {
        SkillsCommand::List { json } => list(&sources, json),
        SkillsCommand::Show { name } => show(&sources, &name),
        SkillsCommand::Install { from, force } => {
            let managed = loaded.paths.home.join("skills");
            let installed = install(&from, &managed, InstallOptions { force })
                .map_err(|e| Failure::other(e.to_string()))?;
            println!(
                "{} skill '{}' in {}.",
                if installed.replaced {
                    "Replaced"
                } else {
                    "Installed"
                },
                installed.name,
                installed.dir.display()
            );
            print_permissions(&installed.manifest.permissions);
            if let Some(step) = installed.setup {
                println!(
                    "It has a setup step, not run: {} (`{}`). Run it yourself if you trust it.",
                    step.description,
                    step.command.join(" ")
                );
            }
            Ok(())
        }
        SkillsCommand::Remove { name } => {
            let dir = remove(&name, &sources).map_err(|e| Failure::other(e.to_string()))?;
            println!("Removed skill '{name}' ({}).", dir.display());
            Ok(())
        }
    }
}

fn load(sources: &Sources) -> SkillSet {
    SkillSet::load(sources, &SystemEnvironment)
}

fn list(sources: &Sources, as_json: bool) -> Result<(), Failure> {
    let set = load(sources);
    if as_json {
        let skills: Vec<_> = set
            .skills()
            .map(|s| {
                json!({
                    "name": s.name,
                    "tier": s.tier.as_str(),
                    "description": s.manifest.description,
                    "available": s.is_available(),
                    "reasons": reasons(s),
                    "overrides": s.overrides.map(|t| t.as_str()),
                    "dir": s.dir.as_ref().map(|d| d.display().to_string()),
                })
            })
            .collect();
        let broken: Vec<_> = set
            .broken()
            .iter()
            .map(|b| json!({"name": b.name, "tier": b.tier.as_str(), "error": b.error.to_string()}))
            .collect();
        println!("{}", json!({"skills": skills, "broken": broken}));
        return Ok(());
    }
    for skill in set.skills() {
        let state = match &skill.availability {
            Availability::Available => "available".to_owned(),
            Availability::Unavailable { reasons } => format!("unavailable: {}", reasons.join("; ")),
        };
        let overrides = skill
            .overrides
            .map(|t| format!(", overrides the {} one", t.as_str()))
            .unwrap_or_default();
        println!(
            "{:<14} {:<9} {state}{overrides}\n               {}",
            skill.name,
            skill.tier.as_str(),
            skill.manifest.description
        );
    }
    for broken in set.broken() {
        println!(
            "{:<14} {:<9} broken: {}",
            broken.name,
            broken.tier.as_str(),
            broken.error
        );
    }
    Ok(())
}

fn reasons(skill: &Skill) -> Vec<String> {
    match &skill.availability {
        Availability::Available => Vec::new(),
        Availability::Unavailable { reasons } => reasons.clone(),
    }
}

fn show(sources: &Sources, name: &str) -> Result<(), Failure> {
    let set = load(sources);
    let Some(skill) = set.get(name) else {
        let names: Vec<&str> = set.skills().map(|s| s.name.as_str()).collect();
        return Err(Failure::other(format!(
            "no skill named '{name}' (skills: {})",
            names.join(", ")
        )));
    };
    println!("{} ({} skill)", skill.name, skill.tier.as_str());
    println!("{}", skill.manifest.description);
    if let Some(dir) = &skill.dir {
        println!("directory: {}", dir.display());
    }
    match &skill.availability {
        Availability::Available => println!("available"),
        Availability::Unavailable { reasons } => println!("unavailable: {}", reasons.join("; ")),
    }
    print_permissions(&skill.manifest.permissions);
    let body = skill.body().map_err(|e| Failure::other(e.to_string()))?;
    println!("\n{}", body.trim_end());
    Ok(())
}

fn print_permissions(permissions: &flynn_core::skills::DeclaredPermissions) {
    let list = |items: &[String]| {
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    println!(
        "permissions: tools {}; paths {}; network {}",
        list(&permissions.tools),
        list(&permissions.paths),
        if permissions.network { "yes" } else { "no" }
    );
}
