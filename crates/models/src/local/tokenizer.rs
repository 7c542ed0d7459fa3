//! The tokenizer of a GGUF file, built from its `tokenizer.ggml.*`
//! metadata alone (no `tokenizer.json` beside it):
//! - `gpt2` (byte-level BPE: SmolLM2, Qwen, Llama 3): the vocabulary and
//!   the merges as written, split into words the way llama.cpp's
//!   pre-tokenizer named by `tokenizer.ggml.pre` does;
//! - `llama` (SentencePiece BPE: Llama 2, Phi-3, Mistral): the file has
//!   pieces and scores but no merges, so the merges are derived from them
//!   (a pair merges when the piece it makes is in the vocabulary, the
//!   higher-scored piece first), with byte fallback for what the
//!   vocabulary lacks and `▁` for spaces.
//!
//! Control and user-defined tokens (`<|im_start|>`) are special tokens:
//! they are matched whole in the rendered prompt.

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers_gguf::decoders::DecoderWrapper;
use tokenizers_gguf::decoders::byte_fallback::ByteFallback;
use tokenizers_gguf::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers_gguf::decoders::fuse::Fuse;
use tokenizers_gguf::decoders::sequence::Sequence as DecoderSequence;
use tokenizers_gguf::decoders::strip::Strip;
use tokenizers_gguf::models::bpe::{BPE, Vocab};
use tokenizers_gguf::normalizers::unicode::NFC;
use tokenizers_gguf::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers_gguf::pre_tokenizers::byte_level::ByteLevel;
use tokenizers_gguf::pre_tokenizers::digits::Digits;
use tokenizers_gguf::pre_tokenizers::sequence::Sequence;
use tokenizers_gguf::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers_gguf::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Qwen2's word split (llama.cpp `LLAMA_VOCAB_PRE_TYPE_QWEN2`).
const SPLIT_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's (`LLAMA_VOCAB_PRE_TYPE_LLAMA3`): numbers in groups of three.
const SPLIT_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's token types.
const TYPE_NORMAL: u32 = 1;
const TYPE_CONTROL: u32 = 3;
const TYPE_USER_DEFINED: u32 = 4;

/// What the metadata says about the tokenizer, read once.
#[derive(Debug)]
pub(crate) struct Vocabulary {
    pub tokens: Vec<String>,
    pub types: Vec<u32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
}

impl Vocabulary {
    pub fn id(&self, token: &str) -> Option<u32> {
        self.tokens
            .iter()
            .position(|t| t == token)
            .and_then(|i| u32::try_from(i).ok())
    }

    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }
}

fn get<'a>(content: &'a Content, key: &str) -> Result<&'a Value, String> {
    content
        .metadata
        .get(key)
        .ok_or_else(|| format!("the file has no `{key}` in its metadata"))
}

fn strings(content: &Content, key: &str) -> Result<Vec<String>, String> {
    let values = get(content, key)?
        .to_vec()
        .map_err(|_| format!("`{key}` is not a list"))?;
    values
        .iter()
        .map(|v| {
            v.to_string()
                .cloned()
                .map_err(|_| format!("`{key}` holds something other than strings"))
        })
        .collect()
}

/// A number of any integer type.
fn integer(value: &Value) -> Option<u32> {
    match value {
        Value::U8(v) => Some(u32::from(*v)),
        Value::I8(v) => u32::try_from(*v).ok(),
        Value::U16(v) => Some(u32::from(*v)),
        Value::I16(v) => u32::try_from(*v).ok(),
        Value::U32(v) => Some(*v),
        Value::I32(v) => u32::try_from(*v).ok(),
        Value::U64(v) => u32::try_from(*v).ok(),
        Value::I64(v) => u32::try_from(*v).ok(),
        _ => None,
    }
}

fn optional_id(content: &Content, key: &str) -> Option<u32> {
    content.metadata.get(key).and_then(integer)
}

fn flag(content: &Content, key: &str) -> Option<bool> {
    content.metadata.get(key).and_then(|v| v.to_bool().ok())
}

/// The vocabulary and the tokenizer of `content`.
pub(crate) fn from_gguf(content: &Content) -> Result<(Vocabulary, Tokenizer), String> {
    let model = get(content, "tokenizer.ggml.model")?
        .to_string()
        .map_err(|_| "`tokenizer.ggml.model` is not a string".to_owned())?
        .clone();
    let tokens = strings(content, "tokenizer.ggml.tokens")?;
    let types = match content.metadata.get("tokenizer.ggml.token_type") {
        Some(value) => value
            .to_vec()
            .map_err(|_| "`tokenizer.ggml.token_type` is not a list".to_owned())?
            .iter()
            .map(|v| integer(v).unwrap_or(TYPE_NORMAL))
            .collect(),
        None => vec![TYPE_NORMAL; tokens.len()],
    };
    if types.len() != tokens.len() {
        return Err(format!(
            "`tokenizer.ggml.token_type` has {} entries for {} tokens",
            types.len(),
            tokens.len()
        ));
    }
    let vocabulary = Vocabulary {
        bos: optional_id(content, "tokenizer.ggml.bos_token_id"),
        eos: optional_id(content, "tokenizer.ggml.eos_token_id"),
        add_bos: flag(content, "tokenizer.ggml.add_bos_token").unwrap_or(model == "llama"),
        tokens,
        types,
    };
    let mut tokenizer = match model.as_str() {
        "gpt2" => byte_level(content, &vocabulary)?,
        "llama" => sentencepiece(content, &vocabulary)?,
        other => {
            return Err(format!(
                "tokenizer model '{other}' is not supported (expected 'gpt2' or 'llama')"
            ));
        }
    };
    let specials: Vec<AddedToken> = vocabulary
        .tokens
        .iter()
        .zip(&vocabulary.types)
        .filter(|(_, kind)| matches!(**kind, TYPE_CONTROL | TYPE_USER_DEFINED))
        .map(|(token, _)| AddedToken::from(token.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(specials)
        .map_err(|e| format!("the special tokens: {e}"))?;
    Ok((vocabulary, tokenizer))
}

fn vocab_map(tokens: &[String]) -> Result<Vocab, String> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            u32::try_from(i)
                .map(|i| (t.clone(), i))
                .map_err(|_| "too many tokens".to_owned())
        })
        .collect()
}

fn byte_level(content: &Content, vocabulary: &Vocabulary) -> Result<Tokenizer, String> {
    let merges = strings(content, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|merge| {
            merge
                .split_once(' ')
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
                .ok_or_else(|| {
                    format!("`tokenizer.ggml.merges` has an entry without a space: {merge:?}")
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab_map(&vocabulary.tokens)?, merges)
        .build()
        .map_err(|e| format!("the BPE vocabulary: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let pre = content
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map_or("default", String::as_str);
    let split = |pattern: &str| -> Result<Sequence, String> {
        let split = Split::new(
            SplitPattern::Regex(pattern.to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| format!("the word split of '{pre}': {e}"))?;
        Ok(Sequence::new(vec![
            split.into(),
            ByteLevel::new(false, false, false).into(),
        ]))
    };
    match pre {
        "qwen2" | "deepseek-r1-qwen" => {
            tokenizer
                .with_normalizer(Some(NFC))
                .map_err(|e| e.to_string())?;
            tokenizer.with_pre_tokenizer(Some(split(SPLIT_QWEN2)?));
        }
        "llama3" | "llama-bpe" | "smaug-bpe" => {
            tokenizer.with_pre_tokenizer(Some(split(SPLIT_LLAMA3)?));
        }
        // StarCoder-style vocabularies (SmolLM's): every digit alone,
        // then GPT-2's split.
        "smollm" | "starcoder" | "refact" | "codeshell" => {
            tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, false, true).into(),
            ])));
        }
        _ => {
            tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, false, true)));
        }
    }
    tokenizer.with_decoder(Some(ByteLevelDecoder::new(false, false, true)));
    Ok(tokenizer)
}

fn sentencepiece(content: &Content, vocabulary: &Vocabulary) -> Result<Tokenizer, String> {
    let scores: Vec<f32> = match content.metadata.get("tokenizer.ggml.scores") {
        Some(value) => value
            .to_vec()
            .map_err(|_| "`tokenizer.ggml.scores` is not a list".to_owned())?
            .iter()
            .map(|v| v.to_f32().unwrap_or(0.0))
            .collect(),
        None => return Err("a 'llama' tokenizer needs `tokenizer.ggml.scores`".to_owned()),
    };
    let ids = vocab_map(&vocabulary.tokens)?;
    // Every way a normal piece splits into two pieces of the vocabulary,
    // ranked by the score of the piece the merge makes.
    let mut ranked: Vec<(f32, u32, u32, &str, &str)> = Vec::new();
    for (i, piece) in vocabulary.tokens.iter().enumerate() {
        if vocabulary.types[i] != TYPE_NORMAL && vocabulary.types[i] != TYPE_USER_DEFINED {
            continue;
        }
        let score = scores.get(i).copied().unwrap_or(0.0);
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(l), Some(r)) = (ids.get(left), ids.get(right)) {
                ranked.push((score, *l, *r, left, right));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges = ranked
        .into_iter()
        .map(|(_, _, _, l, r)| (l.to_owned(), r.to_owned()))
        .collect();
    let unknown = optional_id(content, "tokenizer.ggml.unknown_token_id")
        .and_then(|id| vocabulary.token(id))
        .unwrap_or("<unk>")
        .to_owned();
    let bpe = BPE::builder()
        .vocab_and_merges(ids, merges)
        .unk_token(unknown)
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(|e| format!("the SentencePiece vocabulary: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let space_prefix = flag(content, "tokenizer.ggml.add_space_prefix").unwrap_or(true);
    let replace = Replace::new(" ", "▁").map_err(|e| e.to_string())?;
    let normalizer = if space_prefix {
        NormalizerSequence::new(vec![Prepend::new("▁".to_owned()).into(), replace.into()])
    } else {
        NormalizerSequence::new(vec![replace.into()])
    };
    tokenizer
        .with_normalizer(Some(normalizer))
        .map_err(|e| e.to_string())?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        tokenizers_gguf::decoders::DecoderWrapper::Replace(
            Replace::new("▁", " ").map_err(|e| e.to_string())?,
        ),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    tokenizer.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(tokenizer)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn content(entries: Vec<(&str, Value)>) -> Content {
        Content {
            magic: candle_core::quantized::gguf_file::VersionedMagic::GgufV3,
            metadata: entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            tensor_infos: HashMap::new(),
            tensor_data_offset: 0,
        }
    }

    fn list(items: &[&str]) -> Value {
        Value::Array(
            items
                .iter()
                .map(|s| Value::String((*s).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn a_sentencepiece_vocabulary_gets_merges_from_its_scores() {
        let tokens = [
            "<unk>", "<s>", "</s>", "<0x21>", "▁", "h", "i", "▁h", "▁hi", "hi",
        ];
        let types = [2, 3, 3, 6, 1, 1, 1, 1, 1, 1];
        let scores = [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -0.5, -0.1, -0.7];
        let content = content(vec![
            ("tokenizer.ggml.model", Value::String("llama".into())),
            ("tokenizer.ggml.tokens", list(&tokens)),
            (
                "tokenizer.ggml.token_type",
                Value::Array(types.iter().map(|t| Value::I32(*t)).collect()),
            ),
            (
                "tokenizer.ggml.scores",
                Value::Array(scores.iter().map(|s| Value::F32(*s)).collect()),
            ),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ]);
        let (vocabulary, tokenizer) = from_gguf(&content).unwrap();
        assert!(vocabulary.add_bos);
        let ids = tokenizer
            .encode("hi hi!", false)
            .unwrap()
            .get_ids()
            .to_vec();
        // "▁hi" twice, then "!" through byte fallback.
        assert_eq!(ids, vec![8, 8, 3]);
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), "hi hi!");
    }

    #[test]
    fn an_unknown_tokenizer_model_is_named() {
        let content = content(vec![
            ("tokenizer.ggml.model", Value::String("bert".into())),
            ("tokenizer.ggml.tokens", list(&["a"])),
        ]);
        assert_eq!(
            from_gguf(&content).map(|_| ()).unwrap_err(),
            "tokenizer model 'bert' is not supported (expected 'gpt2' or 'llama')"
        );
    }
}
