//! The browser tools against the real Chromium (Debian's `chromium`,
//! installed by `scripts/install-test-deps.sh`) and pages served by the
//! test on loopback. Without a browser these tests fail, naming the
//! command that installs one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::get;
use flynn_protocol::config::BrowserToolConfig;
use flynn_protocol::{SessionKey, ToolEffect};
use flynn_tools::builtin::browser::{self, Browsers};
use flynn_tools::{Tool, ToolError};

use super::*;

const FORM: &str = "<!doctype html><html><head><title>Order a shirt</title></head><body>\
<h1>Order a shirt</h1><p>Price: 12.50 EUR</p>\
<form action=\"/submit\" method=\"get\">\
<label>Name <input name=\"name\"></label>\
<label>Size <select name=\"size\"><option>Small</option><option>Medium</option><option>Large</option></select></label>\
<button type=\"submit\">Send order</button></form></body></html>";

/// Fails the test when no browser is installed, saying how to get one.
fn require_chromium() {
    if let Err(error) = browser::find_executable(None) {
        panic!(
            "the browser tests need Chromium: {error}; run scripts/install-test-deps.sh \
             (it runs `apt-get install chromium`)"
        );
    }
}

async fn serve_on(ip: &str, router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The shop: a form, its result, a redirect and an image to the blocked
/// server, and a cookie.
fn shop(blocked: SocketAddr) -> Router {
    Router::new()
        .route("/form", get(|| async { Html(FORM) }))
        .route(
            "/submit",
            get(|Query(form): Query<BTreeMap<String, String>>| async move {
                let field = |name: &str| escape(form.get(name).map_or("", String::as_str));
                Html(format!(
                    "<!doctype html><html><head><title>Thanks</title></head><body>\
                     <h1>Order received</h1><p>Name: {}</p><p>Size: {}</p></body></html>",
                    field("name"),
                    field("size")
                ))
            }),
        )
        .route(
            "/redirect",
            get(move || async move { Redirect::temporary(&format!("http://{blocked}/secret")) }),
        )
        .route(
            "/image",
            get(move || async move {
                Html(format!(
                    "<!doctype html><html><head><title>Pictures</title></head><body>\
                     <p>A picture:</p><img alt=\"secret\" src=\"http://{blocked}/pixel.png\">\
                     </body></html>"
                ))
            }),
        )
        .route(
            "/hop",
            get(|| async {
                Html(
                    "<!doctype html><title>Hop</title>\
                     <script>location.replace('/form')</script><img src=\"/slow\">",
                )
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                "late"
            }),
        )
        .route(
            "/long",
            get(|| async {
                Html(
                    "<!doctype html><title>Long</title>\
                     <div style=\"height: 3000px\">A tall page</div><p>The end</p>",
                )
            }),
        )
        .route(
            "/files",
            get(|| async {
                Html(
                    "<!doctype html><title>Files</title>\
                     <a href=\"/report.txt\">The report</a>",
                )
            }),
        )
        .route(
            "/report.txt",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/plain"),
                        (
                            header::CONTENT_DISPOSITION,
                            "attachment; filename=\"report.txt\"",
                        ),
                    ],
                    "quarterly numbers\n",
                )
            }),
        )
        .route(
            "/set",
            get(|| async {
                (
                    [(
                        header::SET_COOKIE,
                        "flynn=kept; Max-Age=3600; Path=/; SameSite=Lax",
                    )],
                    Html("<!doctype html><title>Set</title><p>cookie set</p>"),
                )
            }),
        )
        .route(
            "/show",
            get(|headers: HeaderMap| async move {
                let cookie = headers
                    .get(header::COOKIE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned();
                Html(format!(
                    "<!doctype html><title>Show</title><p>Cookie: {}</p>",
                    escape(&cookie)
                ))
            }),
        )
}

/// A server on 127.0.0.2, which the tests' allow list leaves out;
/// counts every request that reaches it.
async fn blocked_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, "secret").into_response()
        }
    });
    (serve_on("127.0.0.2", router).await, hits)
}

struct Env {
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    browsers: Browsers,
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

fn config() -> BrowserToolConfig {
    BrowserToolConfig {
        // Only 127.0.0.1: the blocked server on 127.0.0.2 stays out.
        allow_private: vec!["127.0.0.1".into()],
        timeout_secs: 20,
        ..BrowserToolConfig::default()
    }
}

impl Env {
    fn new() -> Env {
        Env::with(Browsers::new)
    }

    fn with(make: impl FnOnce(&BrowserToolConfig, PathBuf) -> Browsers) -> Env {
        require_chromium();
        let home = tempfile::tempdir().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let browsers = make(&config(), home.path().join("browser"));
        let tools = browser::tools(&browsers)
            .into_iter()
            .map(|tool| (tool.name().to_owned(), tool))
            .collect();
        Env {
            home,
            workspace,
            browsers,
            tools,
        }
    }

    fn ctx(&self, session: &str) -> ToolContext {
        let mut ctx = ToolContext::new(self.workspace.path());
        ctx.session = SessionKey::new("test", session).unwrap();
        ctx
    }

    async fn call(&self, session: &str, tool: &str, args: Value) -> Result<String, ToolError> {
        self.tools[tool].call(args, &self.ctx(session)).await
    }

    async fn ok(&self, session: &str, tool: &str, args: Value) -> String {
        match self.call(session, tool, args.clone()).await {
            Ok(output) => output,
            Err(error) => panic!("{tool} {args} failed: {error}"),
        }
    }
}

/// The number the snapshot gives the line that starts with `role "name"`.
fn number_of(snapshot: &str, element: &str) -> u32 {
    snapshot
        .lines()
        .find_map(|line| {
            let rest = line.trim_start().strip_prefix('[')?;
            let (number, described) = rest.split_once("] ")?;
            described
                .starts_with(element)
                .then(|| number.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {element} in the snapshot:\n{snapshot}"))
}

#[test]
fn browser_tools_declare_effects_serial_calls_and_untrusted_output() {
    let browsers = Browsers::new(&BrowserToolConfig::default(), std::env::temp_dir());
    let declared: Vec<(String, ToolEffect, bool, bool)> = browser::tools(&browsers)
        .iter()
        .map(|t| {
            (
                t.name().to_owned(),
                t.effect(),
                t.parallel_safe(),
                t.untrusted_output(),
            )
        })
        .collect();
    let expected = [
        ("browser.open", ToolEffect::Network, false, true),
        ("browser.snapshot", ToolEffect::ReadOnly, false, true),
        ("browser.click", ToolEffect::Network, false, true),
        ("browser.type", ToolEffect::Network, false, true),
        ("browser.select", ToolEffect::Network, false, true),
        ("browser.scroll", ToolEffect::ReadOnly, false, true),
        ("browser.content", ToolEffect::ReadOnly, false, true),
        ("browser.screenshot", ToolEffect::ReadOnly, false, true),
        ("browser.close", ToolEffect::ReadOnly, false, false),
    ]
    .map(|(n, e, p, u)| (n.to_owned(), e, p, u));
    assert_eq!(declared, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_is_filled_in_submitted_and_its_result_read() {
    let env = Env::new();
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    let opened = env
        .ok(
            "a",
            "browser.open",
            json!({"url": format!("http://{shop}/form")}),
        )
        .await;
    assert_eq!(
        opened,
        format!(
            "Opened http://{shop}/form\nTitle: Order a shirt\n\nbrowser.snapshot shows its \
             elements to click or type into; browser.content its text."
        )
    );
    let snapshot = env.ok("a", "browser.snapshot", json!({})).await;
    assert_eq!(
        snapshot,
        format!(
            "URL: http://{shop}/form\nTitle: Order a shirt\n\n\
             heading \"Order a shirt\" (level 1)\n\
             Price: 12.50 EUR\n\
             Name\n\
             [1] textbox \"Name\"\n\
             Size\n\
             [2] combobox \"Size\" value=\"Small\"\n\
             \x20 - option \"Small\" (selected)\n\
             \x20 - option \"Medium\"\n\
             \x20 - option \"Large\"\n\
             [3] button \"Send order\"\n"
        )
    );

    // The price, read through the executor: marked as untrusted.
    let executor = executor_with(
        {
            let mut registry = ToolRegistry::new();
            for tool in env.tools.values() {
                registry.register_dyn(tool.clone());
            }
            registry
        },
        50 * 1024,
    );
    let ctx = env.ctx("a");
    let read = executor
        .execute(&call("browser.content", json!({})), &ctx)
        .await;
    assert!(!read.is_error, "{}", read.content);
    assert!(flynn_tools::is_untrusted(&read.content), "{}", read.content);
    assert!(
        read.content.contains("Price: 12.50 EUR"),
        "{}",
        read.content
    );
    assert_eq!(ctx.provenance.untrusted_source(), Some("browser.content"));

    let name = number_of(&snapshot, "textbox \"Name\"");
    let size = number_of(&snapshot, "combobox \"Size\"");
    let send = number_of(&snapshot, "button \"Send order\"");
    assert_eq!(
        env.ok(
            "a",
            "browser.type",
            json!({"element": name, "text": "Ada Lovelace"})
        )
        .await,
        format!("Typed 12 characters into [{name}] textbox \"Name\".\n")
    );
    assert_eq!(
        env.ok(
            "a",
            "browser.select",
            json!({"element": size, "option": "large"})
        )
        .await,
        format!("Selected \"Large\" in [{size}] combobox \"Size\".\n")
    );
    let missing = env
        .call(
            "a",
            "browser.select",
            json!({"element": size, "option": "XXL"}),
        )
        .await;
    assert_eq!(
        missing,
        Err(ToolError::failed(format!(
            "element {size} (combobox) has no option 'XXL' (3 options; the latest \
             browser.snapshot lists them under it)"
        )))
    );
    let clicked = env.ok("a", "browser.click", json!({"element": send})).await;
    let result_url = format!("http://{shop}/submit?name=Ada+Lovelace&size=Large");
    assert_eq!(
        clicked,
        format!(
            "Clicked [{send}] button \"Send order\".\nThe page is now {result_url} (Thanks).\n\
             browser.snapshot shows its elements; browser.content its text.\n"
        )
    );
    let content = env.ok("a", "browser.content", json!({})).await;
    assert!(
        content.contains("Name: Ada Lovelace") && content.contains("Size: Large"),
        "{content}"
    );

    // The numbers of the form's snapshot belong to the form's page.
    assert_eq!(
        env.call("a", "browser.click", json!({"element": send}))
            .await,
        Err(ToolError::failed(format!(
            "element {send} is from a snapshot of an earlier page (the browser has since moved \
             on to {result_url}); call browser.snapshot and use its numbers"
        )))
    );
    let thanks = env.ok("a", "browser.snapshot", json!({})).await;
    assert!(
        thanks.ends_with("No elements to click or type into.\n"),
        "{thanks}"
    );
    assert_eq!(
        env.call("a", "browser.click", json!({"element": 99})).await,
        Err(ToolError::failed(
            "element 99 is not in the latest snapshot, which numbers no elements; \
             browser.snapshot again if the page changed"
        ))
    );
    // A session without a snapshot is told to take one.
    env.ok(
        "b",
        "browser.open",
        json!({"url": format!("http://{shop}/form")}),
    )
    .await;
    assert_eq!(
        env.call("b", "browser.type", json!({"element": 1, "text": "x"}))
            .await,
        Err(ToolError::failed(
            "there is no snapshot of this page yet: call browser.snapshot, then use the numbers \
             it shows"
        ))
    );
    let scrolled = env
        .ok("b", "browser.scroll", json!({"direction": "bottom"}))
        .await;
    assert!(
        scrolled.starts_with("Scrolled bottom.\nShowing 0-"),
        "{scrolled}"
    );
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_to_addresses_outside_the_allow_list_are_refused_wherever_they_come_from() {
    let env = Env::new();
    let (blocked, hits) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    let refusal = "refused 127.0.0.2: 127.0.0.2 is a loopback address, and private networks \
                   are off limits. If this host is trusted, add '127.0.0.2' to \
                   tools.browser.allow_private";

    // Straight there.
    assert_eq!(
        env.call(
            "a",
            "browser.open",
            json!({"url": format!("http://{blocked}/")})
        )
        .await,
        Err(ToolError::failed(refusal))
    );
    // Through a redirect of an allowed page.
    assert_eq!(
        env.call(
            "a",
            "browser.open",
            json!({"url": format!("http://{shop}/redirect")})
        )
        .await,
        Err(ToolError::failed(refusal))
    );
    // As an image of an allowed page.
    let opened = env
        .ok(
            "a",
            "browser.open",
            json!({"url": format!("http://{shop}/image")}),
        )
        .await;
    assert!(
        opened.starts_with(&format!(
            "Opened http://{shop}/image\nTitle: Pictures\nBlocked "
        )) && opened.contains(&format!("of this page:\n- {refusal}\n")),
        "{opened}"
    );
    // The browser has no DevTools port to reach: it is driven over a
    // pipe, and listens on nothing.
    let session = env.ctx("a").session;
    let pid = env.browsers.pid(&session).await.unwrap();
    assert_eq!(listening_ports(pid), Vec::<u16>::new());
    assert!(
        !env.browsers
            .profile_dir(&session)
            .join("DevToolsActivePort")
            .exists()
    );
    // Its proxy's own port, though 127.0.0.1 is allowed.
    let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap();
    let port = cmdline
        .split('\0')
        .find_map(|arg| arg.strip_prefix("--proxy-server=http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no --proxy-server in {cmdline:?}"));
    assert_eq!(
        env.call(
            "a",
            "browser.open",
            json!({"url": format!("http://127.0.0.1:{port}/")})
        )
        .await,
        Err(ToolError::failed(format!(
            "refused 127.0.0.1:{port}: it is the browser's own proxy, which pages may never reach"
        )))
    );
    assert_eq!(
        env.call("a", "browser.open", json!({"url": "file:///etc/passwd"}))
            .await,
        Err(ToolError::failed(
            "cannot open file:///etc/passwd: the browser opens only http and https URLs"
        ))
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a request reached 127.0.0.2"
    );
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_that_moves_on_before_it_loads_opens_where_it_lands() {
    let env = Env::new();
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    // /hop never loads (its image takes a minute): its script moves on
    // to the form first.
    let started = Instant::now();
    let opened = env
        .ok(
            "a",
            "browser.open",
            json!({"url": format!("http://{shop}/hop")}),
        )
        .await;
    assert_eq!(
        opened,
        format!(
            "Opened http://{shop}/form\nTitle: Order a shirt\n\nbrowser.snapshot shows its \
             elements to click or type into; browser.content its text."
        )
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_screenshot_is_a_png_file_in_the_workspace() {
    let env = Env::new();
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/form")}),
    )
    .await;
    let ctx = env.ctx("a");
    let saved = env.tools["browser.screenshot"]
        .call(json!({}), &ctx)
        .await
        .unwrap();
    let path = saved
        .lines()
        .find_map(|line| line.strip_prefix("Path: "))
        .unwrap_or_else(|| panic!("no path in: {saved}"));
    let path = Path::new(path);
    assert!(
        path.starts_with(
            env.workspace
                .path()
                .canonicalize()
                .unwrap()
                .join("screenshots")
        ),
        "{saved}"
    );
    let png = std::fs::read(path).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The same PNG goes to the model beside the text.
    assert_eq!(
        ctx.attachments.take(),
        vec![flynn_tools::AttachedImage {
            media_type: "image/png".into(),
            data: png.clone(),
        }]
    );
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert!(width >= 200 && height >= 200, "{width}x{height}");
    let name = path.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        saved,
        format!(
            "Saved a screenshot of http://{shop}/form to screenshots/{name} ({width}x{height} px, \
             {} bytes).\nPath: {}",
            png.len(),
            path.display()
        )
    );

    // The whole of a page taller than the window.
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/long")}),
    )
    .await;
    let size = async |full_page: bool| {
        let saved = env
            .ok("a", "browser.screenshot", json!({"full_page": full_page}))
            .await;
        let path = saved
            .lines()
            .find_map(|l| l.strip_prefix("Path: "))
            .unwrap();
        let png = std::fs::read(path).unwrap();
        (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        )
    };
    let (_, visible) = size(false).await;
    let (_, whole) = size(true).await;
    assert!(visible < 3000 && whole > 3000, "{visible} px, {whole} px");
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_keeps_its_own_cookies_in_a_private_profile() {
    let env = Env::new();
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    let show = json!({"url": format!("http://{shop}/show")});
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/set")}),
    )
    .await;
    env.ok("a", "browser.open", show.clone()).await;
    let seen = env.ok("a", "browser.content", json!({})).await;
    assert!(seen.contains("Cookie: flynn=kept"), "{seen}");

    let root = env.home.path().join("browser");
    let profile = env.browsers.profile_dir(&env.ctx("a").session);
    assert!(profile.starts_with(&root));
    for dir in [&root, &profile] {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }

    // Kept on disk across a close.
    assert_eq!(
        env.ok("a", "browser.close", json!({})).await,
        "Closed the browser."
    );
    assert!(!env.browsers.is_running(&env.ctx("a").session));
    env.ok("a", "browser.open", show.clone()).await;
    let seen = env.ok("a", "browser.content", json!({})).await;
    assert!(seen.contains("Cookie: flynn=kept"), "{seen}");

    // Another session has its own jar.
    env.ok("b", "browser.open", show).await;
    let other = env.ok("b", "browser.content", json!({})).await;
    assert!(other.contains("Cookie: none"), "{other}");
    assert_ne!(env.browsers.profile_dir(&env.ctx("b").session), profile);
    env.browsers.shutdown().await;
    assert_eq!(
        env.call(
            "a",
            "browser.open",
            json!({"url": format!("http://{shop}/show")})
        )
        .await,
        Err(ToolError::failed(
            "the browser is not available: Flynn is shutting down"
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_that_fails_to_start_is_named_with_what_it_said() {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("chromium");
    // Reads the first command (so it surely was sent), then gives up.
    std::fs::write(
        &program,
        "#!/bin/sh\necho 'Missing X server or $DISPLAY' >&2\nhead -c 1 <&3 >/dev/null\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = Env::with(|config, root| {
        Browsers::new(
            &BrowserToolConfig {
                executable: Some(program.clone()),
                ..config.clone()
            },
            root,
        )
    });
    let program = program.display();
    assert_eq!(
        env.call("a", "browser.snapshot", json!({})).await,
        Err(ToolError::failed(format!(
            "cannot start the browser {program}: the connection to the browser closed before \
             Target.getTargets was answered: the browser exited or crashed (it said: Missing X \
             server or $DISPLAY); check that it runs (`{program} --headless --version`), or set \
             tools.browser.executable"
        )))
    );
    assert!(!env.browsers.is_running(&env.ctx("a").session));
}

/// Where [`helper_holding_a_browser`] keeps its browser's profiles.
const HOLDER: &str = "FLYNN_TEST_BROWSER_HOLDER";

/// Not a test of its own: run by
/// `a_browser_ends_with_the_process_that_started_it_even_when_killed` in
/// a child process with `FLYNN_TEST_BROWSER_HOLDER` set, it starts a
/// browser, prints its pid and waits to be killed. Without the variable it
/// does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_holding_a_browser() {
    let Some(root) = std::env::var_os(HOLDER) else {
        return;
    };
    let browsers = Browsers::new(&config(), PathBuf::from(root));
    let tools = browser::tools(&browsers);
    let snapshot = tools.iter().find(|t| t.name() == "browser.snapshot");
    let workspace = tempfile::tempdir().unwrap();
    let mut ctx = ToolContext::new(workspace.path());
    ctx.session = SessionKey::new("test", "held").unwrap();
    snapshot.unwrap().call(json!({}), &ctx).await.unwrap();
    let pid = browsers.pid(&ctx.session).await.unwrap();
    println!("browser pid {pid}");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_ends_with_the_process_that_started_it_even_when_killed() {
    use std::io::BufRead;
    require_chromium();
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("browser");
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "browser::helper_holding_a_browser",
            "--nocapture",
        ])
        .env(HOLDER, &root)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let said = std::io::BufReader::new(holder.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("browser pid ")?.parse::<u32>().ok());
    let Some(pid) = said else {
        let _ = holder.kill();
        panic!("the holder did not start a browser: {:?}", holder.wait());
    };
    assert_ne!(browser_processes(&root), Vec::<String>::new());
    // SIGKILL: nothing of the holder's runs after it.
    holder.kill().unwrap();
    holder.wait().unwrap();
    until(
        Duration::from_secs(10),
        "Chromium to end with the process that started it",
        async || exited(pid) && browser_processes(&root).is_empty(),
    )
    .await;
}

/// The command lines of the processes that name `root` (Chromium's,
/// through its `--user-data-dir`).
fn browser_processes(root: &Path) -> Vec<String> {
    let root = root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmd| String::from_utf8_lossy(&cmd).replace('\0', " "))
        .filter(|cmd| cmd.contains(&root))
        .collect()
}

/// The TCP ports process `pid` listens on (from `/proc/net/tcp*`, the
/// sockets among its open files).
fn listening_ports(pid: u32) -> Vec<u16> {
    let sockets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_str()?;
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A: LISTEN), inode.
            if fields.len() > 9 && fields[3] == "0A" && sockets.iter().any(|s| s == fields[9]) {
                let port = fields[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// Waits until `done` holds, failing after `limit`.
async fn until(limit: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether process `pid` has exited: gone, or a zombie not yet reaped
/// whose threads have all ended (a leader shows `Z` while the others
/// still wind down, and cannot be reaped until they have).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
            zombie && threads <= 1
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_browser_is_closed_and_a_killed_one_restarted_with_a_note() {
    let env =
        Env::with(|config, root| Browsers::with_idle(config, root, Duration::from_millis(700)));
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    let session = env.ctx("a").session;
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/form")}),
    )
    .await;
    let pid = env.browsers.pid(&session).await.unwrap();
    assert!(env.browsers.is_running(&session));
    until(
        Duration::from_secs(30),
        "the idle browser to close",
        async || !env.browsers.is_running(&session) && exited(pid),
    )
    .await;

    // Started again on the next call; then killed behind Flynn's back.
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/form")}),
    )
    .await;
    let pid = env.browsers.pid(&session).await.unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    until(
        Duration::from_secs(10),
        "the killed browser to exit",
        async || exited(pid),
    )
    .await;
    let after = env.ok("a", "browser.snapshot", json!({})).await;
    assert!(
        after.starts_with(
            "Note: this session's browser had stopped (it crashed or was killed) and was \
             started again; the page that was open and anything typed into it are gone.\n\n"
        ),
        "{after}"
    );
    assert_ne!(env.browsers.pid(&session).await, Some(pid));
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_one_browser_too_many_closes_the_one_unused_longest() {
    let env = Env::with(|config, root| {
        Browsers::new(
            &BrowserToolConfig {
                max_browsers: 1,
                ..config.clone()
            },
            root,
        )
    });
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    let form = json!({"url": format!("http://{shop}/form")});
    let (a, b) = (env.ctx("a").session, env.ctx("b").session);
    env.ok("a", "browser.open", form.clone()).await;
    assert!(env.browsers.is_running(&a));
    env.ok("b", "browser.open", form).await;
    assert!(env.browsers.is_running(&b));
    assert!(!env.browsers.is_running(&a));
    env.browsers.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_lands_in_the_workspace() {
    let env = Env::new();
    let (blocked, _) = blocked_server().await;
    let shop = serve_on("127.0.0.1", shop(blocked)).await;
    env.ok(
        "a",
        "browser.open",
        json!({"url": format!("http://{shop}/files")}),
    )
    .await;
    let snapshot = env.ok("a", "browser.snapshot", json!({})).await;
    let link = number_of(&snapshot, "link \"The report\"");
    let clicked = env.ok("a", "browser.click", json!({"element": link})).await;
    let downloads = env.workspace.path().join("downloads");
    assert!(
        clicked.contains(&format!(
            "Downloaded report.txt to {}.",
            downloads.display()
        )),
        "{clicked}"
    );
    assert_eq!(
        std::fs::read_to_string(downloads.join("report.txt")).unwrap(),
        "quarterly numbers\n"
    );
    env.browsers.shutdown().await;
}
