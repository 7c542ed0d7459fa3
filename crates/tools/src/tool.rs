use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{Principal, SessionKey, ToolEffect, TurnId};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::builtin::{AgentHost, MediaSender};
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
    /// Where the files `media.send` and `voice.say` send go: the turn's
    /// chat. `None` outside a turn.
    pub media: Option<Arc<dyn MediaSender>>,
    /// Images the call hands the model beside its text
    /// ([`attach_image`](Self::attach_image)). The executor gives every
    /// call its own and returns them with the call's result.
    pub attachments: Attachments,
}

/// An image a tool call attached: its media type (`image/png`) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedImage {
    pub media_type: String,
    pub data: Vec<u8>,
}

/// The images one tool call attached, in order. Cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct Attachments(Arc<Mutex<Vec<AttachedImage>>>);

impl Attachments {
    /// Adds an image.
    pub fn push(&self, image: AttachedImage) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(image);
    }

    /// Takes the images attached so far.
    pub fn take(&self) -> Vec<AttachedImage> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
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
            media: None,
            attachments: Attachments::default(),
        }
    }

    /// Hands the model an image beside the call's text result (a
    /// screenshot), for models that read images. The executor sends it
    /// only when the call succeeds, and leaves out (saying so in the text)
    /// one over [`MAX_IMAGE_BYTES`] or, for a PNG, over
    /// [`MAX_IMAGE_SIDE`] pixels on a side; the tool's text should still
    /// say where the image is kept, for models that get none.
    pub fn attach_image(&self, media_type: &str, data: Vec<u8>) {
        self.attachments.push(AttachedImage {
            media_type: media_type.to_owned(),
            data,
        });
    }
}

/// The largest image a tool result carries, in bytes (before base64):
/// well within every provider's limit (Anthropic 5 MB, Bedrock 3.75 MB),
/// and about as much as one screenshot should cost a request.
pub const MAX_IMAGE_BYTES: usize = 1_500_000;

/// The longest side, in pixels, of an image a tool result carries:
/// Anthropic and Bedrock refuse larger ones (a full-page screenshot of a
/// long page can be).
pub const MAX_IMAGE_SIDE: u32 = 8_000;

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
    /// The JSON Schema of its arguments; called for every model request
    /// that offers the tool, so it hands out a shared copy.
    fn input_schema(&self) -> Arc<Value>;
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
    pub(crate) schema: Arc<Value>,
}

impl<T: TypedTool> Typed<T> {
    pub(crate) fn new(tool: T) -> Self {
        Typed {
            schema: Arc::new(compact_schema::<T::Args>()),
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

    fn input_schema(&self) -> Arc<Value> {
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

/// The JSON Schema of `T` without what models do not need, to keep every
/// request small: no `$schema`, title or the argument struct's own doc
/// comment, and [`tidy`] throughout.
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
    tidy(&mut schema);
    schema
}

/// Drops from a generated schema, at every level, what says nothing a
/// model acts on, since it is sent with every request:
/// - `additionalProperties: false`: the arguments refuse unknown fields
///   anyway, with an error naming the fields there are;
/// - a `default` of `false` or `null`: a field not `required` is left out;
/// - `null` as a type or enum value of an optional field: a model leaves
///   the field out rather than sending `null` (which is still accepted);
/// - an integer's `format` (`uint32`) and the `minimum: 0` that comes with
///   an unsigned one: a negative number is refused with a clear error.
pub(crate) fn tidy(schema: &mut Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    // An optional struct or enum: `anyOf: [{...}, {type: null}]`.
    if let Some(Value::Array(members)) = object.get_mut("anyOf") {
        members.retain(|m| {
            m.get("type").and_then(Value::as_str) != Some("null")
                || m.as_object().is_some_and(|m| m.len() > 1)
        });
        if members.len() == 1
            && let Some(Value::Object(only)) = members.pop()
        {
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
    }
    if object.get("additionalProperties") == Some(&Value::Bool(false)) {
        object.remove("additionalProperties");
    }
    if matches!(
        object.get("default"),
        Some(Value::Null | Value::Bool(false))
    ) {
        object.remove("default");
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_mut_slice() {
            let only = only.take();
            object.insert("type".to_owned(), only);
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    if matches!(object.get("type").and_then(Value::as_str), Some("integer")) {
        let unsigned = object
            .remove("format")
            .is_some_and(|f| f.as_str().is_some_and(|f| f.starts_with("uint")));
        if unsigned && object.get("minimum").and_then(Value::as_u64) == Some(0) {
            object.remove("minimum");
        }
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(children)) = object.get_mut(key) {
            children.values_mut().for_each(tidy);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = object.get_mut(key) {
            children.iter_mut().for_each(tidy);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = object.get_mut(key) {
            tidy(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tidy_drops_what_models_do_not_act_on_at_every_level() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "count": {"type": ["integer", "null"], "format": "uint32", "minimum": 0},
                "offset": {"type": "integer", "format": "int64", "minimum": 5},
                "all": {"type": "boolean", "default": false},
                "mode": {"type": ["string", "null"], "enum": ["a", "b", null], "default": null},
                "kept": {"type": "boolean", "default": true},
                "inner": {
                    "anyOf": [
                        {"type": "object", "properties": {"x": {"type": ["string", "null"]}}, "additionalProperties": false},
                        {"type": "null"}
                    ],
                    "description": "An optional struct."
                },
                "list": {"type": "array", "items": {"type": ["number", "null"]}}
            },
            "required": [],
            "additionalProperties": false
        });
        tidy(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "count": {"type": "integer"},
                    "offset": {"type": "integer", "minimum": 5},
                    "all": {"type": "boolean"},
                    "mode": {"type": "string", "enum": ["a", "b"]},
                    "kept": {"type": "boolean", "default": true},
                    "inner": {
                        "type": "object",
                        "properties": {"x": {"type": "string"}},
                        "description": "An optional struct."
                    },
                    "list": {"type": "array", "items": {"type": "number"}}
                },
                "required": []
            })
        );
    }

    #[test]
    fn tidy_keeps_property_names_that_are_schema_keywords() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "format": {"type": "string"},
                "default": {"type": "boolean"},
                "type": {"type": "string"}
            }
        });
        let before = schema.clone();
        tidy(&mut schema);
        assert_eq!(schema, before);
    }
}
