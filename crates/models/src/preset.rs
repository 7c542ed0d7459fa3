//! What makes one kind of provider differ from another, as data: one row
//! per [`ProviderKind`]. The wire code reads these fields instead of asking
//! which server it is talking to, so a new OpenAI-compatible server is a new
//! row, not new `if`s.
//!
//! Each row follows the vendor's own documentation (the sources are named
//! beside it); where a vendor does not document a field, the row sends
//! nothing that vendor might refuse.

use flynn_protocol::config::ProviderKind;

/// The request field that caps the answer's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MaxTokensField {
    /// `max_tokens`: what compatible servers know.
    MaxTokens,
    /// `max_completion_tokens`: OpenAI's current name (its reasoning models
    /// refuse the old one), also Groq's.
    MaxCompletionTokens,
}

/// Where a server says how large a context it serves a model with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detection {
    /// Ollama: `POST /api/show {"model": ...}`.
    OllamaShow,
    /// llama.cpp's `llama-server`: `GET /props`.
    LlamacppProps,
}

/// The per-kind data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Preset {
    pub max_tokens_field: MaxTokensField,
    /// Whether `stream_options: {"include_usage": true}` is sent. Only where
    /// the vendor documents it, or where unknown fields are ignored.
    pub stream_usage: bool,
    /// Headers every request carries. Configured `headers` replace them.
    pub headers: &'static [(&'static str, &'static str)],
    /// How the context window can be asked of the server, if it can.
    pub detection: Option<Detection>,
    /// A per-request input limit the service imposes whatever the model
    /// could take; applied to the built-in table (never to configured or
    /// detected windows).
    pub context_cap: Option<u32>,
    /// The context window assumed for a model neither configured, detected
    /// nor in the built-in table.
    pub default_window: u32,
}

/// Assumed window of an unknown model on a server people run themselves:
/// small enough that a small model's real window is rarely below it.
pub(crate) const SELF_HOSTED_DEFAULT_WINDOW: u32 = 8_192;

/// Assumed window of an unknown model behind a hosted API: every current
/// hosted chat model takes at least this much.
pub(crate) const REMOTE_DEFAULT_WINDOW: u32 = 128_000;

/// OpenAI's own API (API reference, "Create chat completion"):
/// `max_completion_tokens`, `stream_options.include_usage`.
const OPENAI: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxCompletionTokens,
    stream_usage: true,
    headers: &[],
    detection: None,
    context_cap: None,
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// A server that claims OpenAI compatibility: `stream_options` is part of
/// the API it claims; `max_tokens` is the name every such server knows.
const OPENAI_COMPATIBLE: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_usage: true,
    headers: &[],
    detection: None,
    context_cap: None,
    default_window: SELF_HOSTED_DEFAULT_WINDOW,
};

/// Ollama ("OpenAI compatibility", supported request fields: `max_tokens`,
/// `stream_options.include_usage`). Its context comes from `/api/show`.
const OLLAMA: Preset = Preset {
    detection: Some(Detection::OllamaShow),
    ..OPENAI_COMPATIBLE
};

/// llama.cpp's server ("OpenAI-compatible API", `GET /props`). It reads
/// the fields it knows and ignores the rest.
const LLAMACPP: Preset = Preset {
    detection: Some(Detection::LlamacppProps),
    ..OPENAI_COMPATIBLE
};

/// vLLM's OpenAI-compatible server documents both `max_tokens` and
/// `stream_options`. LM Studio reuses OpenAI's clients and ignores fields
/// it does not know.
const SELF_HOSTED: Preset = OPENAI_COMPATIBLE;

/// OpenRouter ("App Attribution"): `HTTP-Referer` names the app and
/// `X-Title` its display name; both optional, both replaceable through
/// `headers`. Usage arrives in the last chunk.
const OPENROUTER: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_usage: true,
    headers: &[
        ("http-referer", "https://github.com/flynn-agent/flynn"),
        ("x-title", "Flynn"),
    ],
    detection: None,
    context_cap: None,
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// GitHub Models ("REST API endpoints for models inference"): the
/// recommended `Accept: application/vnd.github+json` and the REST API
/// version header; `max_tokens` and `stream_options` are its documented
/// body parameters. Its free tier takes at most 8,000 input tokens per
/// request, whatever the model could take.
const GITHUB_MODELS: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_usage: true,
    headers: &[
        ("accept", "application/vnd.github+json"),
        ("x-github-api-version", "2022-11-28"),
    ],
    detection: None,
    context_cap: Some(8_000),
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// Groq (API reference, "Create chat completion"): `max_tokens` is
/// deprecated in favour of `max_completion_tokens`; `stream_options` is
/// documented.
const GROQ: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxCompletionTokens,
    stream_usage: true,
    headers: &[],
    detection: None,
    context_cap: None,
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// Gemini's OpenAI-compatible endpoint ("OpenAI compatibility", and the
/// supported-parameter list of the same endpoint on Vertex AI): `max_tokens`
/// is listed, `stream_options` is not, and the endpoint refuses fields it
/// does not know ("Invalid JSON payload received. Unknown name ..."). It
/// reports usage in its chunks unasked.
const GEMINI: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_usage: false,
    headers: &[],
    detection: None,
    context_cap: None,
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// Kinds that do not speak Chat Completions (Anthropic, Bedrock): only the
/// window fields apply.
const OTHER_REMOTE: Preset = Preset {
    max_tokens_field: MaxTokensField::MaxTokens,
    stream_usage: false,
    headers: &[],
    detection: None,
    context_cap: None,
    default_window: REMOTE_DEFAULT_WINDOW,
};

/// The row for `kind`.
pub(crate) fn preset(kind: ProviderKind) -> &'static Preset {
    match kind {
        ProviderKind::Openai => &OPENAI,
        ProviderKind::OpenaiCompatible => &OPENAI_COMPATIBLE,
        ProviderKind::Ollama => &OLLAMA,
        ProviderKind::Llamacpp => &LLAMACPP,
        ProviderKind::Vllm | ProviderKind::Lmstudio => &SELF_HOSTED,
        ProviderKind::Openrouter => &OPENROUTER,
        ProviderKind::GithubModels => &GITHUB_MODELS,
        ProviderKind::Groq => &GROQ,
        ProviderKind::Gemini => &GEMINI,
        ProviderKind::Anthropic | ProviderKind::Bedrock | ProviderKind::Local => &OTHER_REMOTE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_hosted_kinds_assume_a_small_window_and_hosted_ones_a_large_one() {
        for kind in ProviderKind::ALL {
            let expected = if kind.is_self_hosted() || kind == ProviderKind::OpenaiCompatible {
                SELF_HOSTED_DEFAULT_WINDOW
            } else {
                REMOTE_DEFAULT_WINDOW
            };
            assert_eq!(preset(kind).default_window, expected, "{kind}");
        }
    }

    #[test]
    fn only_servers_that_can_say_are_asked_for_their_window() {
        let asked: Vec<(ProviderKind, Detection)> = ProviderKind::ALL
            .into_iter()
            .filter_map(|kind| preset(kind).detection.map(|d| (kind, d)))
            .collect();
        assert_eq!(
            asked,
            vec![
                (ProviderKind::Ollama, Detection::OllamaShow),
                (ProviderKind::Llamacpp, Detection::LlamacppProps),
            ]
        );
    }

    #[test]
    fn preset_header_names_are_lower_case_and_valid() {
        for kind in ProviderKind::ALL {
            for (name, value) in preset(kind).headers {
                assert_eq!(*name, name.to_ascii_lowercase(), "{kind}");
                assert!(
                    reqwest::header::HeaderName::from_static(name).as_str() == *name
                        && reqwest::header::HeaderValue::from_str(value).is_ok(),
                    "{kind}: {name}: {value}"
                );
            }
        }
    }
}
