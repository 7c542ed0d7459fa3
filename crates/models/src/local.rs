//! `kind: local`: a GGUF model run inside Flynn on candle (feature
//! `local-llm`).
//!
//! The file is read on the first call, not when the client is built, and
//! only once per file: every provider naming the same file (through
//! [`LocalModels`]) shares one loaded model. One generation runs at a time
//! per model, on a blocking thread; a call waits its turn without
//! blocking the runtime. The loop checks between two tokens (and between
//! two chunks of the prompt) whether the stream was dropped, so a
//! cancelled turn frees the model within a token's time.

mod engine;
mod template;
mod tokenizer;
mod tool_call;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use flynn_protocol::config::ProviderConfig;
use flynn_protocol::{ContentBlock, Message, Role, Usage};
use tokio::sync::{Mutex, OnceCell, mpsc};

use engine::{Engine, Job, Output};
pub use engine::{GgufInfo, inspect};
use tool_call::{Piece, Splitter};

use crate::{
    ClientInfo, Error, ModelClient, ModelRequest, ModelResponse, ModelStream, Result, StopReason,
    StreamEvent, ToolNameMap,
};

/// A model file, loaded at most once and shared by every client that
/// names it.
#[derive(Debug)]
struct Shared {
    path: PathBuf,
    threads: Option<u32>,
    engine: OnceCell<Arc<Mutex<Engine>>>,
    /// Tokens the model has sampled since it was loaded, every call
    /// counted (how tests see that a cancelled call stopped).
    sampled: AtomicU64,
}

impl Shared {
    async fn engine(&self) -> std::result::Result<Arc<Mutex<Engine>>, String> {
        self.engine
            .get_or_try_init(|| async {
                let path = self.path.clone();
                let threads = self.threads;
                let engine = tokio::task::spawn_blocking(move || Engine::load(&path, threads))
                    .await
                    .map_err(|e| format!("loading the model stopped: {e}"))??;
                tracing::info!(
                    path = %self.path.display(),
                    architecture = %engine.info.architecture,
                    format = engine.template.format.name(),
                    "local model loaded"
                );
                Ok(Arc::new(Mutex::new(engine)))
            })
            .await
            .cloned()
    }
}

/// The models loaded in one router, by file: providers naming the same
/// file share it.
#[derive(Debug, Default)]
pub(crate) struct LocalModels {
    files: HashMap<PathBuf, Arc<Shared>>,
}

impl LocalModels {
    fn get(&mut self, path: &Path, threads: Option<u32>) -> Arc<Shared> {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        self.files
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Shared {
                    path: path.to_path_buf(),
                    threads,
                    engine: OnceCell::new(),
                    sampled: AtomicU64::new(0),
                })
            })
            .clone()
    }
}

/// The client of a `kind: local` provider.
#[derive(Debug)]
pub struct LocalClient {
    info: ClientInfo,
    shared: Arc<Shared>,
    context: Option<u32>,
}

/// The model file of a `kind: local` provider, checked: set, and a file
/// that exists.
pub fn model_path(name: &str, config: &ProviderConfig) -> Result<PathBuf> {
    let Some(path) = config.model_path.as_ref() else {
        return Err(Error::Config {
            message: format!(
                "provider '{name}' (local): model_path is not set; expected the path of a GGUF file (flynn models pull <repo>/<file.gguf> downloads one)"
            ),
        });
    };
    if !path.is_file() {
        return Err(Error::Config {
            message: format!(
                "provider '{name}' (local): model file {} does not exist; download one with `flynn models pull <repo>/<file.gguf>` (or scripts/fetch-smollm2.sh) and set model_path to it",
                path.display()
            ),
        });
    }
    Ok(path.clone())
}

impl LocalClient {
    /// A client of its own (not sharing the file with other providers).
    pub fn new(name: &str, config: &ProviderConfig) -> Result<Self> {
        Self::shared(name, config, &mut LocalModels::default())
    }

    pub(crate) fn shared(
        name: &str,
        config: &ProviderConfig,
        models: &mut LocalModels,
    ) -> Result<Self> {
        let path = model_path(name, config)?;
        if config.threads == Some(0) || config.context == Some(0) {
            return Err(Error::Config {
                message: format!(
                    "provider '{name}' (local): threads and context must be at least 1"
                ),
            });
        }
        // It runs in this process: local unless the config says otherwise.
        let info = ClientInfo::new(name, config.kind, config.local.unwrap_or(true));
        Ok(LocalClient {
            info,
            shared: models.get(&path, config.threads),
            context: config.context,
        })
    }

    /// The loaded model's description (loads it when needed).
    pub async fn model_info(&self) -> Result<GgufInfo> {
        let engine = self.engine().await?;
        let engine = engine.lock().await;
        Ok(engine.info.clone())
    }

    /// Waits until no generation is running on this client's model: how
    /// tests see that a dropped stream stopped the work.
    #[doc(hidden)]
    pub async fn wait_idle(&self) {
        if let Some(engine) = self.shared.engine.get() {
            drop(engine.lock().await);
        }
    }

    /// Tokens this client's model has sampled since it was loaded, over
    /// every call: how tests see that a dropped stream stopped the work
    /// within one token.
    #[doc(hidden)]
    pub fn tokens_sampled(&self) -> u64 {
        self.shared.sampled.load(Ordering::SeqCst)
    }

    /// Whether two clients share one loaded model.
    #[doc(hidden)]
    pub fn shares_model_with(&self, other: &LocalClient) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    async fn engine(&self) -> Result<Arc<Mutex<Engine>>> {
        self.shared.engine().await.map_err(|message| Error::Config {
            message: format!("provider '{}' (local): {message}", self.info.provider),
        })
    }

    fn window(&self, engine: &Engine) -> u32 {
        self.context
            .map_or(engine.max_context, |c| c.min(engine.max_context))
    }
}

/// Sets the flag when the stream is dropped: the generation loop stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[async_trait]
impl ModelClient for LocalClient {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn context_window(&self, _model: &str) -> Option<u32> {
        let engine = self.engine().await.ok()?;
        let engine = engine.lock().await;
        Some(self.window(&engine))
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream> {
        let provider = self.info.provider.clone();
        let engine = self.engine().await?;
        let names = ToolNameMap::new(&request.tools);
        // Rendering and tokenizing need only the template and tokenizer,
        // which a running generation does not change, but they live in
        // the engine: take the lock briefly.
        let (prompt, window, model_name, tools) = {
            let guard = engine.lock().await;
            let text = guard.template.render(
                request.system.as_deref(),
                &request.messages,
                &request.tools,
                &names,
            );
            let prompt = guard.tokenize(&text).map_err(|message| Error::Stream {
                provider: provider.clone(),
                message,
            })?;
            let name = guard
                .info
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (prompt, self.window(&guard), name, guard.template.tools)
        };
        let prompt_tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        if prompt_tokens >= window {
            return Err(Error::ContextOverflow {
                provider,
                message: format!(
                    "the prompt is {prompt_tokens} tokens and the model runs with a context of {window}"
                ),
            });
        }
        let job = Job {
            prompt,
            max_tokens: request.max_tokens.max(1),
            context: window,
            temperature: request.temperature,
            seed: seed(),
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let guard = CancelOnDrop(cancel.clone());
        let shared = self.shared.clone();
        let (tx, mut rx) = mpsc::channel::<std::result::Result<Output, String>>(64);
        let model = if request.model.is_empty() {
            model_name
        } else {
            request.model.to_string()
        };
        Ok(Box::pin(async_stream::stream! {
            let _guard = guard;
            // Wait for the model (another call may be using it), then run
            // on a blocking thread that holds the lock until it stops.
            let lock = engine.clone().lock_owned().await;
            let flag = cancel.clone();
            let sender = tx.clone();
            let shared = shared.clone();
            let worker = tokio::task::spawn_blocking(move || {
                let mut lock = lock;
                let mut send = |output: Output| sender.blocking_send(Ok(output)).is_ok();
                if let Err(message) = lock.generate(&job, &flag, &shared.sampled, &mut send) {
                    let _ = sender.blocking_send(Err(message));
                }
            });
            drop(tx);
            let mut splitter = tools.then(Splitter::default);
            let mut text = String::new();
            let mut calls: Vec<ContentBlock> = Vec::new();
            let mut done = None;
            while let Some(output) = rx.recv().await {
                match output {
                    Ok(Output::Text(delta)) => {
                        let pieces = match splitter.as_mut() {
                            Some(splitter) => splitter.push(&delta),
                            None => vec![Piece::Text(delta)],
                        };
                        for event in absorb(pieces, &names, &mut text, &mut calls) {
                            yield Ok(event);
                        }
                    }
                    Ok(Output::Done { completion_tokens, truncated }) => {
                        done = Some((completion_tokens, truncated));
                    }
                    Err(message) => {
                        yield Err(Error::Stream { provider: provider.clone(), message });
                        return;
                    }
                }
            }
            let _ = worker.await;
            let Some((completion_tokens, truncated)) = done else {
                yield Err(Error::Stream {
                    provider: provider.clone(),
                    message: "the generation stopped before its end".to_owned(),
                });
                return;
            };
            if let Some(splitter) = splitter.as_mut() {
                for event in absorb(splitter.finish(), &names, &mut text, &mut calls) {
                    yield Ok(event);
                }
            }
            let stop_reason = if !calls.is_empty() {
                StopReason::ToolUse
            } else if truncated {
                StopReason::MaxTokens
            } else {
                StopReason::EndTurn
            };
            let mut content = Vec::new();
            let text = text.trim_end();
            if !text.is_empty() {
                content.push(ContentBlock::text(text));
            }
            content.extend(calls);
            yield Ok(StreamEvent::Completed(ModelResponse {
                message: Message { role: Role::Assistant, content },
                stop_reason,
                usage: Usage {
                    input_tokens: u64::from(prompt_tokens),
                    output_tokens: u64::from(completion_tokens),
                    ..Usage::default()
                },
                model,
            }));
        }))
    }
}

/// Turns split pieces into stream events, collecting the answer.
fn absorb(
    pieces: Vec<Piece>,
    names: &ToolNameMap,
    text: &mut String,
    calls: &mut Vec<ContentBlock>,
) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(delta) => {
                // Nothing but whitespace before any text: held back, so an
                // answer that is only a tool call shows no blank line.
                let delta = if text.is_empty() {
                    delta.trim_start().to_owned()
                } else {
                    delta
                };
                if !delta.is_empty() {
                    text.push_str(&delta);
                    events.push(StreamEvent::TextDelta(delta));
                }
            }
            Piece::Call(call) => {
                let id = format!("call_{}", uuid::Uuid::now_v7().simple());
                let name = names.from_wire(&call.name).to_owned();
                events.push(StreamEvent::ToolUseStart {
                    id: id.clone(),
                    name: name.clone(),
                });
                calls.push(ContentBlock::ToolUse {
                    id,
                    name,
                    input: call.arguments,
                });
            }
        }
    }
    events
}

/// A sampling seed that differs between calls.
fn seed() -> u64 {
    let id = uuid::Uuid::now_v7().as_u128();
    (id as u64) ^ ((id >> 64) as u64)
}

/// Builds the client of a `kind: local` provider that shares loaded models
/// through `models`.
pub(crate) fn build(
    name: &str,
    config: &ProviderConfig,
    models: &mut LocalModels,
) -> Result<Arc<dyn ModelClient>> {
    Ok(Arc::new(LocalClient::shared(name, config, models)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_naming_one_file_share_one_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b"GGUF").unwrap();
        let config = |path: PathBuf| {
            let mut config = ProviderConfig::new(flynn_protocol::config::ProviderKind::Local);
            config.model_path = Some(path);
            config
        };
        let mut models = LocalModels::default();
        let a = LocalClient::shared("a", &config(path.clone()), &mut models).unwrap();
        let b = LocalClient::shared(
            "b",
            &config(dir.path().join(".").join("m.gguf")),
            &mut models,
        )
        .unwrap();
        let alone = LocalClient::new("c", &config(path)).unwrap();
        assert!(a.shares_model_with(&b));
        assert!(!a.shares_model_with(&alone));
    }

    #[test]
    fn absorb_maps_wire_names_back_and_holds_leading_whitespace() {
        let tools = vec![flynn_protocol::ToolSpec {
            name: "file.read".into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}).into(),
        }];
        let names = ToolNameMap::new(&tools);
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut splitter = Splitter::default();
        let mut events = Vec::new();
        for delta in [
            "\n",
            "<tool_call>\n{\"name\": \"file_read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>",
        ] {
            events.extend(absorb(splitter.push(delta), &names, &mut text, &mut calls));
        }
        events.extend(absorb(splitter.finish(), &names, &mut text, &mut calls));
        assert_eq!(text, "");
        assert_eq!(events.len(), 1);
        assert!(
            matches!(&events[0], StreamEvent::ToolUseStart { name, .. } if name == "file.read")
        );
        assert!(matches!(
            &calls[0],
            ContentBlock::ToolUse { name, input, .. } if name == "file.read" && input == &serde_json::json!({"path": "a"})
        ));
    }
}
