use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{Principal, SessionKey, ToolEffect, TurnId};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::builtin::AgentHost;
use crate::{
    Approver, DenyAll, GateObserver, Guards, Provenance, ToolCatalog, ToolError, ToolPolicy,
};

/// What a tool call may use besides its arguments, and what its gate
/// needs: who is calling, what they may use, and whom to ask.
#[derive(Clone)]
pub struct ToolContext {
    /// Directory that relative paths and commands start in.
    pub workspace: PathBuf,
    /// Directories no tool may touch even inside the workspace
    /// (FLYNN_HOME, when the owner names a workspace around it).
    pub hidden: Arc<[PathBuf]>,
    /// Fires when the turn is cancelled; long-running tools must stop, and
    /// a confirmation wait ends.
    pub cancel: CancellationToken,
    pub session: SessionKey,
    /// Who sent the message the turn answers: a guest's calls reach only
    /// its own session and memory.
    pub principal: Principal,
    /// The agent's name, as `agents.list` spells it.
    pub agent: String,
    /// The turn the call belongs to; `None` outside a turn.
    pub turn: Option<TurnId>,
    /// The tools this agent may run; the executor refuses the rest.
    pub policy: Arc<ToolPolicy>,
    /// Answers calls that a `confirm` hook holds back.
    pub approver: Arc<dyn Approver>,
    /// Told when a confirmation is asked for and how it ended.
    pub observer: Option<Arc<dyn GateObserver>>,
    /// Whether untrusted content (web pages) has entered the turn.
    pub provenance: Arc<Provenance>,
    /// The turn's tool offer, which `tools.search` extends; `None` outside
    /// a turn.
    pub catalog: Option<Arc<ToolCatalog>>,
    /// The agent runtime, for the tools that reach other agents and
    /// sessions (`agents.spawn`, `sessions.*`, `tool.output`); `None`
    /// outside a turn.
    pub host: Option<Arc<dyn AgentHost>>,
    /// Limits the turn took on (the permissions of the skills it read);
    /// the executor refuses calls outside them.
    pub guards: Arc<Guards>,
}

impl ToolContext {
    /// For tests and one-off calls: session `local:default`, agent `main`,
    /// no turn, every tool allowed, and every confirmation denied (no one is
    /// there to ask), with no observer.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        ToolContext {
            workspace: workspace.into(),
            hidden: Arc::from(Vec::new()),
            cancel: CancellationToken::new(),
            session: SessionKey::new("local", "default")
                .unwrap_or_else(|_| unreachable!("`local:default` is a valid session key")),
            principal: Principal::Owner,
            agent: "main".to_owned(),
            turn: None,
            policy: Arc::new(ToolPolicy::allow_all()),
            approver: Arc::new(DenyAll::new("no one is available to approve it")),
            observer: None,
            provenance: Arc::new(Provenance::new()),
            catalog: None,
            host: None,
            guards: Arc::new(Guards::new()),
        }
    }
}

impl fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("session", &self.session)
            .field("principal", &self.principal)
            .field("agent", &self.agent)
            .field("turn", &self.turn)
            .field("policy", &self.policy)
            .field("observer", &self.observer.is_some())
            .field("untrusted", &self.provenance.untrusted_source())
            .finish_non_exhaustive()
    }
}

/// A tool as its author writes it: typed arguments, typed code.
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments, parsed from the model's JSON; their schema is what
    /// the model sees, doc comments included.
    type Args: DeserializeOwned + JsonSchema + Send;

    /// Dotted name, e.g. `shell.exec`.
    fn name(&self) -> &str;

    /// One or two sentences telling the model when to use it.
    fn description(&self) -> &str;

    /// How long a call may run before the executor stops it (not counting
    /// a wait for confirmation).
    fn timeout(&self) -> Duration;

    /// What a call does to the world; approvers are shown it.
    fn effect(&self) -> ToolEffect;

    /// Whether calls may run alongside other such calls in one batch;
    /// by default only read-only tools.
    fn parallel_safe(&self) -> bool {
        self.effect() == ToolEffect::ReadOnly
    }

    /// Whether the output comes from outside (a web page, a search
    /// engine): the executor wraps it as untrusted content, and the turn's
    /// risky tools then need confirmation.
    fn untrusted_output(&self) -> bool {
        false
    }

    /// Whether it reads the owner's data (files, memory, conversations):
    /// in a session tainted by untrusted content, such reads need a
    /// person unless the turn brought the data in itself.
    fn reads_private_data(&self) -> bool {
        false
    }

    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<String, ToolError>;

    /// Stops whatever the tool keeps running between calls (background
    /// processes, connections); called once when Flynn shuts down.
    async fn shutdown(&self) {}
}

/// A tool with its types erased, as the registry holds it.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn input_schema(&self) -> Value;
    fn timeout(&self) -> Duration;
    fn effect(&self) -> ToolEffect;
    fn parallel_safe(&self) -> bool {
        self.effect() == ToolEffect::ReadOnly
    }
    fn untrusted_output(&self) -> bool {
        false
    }
    fn reads_private_data(&self) -> bool {
        false
    }
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
    async fn shutdown(&self) {}
}

/// Erases a typed tool's argument type so it can sit in a registry.
pub fn into_dyn<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Typed::new(tool))
}

/// Adapts a [`TypedTool`] to [`Tool`].
pub(crate) struct Typed<T: TypedTool> {
    pub(crate) tool: T,
    pub(crate) schema: Value,
}

impl<T: TypedTool> Typed<T> {
    pub(crate) fn new(tool: T) -> Self {
        Typed {
            schema: compact_schema::<T::Args>(),
            tool,
        }
    }
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn name(&self) -> &str {
        self.tool.name()
    }

    fn description(&self) -> &str {
        self.tool.description()
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn timeout(&self) -> Duration {
        self.tool.timeout()
    }

    fn effect(&self) -> ToolEffect {
        self.tool.effect()
    }

    fn parallel_safe(&self) -> bool {
        self.tool.parallel_safe()
    }

    fn untrusted_output(&self) -> bool {
        self.tool.untrusted_output()
    }

    fn reads_private_data(&self) -> bool {
        self.tool.reads_private_data()
    }

    async fn shutdown(&self) {
        self.tool.shutdown().await;
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        // Models sometimes send `null` for a tool without arguments.
        let args = if args.is_null() {
            Value::Object(Default::default())
        } else {
            args
        };
        let args = serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments {
            tool: self.tool.name().to_owned(),
            message: e.to_string(),
        })?;
        self.tool.run(args, ctx).await
    }
}

/// The JSON Schema of `T` without the keys models do not need (`$schema`,
/// the title, and the argument struct's own doc comment), to keep every
/// request small.
pub(crate) fn compact_schema<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.meta_schema = None;
    });
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
        object.remove("description");
    }
    schema
}
