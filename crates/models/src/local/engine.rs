//! A GGUF model loaded on candle, and the generation loop that runs on a
//! blocking thread.

use std::fs::File;
use std::io::{Cursor, Read, Seek};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use candle_core::quantized::gguf_file::{self, Content, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use candle_transformers::models::{
    quantized_llama, quantized_phi3, quantized_qwen2, quantized_qwen3,
};
use tokenizers_gguf::Tokenizer;

use super::template::ChatTemplate;
use super::tokenizer::{self, Vocabulary};

/// Prompt tokens run through the model at a time: between two chunks the
/// loop checks for cancellation, so a long prompt can be abandoned.
const PROMPT_CHUNK: usize = 64;

/// What is known about a GGUF file from its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufInfo {
    pub path: PathBuf,
    /// `general.architecture` (`llama`, `qwen2`, `qwen3`, `phi3`).
    pub architecture: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    /// The context length the model was trained for.
    pub context_length: Option<u32>,
    /// The chat format Flynn renders for it (`chatml`, `llama3`, `phi3`).
    pub chat_format: &'static str,
    /// Whether its template has Qwen-style tool calls.
    pub tools: bool,
    /// The file's size in bytes.
    pub size: u64,
}

impl GgufInfo {
    /// The model family, as users know it.
    pub fn family(&self) -> &'static str {
        family(&self.architecture)
    }

    /// Whether Flynn can run this architecture.
    pub fn supported(&self) -> bool {
        Arch::from_name(&self.architecture).is_some()
    }

    /// The largest context Flynn runs this model with: the length it was
    /// trained for (2,048 when the file does not say), capped where
    /// candle's implementation of its architecture addresses fewer
    /// positions (Llama: 4,096). A provider's `context` can only lower it.
    pub fn max_context(&self) -> u32 {
        let trained = self.context_length.unwrap_or(DEFAULT_CONTEXT);
        Arch::from_name(&self.architecture)
            .and_then(Arch::limit)
            .map_or(trained, |limit| trained.min(limit))
    }
}

/// The context assumed for a file whose metadata has no length.
const DEFAULT_CONTEXT: u32 = 2048;

fn family(architecture: &str) -> &'static str {
    match architecture {
        "llama" => "llama",
        "qwen2" => "qwen2",
        "qwen3" => "qwen3",
        "phi3" => "phi3",
        _ => "unsupported",
    }
}

/// Reads the metadata of a GGUF file (not its weights).
pub fn inspect(path: &Path) -> Result<GgufInfo, String> {
    let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let content = Content::read(&mut file)
        .map_err(|e| format!("{} is not a GGUF file Flynn can read: {e}", path.display()))?;
    Ok(info(path, &content, size))
}

fn string(content: &Content, key: &str) -> Option<String> {
    content
        .metadata
        .get(key)
        .and_then(|v| v.to_string().ok())
        .cloned()
}

fn info(path: &Path, content: &Content, size: u64) -> GgufInfo {
    let architecture = string(content, "general.architecture").unwrap_or_default();
    let template = ChatTemplate::new(
        string(content, "tokenizer.chat_template").as_deref(),
        &architecture,
        None,
    );
    GgufInfo {
        path: path.to_path_buf(),
        context_length: content
            .metadata
            .get(&format!("{architecture}.context_length"))
            .and_then(|v| match v {
                Value::U32(n) => Some(*n),
                Value::U64(n) => u32::try_from(*n).ok(),
                Value::I32(n) => u32::try_from(*n).ok(),
                _ => None,
            }),
        name: string(content, "general.name"),
        chat_format: template.format.name(),
        tools: template.tools,
        architecture,
        size,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Phi3,
}

impl Arch {
    fn from_name(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "phi3" => Some(Arch::Phi3),
            _ => None,
        }
    }

    /// Positions candle's implementation can address, when it has a fixed
    /// limit below the file's.
    fn limit(self) -> Option<u32> {
        match self {
            Arch::Llama => u32::try_from(quantized_llama::MAX_SEQ_LEN).ok(),
            _ => None,
        }
    }
}

enum Weights {
    Llama(quantized_llama::ModelWeights),
    Qwen2(quantized_qwen2::ModelWeights),
    Qwen3(quantized_qwen3::ModelWeights),
    /// Phi-3's attention cache cannot be cleared: each call starts from a
    /// copy of the freshly loaded model (its tensors are shared, not
    /// copied).
    Phi3 {
        live: quantized_phi3::ModelWeights,
        /// Boxed: only read on reset, and it would double the enum's size.
        fresh: Box<quantized_phi3::ModelWeights>,
    },
}

impl Weights {
    fn forward(&mut self, input: &Tensor, position: usize) -> candle_core::Result<Tensor> {
        match self {
            Weights::Llama(m) => m.forward(input, position),
            Weights::Qwen2(m) => m.forward(input, position),
            Weights::Qwen3(m) => m.forward(input, position),
            Weights::Phi3 { live, .. } => live.forward(input, position),
        }
    }

    fn reset(&mut self) {
        match self {
            Weights::Llama(m) => m.clear_kv_cache(),
            Weights::Qwen2(m) => m.clear_kv_cache(),
            Weights::Qwen3(m) => m.clear_kv_cache(),
            Weights::Phi3 { live, fresh } => *live = (**fresh).clone(),
        }
    }
}

/// A loaded model: weights, tokenizer, chat template, stop tokens.
pub(crate) struct Engine {
    pub info: GgufInfo,
    pub template: ChatTemplate,
    /// The largest context the weights can run (the file's length, capped
    /// by candle's implementation).
    pub max_context: u32,
    tokenizer: Tokenizer,
    stops: Vec<u32>,
    weights: Weights,
    pool: rayon::ThreadPool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("info", &self.info)
            .field("max_context", &self.max_context)
            .finish_non_exhaustive()
    }
}

/// One generation: its prompt and limits.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    /// The context the provider runs with (`context`, capped).
    pub context: u32,
    pub temperature: Option<f32>,
    pub seed: u64,
}

/// What the generation loop reports, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Output {
    Text(String),
    Done {
        completion_tokens: u32,
        /// It stopped on `max_tokens` or the context's end, not on a stop
        /// token.
        truncated: bool,
    },
}

impl Engine {
    /// Loads the whole model. Slow (reads the weights): call on a blocking
    /// thread.
    pub fn load(path: &Path, threads: Option<u32>) -> Result<Engine, String> {
        let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        let content = Content::read(&mut file)
            .map_err(|e| format!("{} is not a GGUF file Flynn can read: {e}", path.display()))?;
        let info = info(path, &content, size);
        let Some(arch) = Arch::from_name(&info.architecture) else {
            return Err(format!(
                "{}: architecture '{}' is not supported (expected llama, qwen2, qwen3 or phi3)",
                path.display(),
                info.architecture
            ));
        };
        let (vocabulary, tokenizer) = tokenizer::from_gguf(&content)
            .map_err(|e| format!("{}: the tokenizer: {e}", path.display()))?;
        let bos = vocabulary
            .add_bos
            .then(|| vocabulary.bos.and_then(|id| vocabulary.token(id)))
            .flatten()
            .map(str::to_owned);
        let template = ChatTemplate::new(
            string(&content, "tokenizer.chat_template").as_deref(),
            &info.architecture,
            bos,
        );
        let stops = stop_ids(&vocabulary, &template);
        let max_context = info.max_context();
        let mut pool = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("flynn-llm-{i}"));
        if let Some(threads) = threads {
            pool = pool.num_threads(threads as usize);
        }
        let pool = pool
            .build()
            .map_err(|e| format!("cannot start the model's threads: {e}"))?;
        let device = Device::Cpu;
        let loading =
            |e: candle_core::Error| format!("{}: loading the weights: {e}", path.display());
        let weights = pool.install(|| -> Result<Weights, String> {
            let convert = needs_conversion(&content);
            let fits = convert && converted_bytes(&content) <= CONVERT_MAX_BYTES;
            if convert && !fits {
                tracing::warn!(
                    model = %path.display(),
                    "this model's Q4_1/Q5_0/Q5_1 weights run on candle's scalar kernels (too large to convert to Q8_0 in memory): a Q4_K_M or Q8_0 file of it runs several times faster"
                );
            }
            if fits {
                let (content, mut memory) =
                    convert_to_q8_0(content, &mut file, &device).map_err(loading)?;
                build_weights(arch, content, &mut memory, &device).map_err(loading)
            } else {
                build_weights(arch, content, &mut file, &device).map_err(loading)
            }
        })?;
        Ok(Engine {
            info,
            template,
            max_context,
            tokenizer,
            stops,
            weights,
            pool,
        })
    }

    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| format!("tokenizing the prompt: {e}"))
    }

    /// Runs one generation, sending text as it is made. Stops between two
    /// tokens (or two prompt chunks) once `cancel` is set or nobody
    /// listens any more. Adds each token it samples to `sampled`.
    pub fn generate(
        &mut self,
        job: &Job,
        cancel: &AtomicBool,
        sampled: &AtomicU64,
        send: &mut (dyn FnMut(Output) -> bool + Send),
    ) -> Result<(), String> {
        let Engine {
            tokenizer,
            stops,
            weights,
            pool,
            ..
        } = self;
        pool.install(|| {
            weights.reset();
            let run = |e: candle_core::Error| format!("running the model: {e}");
            let device = Device::Cpu;
            let mut logits = None;
            let mut position = 0;
            for chunk in job.prompt.chunks(PROMPT_CHUNK) {
                if cancel.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let input = Tensor::new(chunk, &device)
                    .and_then(|t| t.unsqueeze(0))
                    .map_err(run)?;
                logits = Some(weights.forward(&input, position).map_err(run)?);
                position += chunk.len();
            }
            let Some(mut logits) = logits else {
                return Err("the prompt is empty".to_owned());
            };
            let sampling = match job.temperature {
                Some(t) if t <= 0.0 => Sampling::ArgMax,
                Some(t) => Sampling::TopP {
                    p: 0.95,
                    temperature: f64::from(t),
                },
                None => Sampling::TopP {
                    p: 0.95,
                    temperature: 0.7,
                },
            };
            let mut sampler = LogitsProcessor::from_sampling(job.seed, sampling);
            let mut decoder = tokenizer.decode_stream(false);
            let mut generated: Vec<u32> = Vec::new();
            let limit = job.context as usize;
            loop {
                let last = logits
                    .squeeze(0)
                    .and_then(|l| l.to_dtype(candle_core::DType::F32))
                    .map_err(run)?;
                // A light repeat penalty over the recent tokens: small
                // models loop without one.
                let recent = &generated[generated.len().saturating_sub(64)..];
                let last = candle_transformers::utils::apply_repeat_penalty(&last, 1.1, recent)
                    .map_err(run)?;
                let token = sampler.sample(&last).map_err(run)?;
                sampled.fetch_add(1, Ordering::SeqCst);
                if stops.contains(&token) {
                    send(Output::Done {
                        completion_tokens: count(&generated),
                        truncated: false,
                    });
                    return Ok(());
                }
                generated.push(token);
                if let Some(text) = decoder.step(token).map_err(|e| format!("decoding: {e}"))?
                    && !text.is_empty()
                    && !send(Output::Text(text))
                {
                    return Ok(());
                }
                if generated.len() >= job.max_tokens as usize || position + 1 >= limit {
                    send(Output::Done {
                        completion_tokens: count(&generated),
                        truncated: true,
                    });
                    return Ok(());
                }
                if cancel.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let input = Tensor::new(&[token], &device)
                    .and_then(|t| t.unsqueeze(0))
                    .map_err(run)?;
                logits = weights.forward(&input, position).map_err(run)?;
                position += 1;
            }
        })
    }
}

/// Quantizations candle multiplies with scalar code only (no AVX2 or NEON
/// kernel): a 135M model in Q4_1 ran at about 2 tokens a second.
const SLOW_TYPES: [GgmlDType; 3] = [GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q5_1];

/// The largest model converted: the converted copy is built in memory
/// beside the file's, so a bigger one would need twice its size to load.
const CONVERT_MAX_BYTES: usize = 1 << 30;

/// Whether some weight matrix is of a type in [`SLOW_TYPES`].
fn needs_conversion(content: &Content) -> bool {
    content
        .tensor_infos
        .values()
        .any(|info| SLOW_TYPES.contains(&info.ggml_dtype))
}

/// The size of the weights once converted to Q8_0.
fn converted_bytes(content: &Content) -> usize {
    let q8 = GgmlDType::Q8_0;
    content
        .tensor_infos
        .values()
        .map(|info| {
            let dtype = if SLOW_TYPES.contains(&info.ggml_dtype) {
                q8
            } else {
                info.ggml_dtype
            };
            info.shape.elem_count() / dtype.block_size() * dtype.type_size()
        })
        .sum()
}

/// Rewrites the file in memory with every [`SLOW_TYPES`] tensor converted
/// to Q8_0, which has vector kernels (and is finer than the 4- and 5-bit
/// types, so nothing is lost but memory: about 1.7 times those tensors'
/// size). A tensor whose rows are not whole Q8_0 blocks stays as it is.
fn convert_to_q8_0(
    content: Content,
    file: &mut File,
    device: &Device,
) -> candle_core::Result<(Content, Cursor<Vec<u8>>)> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let tensor = content.tensor(file, name, device)?;
        let row = tensor.shape().dims().last().copied().unwrap_or(0);
        let tensor =
            if SLOW_TYPES.contains(&tensor.dtype()) && row % GgmlDType::Q8_0.block_size() == 0 {
                QTensor::quantize(&tensor.dequantize(device)?, GgmlDType::Q8_0)?
            } else {
                tensor
            };
        tensors.push((name.as_str(), tensor));
    }
    let mut metadata: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .map(|(key, value)| (key.as_str(), value))
        .collect();
    metadata.sort_by_key(|(key, _)| *key);
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut memory = Cursor::new(Vec::new());
    gguf_file::write(&mut memory, &metadata, &tensors)?;
    memory.set_position(0);
    let converted = Content::read(&mut memory)?;
    Ok((converted, memory))
}

fn build_weights<R: Read + Seek>(
    arch: Arch,
    content: Content,
    reader: &mut R,
    device: &Device,
) -> candle_core::Result<Weights> {
    Ok(match arch {
        Arch::Llama => Weights::Llama(quantized_llama::ModelWeights::from_gguf(
            content, reader, device,
        )?),
        Arch::Qwen2 => Weights::Qwen2(quantized_qwen2::ModelWeights::from_gguf(
            content, reader, device,
        )?),
        Arch::Qwen3 => Weights::Qwen3(quantized_qwen3::ModelWeights::from_gguf(
            content, reader, device,
        )?),
        Arch::Phi3 => {
            let fresh = quantized_phi3::ModelWeights::from_gguf(false, content, reader, device)?;
            Weights::Phi3 {
                live: fresh.clone(),
                fresh: Box::new(fresh),
            }
        }
    })
}

fn count(tokens: &[u32]) -> u32 {
    u32::try_from(tokens.len()).unwrap_or(u32::MAX)
}

/// The end-of-sequence token and the template's end-of-turn tokens.
fn stop_ids(vocabulary: &Vocabulary, template: &ChatTemplate) -> Vec<u32> {
    let mut stops: Vec<u32> = vocabulary.eos.into_iter().collect();
    for token in template.format.stop_tokens() {
        if let Some(id) = vocabulary.id(token)
            && !stops.contains(&id)
        {
            stops.push(id);
        }
    }
    stops
}

#[cfg(test)]
mod tests {
    use super::*;

    trait ReadSeek: Read + Seek {}
    impl<T: Read + Seek> ReadSeek for T {}

    /// SmolLM2-135M-Instruct, from `FLYNN_SMOLLM2` (what
    /// `scripts/fetch-smollm2.sh` prints).
    fn smollm2() -> PathBuf {
        match std::env::var_os("FLYNN_SMOLLM2") {
            Some(path) => PathBuf::from(path),
            None => panic!(
                "FLYNN_SMOLLM2 is not set: run `export FLYNN_SMOLLM2=$(scripts/fetch-smollm2.sh)` (.ci/run does)"
            ),
        }
    }

    #[test]
    fn smollm2s_tokenizer_gives_the_ids_of_its_vocabulary() {
        let path = smollm2();
        let mut file = File::open(&path).unwrap();
        let content = Content::read(&mut file).unwrap();
        let (vocabulary, tokenizer) = tokenizer::from_gguf(&content).unwrap();
        assert_eq!(
            (vocabulary.bos, vocabulary.eos, vocabulary.add_bos),
            (Some(1), Some(2), false)
        );
        // Ids looked up in the file's `tokenizer.ggml.tokens`: the chat
        // markers whole, `\n` as byte-level `Ċ`, words with their space
        // (`Ġworld`), digits one by one (SmolLM's split), `é` merged.
        let text = "<|im_start|>user\nHello, world! 2025 café<|im_end|>";
        let ids = tokenizer.encode(text, false).unwrap().get_ids().to_vec();
        assert_eq!(
            ids,
            vec![
                1, 4093, 198, 19556, 28, 905, 17, 216, 34, 32, 34, 37, 37366, 2
            ]
        );
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), text);
        let info = inspect(&path).unwrap();
        assert_eq!(
            (
                info.architecture.as_str(),
                info.family(),
                info.context_length,
                info.chat_format,
                info.tools
            ),
            ("llama", "llama", Some(8192), "chatml", false)
        );
        // Trained for 8,192, but candle's llama addresses 4,096 positions.
        assert_eq!(info.max_context(), 4096);
    }

    #[test]
    fn slow_quantizations_are_converted_to_q8_0_keeping_names_shapes_and_values() {
        let path = smollm2();
        let device = Device::Cpu;
        let mut file = File::open(&path).unwrap();
        let original = Content::read(&mut file).unwrap();
        assert!(needs_conversion(&original), "SmolLM2's file is Q4_1");
        // 135M weights: about 143 MB in Q8_0, well under the cap.
        let size = converted_bytes(&original);
        assert!((100_000_000..200_000_000).contains(&size), "{size}");
        let mut source = File::open(&path).unwrap();
        let (converted, mut memory) =
            convert_to_q8_0(Content::read(&mut source).unwrap(), &mut source, &device).unwrap();
        assert!(!needs_conversion(&converted));
        assert_eq!(
            converted
                .metadata
                .keys()
                .collect::<std::collections::BTreeSet<_>>(),
            original.metadata.keys().collect()
        );
        assert_eq!(converted.tensor_infos.len(), original.tensor_infos.len());
        let mut changed = 0;
        for (name, info) in &original.tensor_infos {
            let after = &converted.tensor_infos[name];
            assert_eq!(after.shape, info.shape, "{name}");
            if !SLOW_TYPES.contains(&info.ggml_dtype) {
                assert_eq!(after.ggml_dtype, info.ggml_dtype, "{name}");
                continue;
            }
            assert_eq!(after.ggml_dtype, GgmlDType::Q8_0, "{name}");
            changed += 1;
            // Q8_0 keeps each value within half a step of 1/127 of its
            // block's largest magnitude, so within 1/127 of the tensor's.
            let values = |content: &Content, mut reader: &mut dyn ReadSeek| {
                let tensor = content.tensor(&mut reader, name, &device).unwrap();
                tensor
                    .dequantize(&device)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
            };
            let before = values(&original, &mut file);
            let now = values(&converted, &mut memory);
            let largest = before.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = before
                .iter()
                .zip(&now)
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= largest / 127.0,
                "{name}: a value moved by {worst} (largest {largest})"
            );
        }
        assert!(changed > 0);
    }

    #[test]
    fn the_context_is_the_files_capped_by_what_the_implementation_addresses() {
        let info = |architecture: &str, context_length| GgufInfo {
            path: PathBuf::from("m.gguf"),
            architecture: architecture.to_owned(),
            name: None,
            context_length,
            chat_format: "chatml",
            tools: false,
            size: 0,
        };
        let llama_limit = u32::try_from(quantized_llama::MAX_SEQ_LEN).unwrap();
        assert_eq!(info("llama", Some(131_072)).max_context(), llama_limit);
        assert_eq!(info("llama", Some(2_000)).max_context(), 2_000);
        assert_eq!(info("qwen2", Some(32_768)).max_context(), 32_768);
        assert_eq!(info("qwen3", None).max_context(), DEFAULT_CONTEXT);
        assert_eq!(info("mamba", Some(9_000)).max_context(), 9_000);
    }
}
