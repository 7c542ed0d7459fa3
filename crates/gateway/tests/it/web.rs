//! The web chat and dashboard in a real headless Chromium (Debian's
//! `chromium` and `chromedriver`, installed by scripts/install-test-deps.sh),
//! driven over WebDriver: log in, stream an answer, approve and deny tool
//! calls, cancel, reload, a model's `<script>` shown as text, the daemon
//! going away and coming back. Screenshots go to `FLYNN_ARTIFACTS` (CI
//! keeps them) or the temp dir.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use flynn_gateway::{Gateway, GatewayParts, RemoteApprover};
use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::harness::{Harness, TOKEN};

/// A chromedriver process and a session on it; both end when dropped.
struct Browser {
    driver: Child,
    client: Option<Client>,
}

impl Browser {
    async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is missing: run scripts/install-test-deps.sh");
        let mut browser = Browser {
            driver,
            client: None,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    "--window-size=1280,900",
                    // A microphone that plays a tone, allowed without asking.
                    "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                ],
            }),
        );
        let client = ClientBuilder::rustls()
            .unwrap()
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    async fn eval(&self, script: &str) -> Value {
        self.client().execute(script, Vec::new()).await.unwrap()
    }

    /// Waits until the JavaScript expression is true.
    async fn wait_for(&self, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.eval(&format!("return !!({expression});")).await == json!(true) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.eval("return document.body.innerText;").await;
                panic!("timed out waiting for {expression}; the page shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.client()
            .find(Locator::Css(css))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    async fn type_into(&self, css: &str, text: &str) {
        let field = self.client().find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Opens `url` and signs in with the harness's token.
    async fn sign_in(&self, url: &str) {
        self.client().goto(url).await.unwrap();
        self.wait_for("!document.getElementById('login').hidden")
            .await;
        self.type_into("#token", TOKEN).await;
        self.click("#login-form button[type=submit]").await;
        self.wait_for("document.getElementById('status').innerText === 'connected'")
            .await;
    }

    async fn send_message(&self, text: &str) {
        self.type_into("#input", text).await;
        self.click("#send").await;
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client().screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = std::env::var_os("FLYNN_ARTIFACTS")
            .map_or_else(
                || std::env::temp_dir().join("flynn-artifacts"),
                PathBuf::from,
            )
            .join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Ending the session closes Chromium; do it on a runtime of its
            // own, as drop may run outside one.
            let _ = std::thread::spawn(move || {
                if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    let _ = runtime.block_on(client.close());
                }
            })
            .join();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

const STALL: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working\"},\"finish_reason\":null}]}\n\n";

/// Count of elements matching a selector.
fn count(css: &str) -> String {
    format!("document.querySelectorAll({css:?}).length")
}

/// The text of the last element matching a selector.
fn last_text(css: &str) -> String {
    format!("(Array.from(document.querySelectorAll({css:?})).pop() || {{}}).innerText || ''")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_chat_streams_approves_denies_cancels_and_survives_a_restart() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let browser = Browser::start().await;
    let url = harness.url("/");

    // Signing in: a wrong token is refused with a message, the right one
    // opens the chat.
    browser.client().goto(&url).await.unwrap();
    browser
        .wait_for("!document.getElementById('login').hidden")
        .await;
    browser.type_into("#token", "wrong-token").await;
    browser.click("#login-form button[type=submit]").await;
    browser
        .wait_for("document.getElementById('login-error').innerText.includes('refused')")
        .await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login-form button[type=submit]").await;
    browser
        .wait_for("document.getElementById('status').innerText === 'connected'")
        .await;
    browser.screenshot("login-done").await;

    // A streamed answer, rendered as markdown.
    fake.push(Reply::Text(
        "Hello **there**.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```rust\nfn main() {}\n```".into(),
    ));
    browser.send_message("hello").await;
    browser
        .wait_for(&format!("{} === 1", count(".msg.assistant strong")))
        .await;
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.assistant strong').innerText;")
            .await,
        json!("there")
    );
    assert_eq!(
        browser
            .eval(&format!("return {};", count(".msg.assistant table td")))
            .await,
        json!(2)
    );
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.assistant pre code').innerText;")
            .await,
        json!("fn main() {}")
    );
    // The session is listed, and headed, by its title: its first message.
    browser
        .wait_for("document.getElementById('chat-title').innerText === 'hello'")
        .await;
    assert_eq!(
        browser
            .eval(
                "const b = document.querySelector('#sessions button[aria-current=true]'); \
                 return [b.childNodes[0].textContent, b.dataset.key.startsWith('web:')];"
            )
            .await,
        json!(["hello", true])
    );

    // What a model writes never runs: a script and an event handler are text.
    fake.push(Reply::Text(
        "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\"> [x](javascript:window.pwned=3)".into(),
    ));
    browser.send_message("show me html").await;
    browser
        .wait_for(&format!(
            "{}.includes('<script>')",
            last_text(".msg.assistant")
        ))
        .await;
    // An image of the test's own that fails to load: once its error
    // handler has run, one the model's text smuggled in would have run.
    browser
        .eval(
            "const probe = document.createElement('img'); \
             probe.onerror = () => { window.probed = true; }; \
             probe.src = 'no-such-image-' + Date.now(); \
             document.body.appendChild(probe); return null;",
        )
        .await;
    browser.wait_for("window.probed === true").await;
    assert_eq!(
        browser.eval("return typeof window.pwned;").await,
        json!("undefined")
    );
    assert_eq!(
        browser
            .eval(&format!(
                "return {};",
                count(".messages script, .messages img")
            ))
            .await,
        json!(0)
    );
    assert_eq!(
        browser
            .eval(&format!(
                "return {};",
                count(".messages a[href^='javascript']")
            ))
            .await,
        json!(0)
    );

    // A tool call that needs confirmation, approved with the button.
    fake.push(Reply::ToolCalls(vec![(
        "file_write".into(),
        json!({"path": "approved.txt", "content": "yes"}),
    )]));
    fake.push(Reply::Text("Wrote it.".into()));
    browser.send_message("write approved.txt").await;
    browser
        .wait_for(&format!("{} === 1", count(".confirm")))
        .await;
    browser.screenshot("confirmation").await;
    // The card shows the call's whole input, as the server holds it.
    assert_eq!(
        browser
            .eval("return JSON.parse(document.querySelector('.confirm pre.args').textContent);")
            .await,
        json!({"path": "approved.txt", "content": "yes"})
    );
    browser.click(".confirm button.primary").await;
    browser
        .wait_for(&format!("{} === 'Wrote it.'", last_text(".msg.assistant")))
        .await;
    browser
        .wait_for(&format!(
            "{}.startsWith('✓ file.write')",
            last_text(".tool")
        ))
        .await;

    // Another, denied.
    fake.push(Reply::ToolCalls(vec![(
        "file_write".into(),
        json!({"path": "denied.txt", "content": "no"}),
    )]));
    fake.push(Reply::Text("Understood, I did not write it.".into()));
    browser.send_message("write denied.txt").await;
    browser
        .wait_for(&format!("{} === 2", count(".confirm")))
        .await;
    browser
        .eval("Array.from(document.querySelectorAll('.confirm')).pop().querySelector('button.danger').click();")
        .await;
    browser
        .wait_for(&format!(
            "{} === 'Understood, I did not write it.'",
            last_text(".msg.assistant")
        ))
        .await;
    browser
        .wait_for(&format!(
            "{}.startsWith('✗ file.write')",
            last_text(".tool")
        ))
        .await;

    // Cancel a turn whose model stalls.
    fake.push(Reply::Stall(STALL.into()));
    browser.send_message("a long job").await;
    browser
        .wait_for("!document.getElementById('cancel').hidden")
        .await;
    browser.click("#cancel").await;
    browser
        .wait_for(&format!(
            "{}.includes('cancelled')",
            last_text(".msg.notice")
        ))
        .await;
    browser
        .wait_for("document.getElementById('cancel').hidden")
        .await;

    // A reload keeps the token and shows the conversation from the history.
    browser.client().refresh().await.unwrap();
    browser
        .wait_for("document.getElementById('status').innerText === 'connected'")
        .await;
    browser
        .wait_for(&format!("{} >= 5", count(".msg.user")))
        .await;
    browser
        .wait_for(&format!("{} >= 1", count(".msg.assistant strong")))
        .await;

    // The daemon goes away and comes back on the same address: the page
    // reconnects by itself and the conversation is still there.
    let addr: SocketAddr = harness.addr;
    harness
        .serving
        .take()
        .unwrap()
        .shutdown(Duration::from_secs(2))
        .await;
    browser
        .wait_for("document.getElementById('status').innerText === 'reconnecting…'")
        .await;
    let gateway = Gateway::new(GatewayParts {
        manager: harness.flynn.manager().clone(),
        config: crate::harness::config(&fake),
        config_file: None,
        token: TOKEN.to_owned(),
        approver: RemoteApprover::new(),
        channels: None,
    });
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    harness.serving = Some(gateway.serve(listener).unwrap());
    browser
        .wait_for("document.getElementById('status').innerText === 'connected'")
        .await;
    browser
        .wait_for(&format!("{} >= 5", count(".msg.user")))
        .await;
    fake.push(Reply::Text("Back again.".into()));
    browser.send_message("still there?").await;
    browser
        .wait_for(&format!(
            "{} === 'Back again.'",
            last_text(".msg.assistant")
        ))
        .await;
    browser.screenshot("chat-desktop").await;

    // Every control has a name a screen reader can say.
    let unnamed = browser
        .eval(
            "return Array.from(document.querySelectorAll('button, input, textarea, select'))
               .filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length) || e.innerText.trim()))
               .map(e => e.outerHTML);",
        )
        .await;
    assert_eq!(unnamed, json!([]));

    // The dashboard: usage with a chart, providers, channels, pairing,
    // tools, sessions, config. A stranger is waiting for approval.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ticket = harness
        .flynn
        .manager()
        .store()
        .pairing_request("telegram", "4242", Some("@carol"), now, 3_600_000)
        .await
        .unwrap();
    browser.click("#tab-dash").await;
    browser
        .wait_for("document.getElementById('d-channels').innerText.includes('web')")
        .await;
    browser
        .wait_for(&format!(
            "document.getElementById('d-pairing').innerText.includes('{}')",
            ticket.code
        ))
        .await;
    browser
        .click(&format!(
            "#d-pairing button[aria-label='Approve {} on telegram']",
            ticket.code
        ))
        .await;
    browser
        .wait_for("document.getElementById('d-pairing').innerText.includes('no pairing codes waiting') && document.getElementById('d-pairing').innerText.includes('@carol (4242)')")
        .await;
    assert!(
        harness
            .flynn
            .manager()
            .store()
            .peer_approved("telegram", "4242")
            .await
            .unwrap()
    );
    browser
        .wait_for("document.querySelector('#d-usage table') && document.querySelector('#d-usage svg.chart rect')")
        .await;
    browser
        .wait_for("document.getElementById('d-providers').innerText.includes('ok')")
        .await;
    browser
        .wait_for("document.getElementById('d-tools').innerText.includes('file.write')")
        .await;
    browser
        .wait_for("document.getElementById('d-config').innerText.includes('providers')")
        .await;
    let usage = browser
        .eval("return document.getElementById('d-usage').innerText;")
        .await;
    assert!(usage.as_str().unwrap().contains("default"), "{usage}");
    // One daemon on its own database: no Cluster card.
    assert_eq!(
        browser
            .eval("return document.getElementById('c-cluster').hidden;")
            .await,
        json!(true)
    );
    browser.screenshot("dashboard-desktop").await;

    // Phone width.
    browser.client().set_window_size(390, 844).await.unwrap();
    browser.screenshot("dashboard-phone").await;
    browser.click("#tab-chat").await;
    browser
        .wait_for("!document.getElementById('chat').hidden")
        .await;
    browser.screenshot("chat-phone").await;
    assert_eq!(
        browser
            .eval("return document.documentElement.scrollWidth <= window.innerWidth + 1;")
            .await,
        json!(true),
        "nothing wider than the phone's screen"
    );

    // The first load (page, script, styles, icon, manifest) is small.
    browser.client().goto(&url).await.unwrap();
    browser
        .wait_for("document.getElementById('status').innerText === 'connected'")
        .await;
    let bytes = browser
        .eval(
            "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
               .reduce((sum, e) => sum + (e.encodedBodySize || 0), 0);",
        )
        .await;
    let bytes = bytes.as_f64().unwrap();
    assert!(bytes > 10_000.0 && bytes < 100_000.0, "{bytes} bytes");
    assert_eq!(fake.violations(), Vec::<String>::new());
    drop(browser);
    harness.stop().await;
}

#[tokio::test]
async fn the_page_needs_no_token_carries_its_policy_and_revalidates() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let http = reqwest::Client::new();
    let page = http.get(harness.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    assert!(page.text().await.unwrap().contains("<title>Flynn</title>"));

    let again = http
        .get(harness.url("/"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    let mut total = 0;
    for (path, kind) in [
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/app.css", "text/css; charset=utf-8"),
        ("/manifest.webmanifest", "application/manifest+json"),
        ("/sw.js", "text/javascript; charset=utf-8"),
        ("/icon.svg", "image/svg+xml"),
        ("/icon-192.png", "image/png"),
        ("/icon-512.png", "image/png"),
    ] {
        let response = http.get(harness.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], kind, "{path}");
        total += response.bytes().await.unwrap().len();
    }
    assert!(total < 100_000, "{total} bytes");
    let manifest: Value = http
        .get(harness.url("/manifest.webmanifest"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(manifest["display"], "standalone");
    // The API stays behind the token.
    let rpc = http.get(harness.url("/metrics")).send().await.unwrap();
    assert_eq!(rpc.status(), 401);
    harness.stop().await;
}

/// Two daemons on one PostgreSQL database: the dashboard's Cluster card
/// lists both, this one marked, with the sessions and roles each holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_nodes_of_a_cluster() {
    let database = flynn_testkit::postgres::TestDatabase::create().await;
    let fake = FakeOpenAi::start().await;
    let mut config = crate::harness::config(&fake);
    config.sessions.url = Some(database.url().to_owned());
    let options = || crate::harness::Options {
        config: config.clone(),
        tools: Vec::new(),
        config_file: None,
    };
    let mut first = Harness::with(options()).await;
    let mut second = Harness::with(options()).await;
    // A session the first node runs.
    fake.push(Reply::Text("held here".into()));
    let client = first.client().await;
    let events = crate::harness::follow(
        &client,
        crate::harness::send_params(&crate::harness::key("web:ann"), "hello"),
    )
    .await;
    assert_eq!(crate::harness::text_of(&events), "held here");

    let browser = Browser::start().await;
    browser.sign_in(&first.url("/")).await;
    browser.click("#tab-dash").await;
    browser
        .wait_for("!document.getElementById('c-cluster').hidden && document.querySelectorAll('#d-cluster tbody tr').length === 2")
        .await;
    let rows = browser
        .eval("return [...document.querySelectorAll('#d-cluster tbody tr')].map((r) => [...r.cells].map((c) => c.innerText));")
        .await;
    let rows = rows.as_array().unwrap();
    let this = rows
        .iter()
        .find(|r| r[2] == "alive · this node")
        .unwrap_or_else(|| panic!("no row for this node: {rows:?}"));
    assert_eq!(this[1], "daemon", "{rows:?}");
    assert_eq!(this[3], "1", "it holds the session: {rows:?}");
    let other = rows.iter().find(|r| r != &this).unwrap();
    assert_eq!(
        (other[2].as_str(), other[3].as_str()),
        (Some("alive"), Some("0")),
        "{rows:?}"
    );
    browser
        .eval("document.getElementById('c-cluster').scrollIntoView(); return null;")
        .await;
    browser.screenshot("dashboard-cluster").await;
    drop(browser);
    second.stop().await;
    first.stop().await;
}

/// A 2×2 PNG (red and blue pixels).
const PNG: &[u8] = &[
    137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 2, 0, 0, 0, 2, 8, 2, 0,
    0, 0, 253, 212, 154, 115, 0, 0, 0, 16, 73, 68, 65, 84, 120, 156, 99, 248, 207, 0, 4, 255, 25,
    32, 20, 0, 27, 242, 3, 253, 214, 150, 242, 43, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130,
];

/// "Send me the chart" in the web chat: the picture `media.send` sent is
/// shown with its caption, another file is offered as a download, and
/// the gateway serves them only with a token, a page-like file never
/// inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_chat_shows_the_files_a_turn_sends() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let workspace = harness._home.path().to_path_buf();
    std::fs::write(workspace.join("chart.png"), PNG).unwrap();
    std::fs::write(
        workspace.join("page.html"),
        "<script>window.parent.pwned = 1</script>",
    )
    .unwrap();
    let browser = Browser::start().await;
    browser.sign_in(&harness.url("/")).await;

    fake.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "chart.png", "caption": "Sales by month"}),
    )]));
    fake.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "page.html"}),
    )]));
    fake.push(Reply::Text("Here they are.".into()));
    browser.send_message("send me the chart").await;
    browser
        .wait_for("(() => { const i = document.querySelector('.msg.media img'); return !!i && i.complete && i.naturalWidth === 2; })()")
        .await;
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.media figcaption').innerText;")
            .await,
        json!("Sales by month")
    );
    browser
        .wait_for("!!document.querySelector('.msg.media a.download[download=\"page.html\"]')")
        .await;
    let link = browser
        .eval("return document.querySelector('.msg.media a.download').innerText;")
        .await;
    assert_eq!(link, json!("⬇ page.html (40 B)"));
    browser.screenshot("web-chat-media").await;
    assert_eq!(
        browser.eval("return typeof window.pwned;").await,
        json!("undefined")
    );

    // Over HTTP: the ids are in the page; a token is needed.
    let ids = browser
        .eval("return [...document.querySelectorAll('.msg.media')].map((m) => m.dataset.media);")
        .await;
    let ids: Vec<String> = serde_json::from_value(ids).unwrap();
    assert_eq!(ids.len(), 2);

    // After a reload the history shows them again, after the answer of
    // the turn that sent them.
    browser.client().refresh().await.unwrap();
    browser
        .wait_for("(() => { const i = document.querySelector('.msg.media img'); return !!i && i.complete && i.naturalWidth === 2; })()")
        .await;
    let shown = browser
        .eval("return [...document.querySelectorAll('#messages .msg.assistant')].map((m) => m.dataset.media || m.innerText.trim()).filter((t) => t);")
        .await;
    let shown: Vec<String> = serde_json::from_value(shown).unwrap();
    assert_eq!(
        shown[shown.len().saturating_sub(3)..],
        ["Here they are.", ids[0].as_str(), ids[1].as_str()],
        "{shown:?}"
    );
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.media figcaption').innerText;")
            .await,
        json!("Sales by month")
    );
    let http = reqwest::Client::new();
    let bare = http
        .get(harness.url(&format!("/media/{}", ids[0])))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    let chart = http
        .get(harness.url(&format!("/media/{}", ids[0])))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(chart.status(), 200);
    assert_eq!(chart.headers()["content-type"], "image/png");
    assert_eq!(
        chart.headers()["content-disposition"],
        "inline; filename=\"chart.png\"; filename*=UTF-8''chart.png"
    );
    assert_eq!(&chart.bytes().await.unwrap()[..], PNG);
    let page = http
        .get(harness.url(&format!("/media/{}", ids[1])))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(
        page.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    assert_eq!(
        page.headers()["content-security-policy"],
        "sandbox; default-src 'none'"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let unknown = http
        .get(harness.url(&format!("/media/{}", "0".repeat(32))))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    drop(browser);
    harness.stop().await;
}

/// The microphone: a recording (Chromium's fake device, a tone) goes to
/// `POST /transcribe`, the words come back from the `voice.stt` service
/// and are sent as a voice message the model answers; without a token the
/// endpoint refuses, and without `voice.stt` it says which setting is
/// missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_chat_microphone_sends_what_was_said() {
    let fake = FakeOpenAi::start().await;
    let stt = flynn_testkit::FakeStt::start();
    stt.push("Book a table for two at eight.");
    let mut config = crate::harness::config(&fake);
    config.voice.stt = Some(flynn_protocol::config::SttConfig {
        base_url: stt.base_url(),
        api_key: None,
        model: "whisper-1".to_owned(),
        language: None,
    });
    let mut harness = Harness::with(crate::harness::Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let browser = Browser::start().await;
    browser.sign_in(&harness.url("/")).await;

    fake.push(Reply::Text("Booked for eight.".into()));
    browser.click("#mic").await;
    browser
        .wait_for("document.getElementById('mic').getAttribute('aria-pressed') === 'true'")
        .await;
    // Some sound to record.
    tokio::time::sleep(Duration::from_millis(600)).await;
    browser.click("#mic").await;
    browser
        .wait_for(&format!(
            "{}.includes('Booked for eight.')",
            last_text(".msg.assistant")
        ))
        .await;
    assert_eq!(
        browser
            .eval("return document.querySelector('.msg.user.voice').innerText;")
            .await,
        json!("Book a table for two at eight.")
    );
    let heard = stt.requests();
    assert_eq!(heard.len(), 1);
    assert_eq!(
        (heard[0].file_name.as_str(), heard[0].media_type.as_deref()),
        ("voice.webm", Some("audio/webm"))
    );
    // A WebM file: the EBML header's magic.
    assert!(heard[0].audio.starts_with(&[0x1A, 0x45, 0xDF, 0xA3]));
    let said = fake
        .requests()
        .into_iter()
        .rfind(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert!(
        said.body["messages"]
            .to_string()
            .contains("[voice note, transcribed] Book a table for two at eight."),
        "{}",
        said.body
    );
    browser.screenshot("web-chat-microphone").await;
    assert_eq!(stt.violations(), Vec::<String>::new());

    // Over HTTP: a token is needed, and a type the service cannot take is
    // refused before it is asked.
    let http = reqwest::Client::new();
    let bare = http
        .post(harness.url("/transcribe"))
        .header("content-type", "audio/webm")
        .body(vec![1u8; 10])
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
    let text = http
        .post(harness.url("/transcribe"))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 415);
    assert_eq!(stt.requests().len(), 1);
    drop(browser);
    harness.stop().await;

    // No voice.stt: the endpoint names the setting.
    let mut plain = Harness::start(&fake).await;
    let missing = http
        .post(plain.url("/transcribe"))
        .bearer_auth(TOKEN)
        .header("content-type", "audio/webm")
        .body(vec![1u8; 10])
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("voice.stt"),
        "{body}"
    );
    plain.stop().await;
}
