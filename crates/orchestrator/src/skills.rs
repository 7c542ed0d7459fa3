//! Skills in the agent loop: the compact index in the system prompt and
//! the `skills.read` tool that returns a skill's instructions when the
//! model uses it. The skill directories are read again when they may have
//! changed (at most every few seconds), so a skill dropped into the
//! workspace is picked up by the next turn without a restart.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_skills::{Environment, Permissions, READ_TOOL, SkillSet, Sources, SystemEnvironment};
use flynn_tools::{CallGuard, GuardedCall, ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::prompt::{PromptContext, PromptSlot};

/// How long a loaded set is reused before the directories are read again.
const RELOAD_AFTER: Duration = Duration::from_secs(5);

/// The skills a runtime offers. Cheap to clone.
#[derive(Clone)]
pub struct SkillsRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    sources: Sources,
    reload_after: Duration,
    environment: Arc<dyn Environment + Send + Sync>,
    loaded: Mutex<Option<(Instant, Arc<SkillSet>)>>,
}

impl std::fmt::Debug for SkillsRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillsRuntime").finish_non_exhaustive()
    }
}

impl SkillsRuntime {
    /// Skills from `home/skills` (managed), `workspace/skills` and the
    /// bundled ones, gated against this machine.
    pub fn new(home: Option<PathBuf>, workspace: PathBuf) -> Self {
        let home = home.unwrap_or_else(|| workspace.join(".flynn"));
        Self::with_environment(Sources::new(&home, &workspace), Arc::new(SystemEnvironment))
    }

    /// Skills from `sources`, gated against `environment` (tests).
    pub fn with_environment(
        sources: Sources,
        environment: Arc<dyn Environment + Send + Sync>,
    ) -> Self {
        SkillsRuntime {
            inner: Arc::new(Inner {
                sources,
                reload_after: RELOAD_AFTER,
                environment,
                loaded: Mutex::new(None),
            }),
        }
    }

    /// Reads the directories again after `every` instead of five seconds
    /// (zero: on every use).
    pub fn reload_every(self, every: Duration) -> Self {
        let inner = Inner {
            sources: self.inner.sources.clone(),
            reload_after: every,
            environment: self.inner.environment.clone(),
            loaded: Mutex::new(None),
        };
        SkillsRuntime {
            inner: Arc::new(inner),
        }
    }

    /// The set read last, while it is recent enough to use: no file is
    /// read.
    fn fresh(&self) -> Option<Arc<SkillSet>> {
        let loaded = self
            .inner
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loaded
            .as_ref()
            .filter(|(at, _)| at.elapsed() < self.inner.reload_after)
            .map(|(_, set)| set.clone())
    }

    /// The current set, read again when the last read is older than a few
    /// seconds.
    pub fn set(&self) -> Arc<SkillSet> {
        let mut loaded = self
            .inner
            .loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((at, set)) = loaded.as_ref()
            && at.elapsed() < self.inner.reload_after
        {
            return set.clone();
        }
        let set = Arc::new(SkillSet::load(
            &self.inner.sources,
            self.inner.environment.as_ref(),
        ));
        for broken in set.broken() {
            tracing::warn!(skill = ?broken, "a skill could not be loaded");
        }
        *loaded = Some((Instant::now(), set.clone()));
        set
    }

    /// The `skills.read` tool.
    pub fn tools(&self) -> Vec<Arc<dyn flynn_tools::Tool>> {
        vec![flynn_tools::into_dyn(SkillsRead(self.clone()))]
    }

    /// The skills index in the system prompt.
    pub fn slot(&self) -> Arc<dyn PromptSlot> {
        Arc::new(SkillsSlot(self.clone()))
    }
}

struct SkillsSlot(SkillsRuntime);

#[async_trait]
impl PromptSlot for SkillsSlot {
    fn name(&self) -> &str {
        "skills"
    }

    async fn render(&self, _context: &PromptContext<'_>) -> Option<String> {
        let index = match self.0.fresh() {
            Some(set) => set.index(),
            None => {
                // Reading the directories is blocking file I/O, done off
                // the async threads (once every few seconds at most).
                let runtime = self.0.clone();
                tokio::task::spawn_blocking(move || runtime.set().index())
                    .await
                    .ok()?
            }
        };
        (!index.is_empty()).then_some(index)
    }
}

struct SkillsRead(SkillsRuntime);

/// Arguments of `skills.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// The skill's name.
    name: String,
}

#[async_trait]
impl TypedTool for SkillsRead {
    type Args = ReadArgs;

    fn name(&self) -> &str {
        READ_TOOL
    }

    fn description(&self) -> &str {
        "Get a skill's instructions (skills are listed in the system prompt)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: ReadArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let runtime = self.0.clone();
        let (text, permissions) = tokio::task::spawn_blocking(move || {
            let set = runtime.set();
            let text = set
                .instructions(&args.name)
                .map(|text| text.into_owned())
                .map_err(|e| match e {
                    // The prompt names the skills only: a model that
                    // guessed wrong learns what each one is for.
                    flynn_skills::Error::UnknownSkill { name } => ToolError::failed(format!(
                        "no skill is named '{name}'; the skills are:\n{}",
                        set.catalog()
                    )),
                    other => ToolError::failed(other.to_string()),
                })?;
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let permissions = set
                .get(&args.name)
                .map(|skill| skill.permissions(home.as_deref()));
            Ok::<_, ToolError>((text, permissions))
        })
        .await
        .map_err(|e| ToolError::failed(format!("reading the skill failed: {e}")))??;
        // From now on this turn does what the skills it read declare.
        if let Some(permissions) = permissions {
            ctx.guards.add(Arc::new(SkillGuard {
                name: format!("skill '{}'", permissions.skill()),
                permissions,
            }));
        }
        Ok(text)
    }
}

/// The declared permissions of a skill the turn uses, as a limit on the
/// turn's calls: the tool must be one the skill lists; every place the
/// call names must be under one of its paths ([`places`]); and whatever
/// can reach the network needs its network permission: web tools,
/// commands (`shell.exec`, `process.start`: a command can open
/// connections) and tools of MCP servers (their effect is `External`).
#[derive(Debug)]
struct SkillGuard {
    name: String,
    permissions: Permissions,
}

impl CallGuard for SkillGuard {
    fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, call: &GuardedCall<'_>) -> Result<(), String> {
        self.permissions
            .check_tool(call.tool)
            .map_err(|refusal| refusal.to_string())?;
        for place in places(call) {
            self.permissions
                .check_path(&place, call.workspace, writes(call.effect))
                .map_err(|refusal| refusal.to_string())?;
        }
        if reaches_network(call) {
            // A network tool that names its URL is held to `net`'s hosts;
            // anything else (a command, an MCP tool, whatever its
            // arguments say) needs `network`.
            let host = (call.effect == ToolEffect::Network)
                .then(|| call.arguments.get("url"))
                .flatten()
                .and_then(serde_json::Value::as_str)
                .and_then(|url| url::Url::parse(url).ok())
                .and_then(|url| url.host_str().map(str::to_owned));
            match host {
                Some(host) => self.permissions.check_host(&host),
                None => self.permissions.check_network(),
            }
            .map_err(|refusal| refusal.to_string())?;
        }
        Ok(())
    }

    fn offers(&self, tool: &str) -> bool {
        self.permissions.check_tool(tool).is_ok()
    }
}

/// Whether a call of this effect may change what its paths hold: it
/// needs a place to write (commands too: they can write anywhere they may
/// go).
fn writes(effect: flynn_protocol::ToolEffect) -> bool {
    use flynn_protocol::ToolEffect;
    matches!(
        effect,
        ToolEffect::WritesFiles | ToolEffect::RunsProcesses | ToolEffect::External
    )
}

/// Argument keys that name a file or directory, in any tool.
const PATH_KEYS: &[&str] = &[
    "path",
    "cwd",
    "file",
    "dir",
    "directory",
    "source",
    "destination",
];

/// Whether `call` may open network connections.
fn reaches_network(call: &GuardedCall<'_>) -> bool {
    matches!(
        call.effect,
        ToolEffect::Network | ToolEffect::RunsProcesses | ToolEffect::External
    ) || call.tool.starts_with("web.")
        || call.tool.starts_with("shell.")
        || call.tool == "process.start"
}

/// Every place a call touches, as the file and command tools read their
/// arguments: the path-like arguments; the workspace root where a tool
/// defaults to it (`file.list` and `file.search` without `path`,
/// `shell.exec` and `process.start` without `cwd`); and the fixed start of
/// a glob (`file.list`'s `pattern`, `file.search`'s `glob`), so that
/// `../secret/*` is checked as `../secret`. The text of a command is not
/// parsed: a skill that may run commands reaches what the sandbox lets
/// them reach.
fn places(call: &GuardedCall<'_>) -> Vec<PathBuf> {
    let text = |key: &str| call.arguments.get(key).and_then(serde_json::Value::as_str);
    let mut places: Vec<PathBuf> = PATH_KEYS
        .iter()
        .filter_map(|key| text(key))
        .map(PathBuf::from)
        .collect();
    let (location, glob) = match call.tool {
        "file.list" => ("path", Some("pattern")),
        "file.search" => ("path", Some("glob")),
        "shell.exec" | "process.start" => ("cwd", None),
        _ => return places,
    };
    let base = PathBuf::from(text(location).unwrap_or("."));
    if text(location).is_none() {
        places.push(base.clone());
    }
    if let Some(glob) = glob.and_then(text) {
        let fixed: PathBuf = std::path::Path::new(glob)
            .components()
            .take_while(|part| {
                !part
                    .as_os_str()
                    .to_string_lossy()
                    .contains(['*', '?', '[', '{'])
            })
            .collect();
        if !fixed.as_os_str().is_empty() {
            places.push(base.join(fixed));
        }
    }
    places
}
