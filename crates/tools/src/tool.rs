use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::ToolError;

/// What a tool call may use besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Directory that relative paths and commands start in.
    pub workspace: PathBuf,
    /// Fires when the turn is cancelled; long-running tools must stop.
    pub cancel: CancellationToken,
}

impl ToolContext {
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        ToolContext {
            workspace: workspace.into(),
            cancel: CancellationToken::new(),
        }
    }

    /// Resolves a path argument against the workspace.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let path = Path::new(path);
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.workspace.join(path)
        }
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

    /// How long a call may run before the executor stops it.
    fn timeout(&self) -> Duration;

    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// A tool with its types erased, as the registry holds it.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    fn input_schema(&self) -> Value;
    fn timeout(&self) -> Duration;
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError>;
}

/// Erases a typed tool's argument type so it can sit in a registry.
pub fn into_dyn<T: TypedTool>(tool: T) -> std::sync::Arc<dyn Tool> {
    std::sync::Arc::new(Typed::new(tool))
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
