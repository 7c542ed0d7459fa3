//! What each browser tool does to the page, over CDP.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use reqwest::Url;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use super::Direction;
use super::cdp::{CdpError, Events, Page};
use super::proxy::{Refusal, SETTING};
use super::session::{Browsers, Refs, Running, Settings};
use super::snapshot::{self, Node, Ref, shorten};
use crate::builtin::web::{Format, extract};
use crate::{ToolContext, ToolError};

/// How long after an action a navigation it caused must have started.
const SETTLE: Duration = Duration::from_millis(400);

/// An http(s) URL the guard does not refuse outright.
pub(crate) fn parse_url(raw: &str, browsers: &Browsers) -> Result<Url, ToolError> {
    let url = Url::parse(raw.trim()).map_err(|error| {
        ToolError::failed(format!(
            "'{raw}' is not a URL ({error}); give an absolute http:// or https:// URL"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::failed(format!(
            "cannot open {url}: the browser opens only http and https URLs"
        )));
    }
    browsers
        .settings()
        .guard
        .check_url(&url)
        .map_err(|refused| ToolError::failed(refused.explain(SETTING)))?;
    Ok(url)
}

/// `browser.open`.
pub(crate) async fn open(
    running: &mut Running,
    url: &Url,
    settings: &Settings,
) -> Result<String, ToolError> {
    running.refs = None;
    let mark = running.proxy.mark();
    let navigated =
        tokio::time::timeout(settings.timeout, navigate(&running.page, url.as_str())).await;
    let refusals = running.proxy.refusals_since(mark);
    match navigated {
        Err(_) => {
            return Err(ToolError::failed(format!(
                "{url} did not finish loading in {}s (tools.browser.timeout_secs); the site is \
                 slow or not answering: try again, or browser.snapshot what has loaded",
                settings.timeout.as_secs()
            )));
        }
        Ok(Err(error)) => {
            // The page itself, or (a tunnel the guard refused) a hop of
            // its redirects.
            let tunnel =
                matches!(&error, NotLoaded::Net(net) if net == "net::ERR_TUNNEL_CONNECTION_FAILED");
            let refused = refusals
                .iter()
                .find(|r| same_target(r, url.as_str()))
                .or_else(|| refusals.last().filter(|_| tunnel));
            if let Some(refusal) = refused {
                return Err(ToolError::failed(refusal.message.clone()));
            }
            let mut message = format!("cannot open {url}: {error}");
            if !refusals.is_empty() {
                message.push('\n');
                blocked(&mut message, &refusals);
            }
            return Err(ToolError::failed(message.trim_end().to_owned()));
        }
        Ok(Ok(_)) => {}
    }
    let (now, title) = page_info(&running.page).await;
    if let Some(refusal) = refusals.iter().find(|r| same_target(r, &now)) {
        return Err(ToolError::failed(refusal.message.clone()));
    }
    let mut output = format!("Opened {now}\n");
    if let Some(title) = title {
        let _ = writeln!(output, "Title: {title}");
    }
    if let Some(status) = status(&running.page).await
        && status >= 400
    {
        let _ = writeln!(output, "Status: HTTP {status}");
    }
    blocked(&mut output, &refusals);
    output.push_str(
        "\nbrowser.snapshot shows its elements to click or type into; browser.content its text.",
    );
    Ok(output)
}

/// `browser.snapshot`.
pub(crate) async fn snapshot(
    running: &mut Running,
    settings: &Settings,
) -> Result<String, ToolError> {
    let page = &running.page;
    #[derive(Deserialize)]
    struct Tree {
        nodes: Vec<Value>,
    }
    let tree: Tree = page
        .call("Accessibility.getFullAXTree", json!({}))
        .await
        .map_err(|error| cdp_failed("read the page's accessibility tree", &error))?;
    // A node that does not parse is left out, not the whole page.
    let nodes: Vec<Node> = tree.nodes.into_iter().filter_map(node).collect();
    // The frame's loader ties the numbers to this document.
    let (frame, title) = tokio::join!(main_frame(page), title(page));
    let frame = frame.map_err(|error| cdp_failed("read the page's frames", &error))?;
    let url = frame.full_url();
    let header = format!(
        "URL: {url}\n{}\n",
        title.map(|t| format!("Title: {t}\n")).unwrap_or_default()
    );
    let budget = settings
        .max_output
        .saturating_sub(header.len() + 200)
        .max(128);
    let rendered = snapshot::render(&nodes, budget);
    let mut output = header;
    if rendered.text.is_empty() {
        output.push_str("(the page shows nothing)\n");
    }
    output.push_str(&rendered.text);
    if rendered.cut_lines > 0 {
        let _ = writeln!(
            output,
            "… {} more lines not shown (tools.browser.max_output_bytes): browser.content reads the \
             whole text",
            rendered.cut_lines
        );
    }
    if rendered.refs.is_empty() {
        output.push_str("No elements to click or type into.\n");
    }
    running.refs = Some(Refs {
        loader: frame.loader_id,
        refs: rendered.refs,
    });
    Ok(output)
}

/// `browser.click`.
pub(crate) async fn click(
    running: &mut Running,
    element: u32,
    settings: &Settings,
) -> Result<String, ToolError> {
    let target = resolve(running, element).await?;
    let object = object_of(&running.page, element, &target).await?;
    let page = &running.page;
    let node = json!({"backendNodeId": target.backend});
    let _ = page
        .call::<IgnoredAny>("DOM.scrollIntoViewIfNeeded", node.clone())
        .await;
    #[derive(Deserialize)]
    struct Quads {
        quads: Vec<Vec<f64>>,
    }
    let point = page
        .call::<Quads>("DOM.getContentQuads", node)
        .await
        .ok()
        .and_then(|quads| quads.quads.iter().find_map(|q| centre(q)));
    let watch = Watch::start(running).await;
    let mark = running.proxy.mark();
    let page = &running.page;
    match point {
        Some((x, y)) => {
            for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
                let mut event = json!({"type": kind, "x": x, "y": y});
                if kind != "mouseMoved" {
                    event["button"] = json!("left");
                    event["clickCount"] = json!(1);
                }
                page.call::<IgnoredAny>("Input.dispatchMouseEvent", event)
                    .await
                    .map_err(|error| cdp_failed("click", &error))?;
            }
        }
        // Not laid out (zero size, hidden behind a detail): the DOM's click.
        None => {
            call(page, &object, "function() { this.click(); }", Vec::new()).await?;
        }
    }
    let mut output = format!("Clicked [{element}] {}.\n", target.describe());
    watch.settle(running, settings, mark, &mut output).await;
    Ok(output)
}

/// `browser.type`.
pub(crate) async fn type_text(
    running: &mut Running,
    element: u32,
    text: &str,
    submit: bool,
    settings: &Settings,
) -> Result<String, ToolError> {
    let target = resolve(running, element).await?;
    let object = object_of(&running.page, element, &target).await?;
    let page = &running.page;
    let focused = call(
        page,
        &object,
        "function() {
            this.scrollIntoView({block: 'center'});
            this.focus();
            const active = document.activeElement;
            if (active !== this && !this.contains(active)) { return false; }
            if ('value' in this) {
                this.value = '';
                this.dispatchEvent(new Event('input', {bubbles: true}));
            } else if (this.isContentEditable) {
                document.execCommand('selectAll');
            }
            return true;
        }",
        Vec::new(),
    )
    .await?;
    if focused != Value::Bool(true) {
        return Err(ToolError::failed(format!(
            "element {element} ({}) does not take text; type into a textbox, searchbox or \
             combobox of the latest browser.snapshot",
            target.role
        )));
    }
    if !text.is_empty() {
        page.call::<IgnoredAny>("Input.insertText", json!({"text": text}))
            .await
            .map_err(|error| cdp_failed("type", &error))?;
    }
    let mut output = format!(
        "Typed {} characters into [{element}] {}.\n",
        text.chars().count(),
        target.describe()
    );
    if submit {
        let watch = Watch::start(running).await;
        let mark = running.proxy.mark();
        for kind in ["keyDown", "keyUp"] {
            let mut key = json!({
                "type": kind,
                "key": "Enter",
                "code": "Enter",
                "windowsVirtualKeyCode": 13,
                "nativeVirtualKeyCode": 13,
            });
            if kind == "keyDown" {
                key["text"] = json!("\r");
            }
            running
                .page
                .call::<IgnoredAny>("Input.dispatchKeyEvent", key)
                .await
                .map_err(|error| cdp_failed("press Enter", &error))?;
        }
        output.push_str("Pressed Enter.\n");
        watch.settle(running, settings, mark, &mut output).await;
    }
    Ok(output)
}

/// `browser.select`.
pub(crate) async fn select(
    running: &mut Running,
    element: u32,
    option: &str,
    settings: &Settings,
) -> Result<String, ToolError> {
    let target = resolve(running, element).await?;
    let object = object_of(&running.page, element, &target).await?;
    let watch = Watch::start(running).await;
    let mark = running.proxy.mark();
    let chosen = call(
        &running.page,
        &object,
        "function(wanted) {
            const norm = s => (s || '').replace(/\\s+/g, ' ').trim();
            const w = norm(wanted).toLowerCase();
            if (this instanceof HTMLSelectElement) {
                const options = Array.from(this.options);
                const hit = options.find(o => norm(o.label).toLowerCase() === w)
                    || options.find(o => norm(o.value).toLowerCase() === w)
                    || options.find(o => norm(o.label).toLowerCase().includes(w));
                if (!hit) { return {found: false, count: options.length}; }
                if (hit.disabled) { return {found: true, disabled: true}; }
                this.focus();
                hit.selected = true;
                this.dispatchEvent(new Event('input', {bubbles: true}));
                this.dispatchEvent(new Event('change', {bubbles: true}));
                return {found: true, label: norm(hit.label)};
            }
            const items = Array.from(this.querySelectorAll('[role=option]'));
            if (!items.length) { return {list: false}; }
            const hit = items.find(o => norm(o.textContent).toLowerCase() === w)
                || items.find(o => norm(o.textContent).toLowerCase().includes(w));
            if (!hit) { return {found: false, count: items.length}; }
            hit.scrollIntoView({block: 'center'});
            hit.click();
            return {found: true, label: norm(hit.textContent)};
        }",
        vec![Value::String(option.to_owned())],
    )
    .await?;
    if chosen.get("list") == Some(&Value::Bool(false)) {
        return Err(ToolError::failed(format!(
            "element {element} ({}) is not a drop-down or list; browser.select takes a \
             combobox or listbox of the latest browser.snapshot (browser.click for buttons and \
             links)",
            target.role
        )));
    }
    if chosen.get("found") != Some(&Value::Bool(true)) {
        let count = chosen.get("count").and_then(Value::as_u64).unwrap_or(0);
        return Err(ToolError::failed(format!(
            "element {element} ({}) has no option '{option}' ({count} options; the latest \
             browser.snapshot lists them under it)",
            target.role
        )));
    }
    if chosen.get("disabled") == Some(&Value::Bool(true)) {
        return Err(ToolError::failed(format!(
            "the option '{option}' of element {element} ({}) is disabled",
            target.role
        )));
    }
    let label = chosen
        .get("label")
        .and_then(Value::as_str)
        .unwrap_or(option);
    let mut output = format!(
        "Selected \"{}\" in [{element}] {}.\n",
        shorten(label, 100),
        target.describe()
    );
    watch.settle(running, settings, mark, &mut output).await;
    Ok(output)
}

/// `browser.scroll`.
pub(crate) async fn scroll(
    running: &mut Running,
    element: Option<u32>,
    direction: Direction,
) -> Result<String, ToolError> {
    let mut output = String::new();
    if let Some(element) = element {
        let target = resolve(running, element).await?;
        object_of(&running.page, element, &target).await?;
        running
            .page
            .call::<IgnoredAny>(
                "DOM.scrollIntoViewIfNeeded",
                json!({"backendNodeId": target.backend}),
            )
            .await
            .map_err(|error| cdp_failed("scroll", &error))?;
        let _ = writeln!(
            output,
            "Scrolled [{element}] {} into view.",
            target.describe()
        );
    }
    let how = match (element, direction) {
        (Some(_), _) => "none",
        (None, Direction::Down) => "down",
        (None, Direction::Up) => "up",
        (None, Direction::Top) => "top",
        (None, Direction::Bottom) => "bottom",
    };
    let position = evaluate(
        &running.page,
        &format!(
            "(how => {{
                const root = document.scrollingElement || document.documentElement;
                const step = Math.round(innerHeight * 0.85);
                const to = {{down: root.scrollTop + step, up: root.scrollTop - step, top: 0,
                    bottom: root.scrollHeight, none: root.scrollTop}}[how];
                window.scrollTo({{top: to, behavior: 'instant'}});
                return [Math.round(root.scrollTop), innerHeight, root.scrollHeight];
            }})('{how}')"
        ),
    )
    .await?;
    let numbers: Vec<u64> = position
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    if let [top, height, total] = numbers[..] {
        if element.is_none() {
            let _ = writeln!(output, "Scrolled {how}.");
        }
        let _ = writeln!(
            output,
            "Showing {top}-{} px of {total} px{}.",
            (top + height).min(total.max(height)),
            if top + height >= total {
                " (the end of the page)"
            } else {
                ""
            }
        );
    }
    output.push_str("browser.snapshot shows what is there now.");
    Ok(output)
}

/// `browser.content`.
pub(crate) async fn content(
    running: &mut Running,
    settings: &Settings,
) -> Result<String, ToolError> {
    let page = &running.page;
    let html = evaluate(
        page,
        "(() => {
            let html = '';
            if (document.doctype) {
                html = new XMLSerializer().serializeToString(document.doctype);
            }
            if (document.documentElement) {
                html += document.documentElement.outerHTML;
            }
            return html;
        })()",
    )
    .await?;
    let html = html.as_str().unwrap_or_default().to_owned();
    let (url, title) = page_info(page).await;
    let page_url = url.clone();
    let extracted =
        tokio::task::spawn_blocking(move || extract(&html, &page_url, Format::Markdown))
            .await
            .map_err(|error| {
                ToolError::failed(format!("reading the page at {url} failed: {error}"))
            })?;
    let mut output = format!("URL: {url}\n");
    if let Some(title) = title.or(extracted.title) {
        let _ = writeln!(output, "Title: {title}");
    }
    output.push('\n');
    let room = settings.max_output.saturating_sub(output.len() + 160);
    let text = extracted.content;
    if text.len() > room {
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        output.push_str(&text[..cut]);
        let _ = write!(
            output,
            "\n… cut at {} of {} bytes (tools.browser.max_output_bytes); browser.scroll and \
             browser.snapshot show the rest of the page",
            cut,
            text.len()
        );
    } else {
        output.push_str(&text);
    }
    Ok(output)
}

/// `browser.screenshot`: a PNG under `<workspace>/screenshots/`, also
/// attached to the result for models that read images.
pub(crate) async fn screenshot(
    running: &mut Running,
    ctx: &ToolContext,
    full_page: bool,
) -> Result<String, ToolError> {
    let page = &running.page;
    let png = capture(page, full_page)
        .await
        .map_err(|error| cdp_failed("take a screenshot", &error))?;
    let (url, _) = page_info(page).await;
    let dir = ctx.workspace.join("screenshots");
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|error| ToolError::failed(format!("cannot create {}: {error}", dir.display())))?;
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let mut name = format!("screenshots/screenshot-{millis}.png");
    let mut path = ctx.confine(&name)?;
    let mut n = 1;
    let file = loop {
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .await
        {
            Ok(file) => break file,
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => {
                name = format!("screenshots/screenshot-{millis}-{n}.png");
                path = ctx.confine(&name)?;
                n += 1;
            }
            Err(error) => {
                return Err(ToolError::failed(format!(
                    "cannot write {}: {error}",
                    path.display()
                )));
            }
        }
    };
    write_all(file, &png, &path).await?;
    ctx.attach_image("image/png", png.clone());
    let size = png_size(&png)
        .map(|(w, h)| format!("{w}x{h} px, "))
        .unwrap_or_default();
    Ok(format!(
        "Saved a screenshot of {url} to {name} ({size}{} bytes).\nPath: {}",
        png.len(),
        path.display()
    ))
}

async fn write_all(mut file: tokio::fs::File, bytes: &[u8], path: &Path) -> Result<(), ToolError> {
    use tokio::io::AsyncWriteExt;
    let failed = |error: std::io::Error| {
        ToolError::failed(format!("cannot write {}: {error}", path.display()))
    };
    file.write_all(bytes).await.map_err(failed)?;
    file.flush().await.map_err(failed)
}

/// Width and height from a PNG's header.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let width = u32::from_be_bytes(png[16..20].try_into().ok()?);
    let height = u32::from_be_bytes(png[20..24].try_into().ok()?);
    Some((width, height))
}

/// What snapshot number `element` stands for, refusing numbers from a
/// snapshot of an earlier page.
async fn resolve(running: &mut Running, element: u32) -> Result<Ref, ToolError> {
    let Some(refs) = running.refs.as_ref() else {
        return Err(ToolError::failed(
            "there is no snapshot of this page yet: call browser.snapshot, then use the numbers \
             it shows",
        ));
    };
    let count = refs.refs.len();
    let index = usize::try_from(element).unwrap_or(usize::MAX);
    if index == 0 || index > count {
        return Err(ToolError::failed(if count == 0 {
            format!(
                "element {element} is not in the latest snapshot, which numbers no elements; \
                 browser.snapshot again if the page changed"
            )
        } else {
            format!(
                "element {element} is not in the latest snapshot (it numbers 1 to {count}); \
                 browser.snapshot again if the page changed"
            )
        }));
    }
    let loader = main_loader(&running.page).await?;
    if loader != refs.loader {
        let (url, _) = page_info(&running.page).await;
        running.refs = None;
        return Err(ToolError::failed(format!(
            "element {element} is from a snapshot of an earlier page (the browser has since \
             moved on to {url}); call browser.snapshot and use its numbers"
        )));
    }
    Ok(refs.refs[index - 1].clone())
}

/// The JavaScript object of a snapshot element still on the page.
async fn object_of(page: &Page, element: u32, target: &Ref) -> Result<String, ToolError> {
    let gone = || {
        ToolError::failed(format!(
            "element {element} ({}) is no longer on the page (it changed since the snapshot); \
             call browser.snapshot and use its numbers",
            target.role
        ))
    };
    #[derive(Deserialize)]
    struct Resolved {
        object: RemoteObject,
    }
    let resolved: Resolved = page
        .call("DOM.resolveNode", json!({"backendNodeId": target.backend}))
        .await
        .map_err(|_| gone())?;
    resolved.object.object_id.ok_or_else(gone)
}

/// A JavaScript value as CDP returns it: by value, or a handle.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RemoteObject {
    value: Option<Value>,
    object_id: Option<String>,
}

/// What `Runtime.evaluate` and `Runtime.callFunctionOn` return.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Evaluated {
    result: RemoteObject,
    exception_details: Option<Exception>,
}

#[derive(Debug, Deserialize)]
struct Exception {
    text: String,
}

/// Calls `function` with `this` = `object`; its result by value.
async fn call(
    page: &Page,
    object: &str,
    function: &str,
    arguments: Vec<Value>,
) -> Result<Value, ToolError> {
    let arguments: Vec<Value> = arguments
        .into_iter()
        .map(|value| json!({"value": value}))
        .collect();
    let returned: Evaluated = page
        .call(
            "Runtime.callFunctionOn",
            json!({
                "functionDeclaration": function,
                "objectId": object,
                "arguments": arguments,
                "returnByValue": true,
                "awaitPromise": true,
                "userGesture": true,
            }),
        )
        .await
        .map_err(|error| cdp_failed("act on the element", &error))?;
    if let Some(exception) = &returned.exception_details {
        return Err(ToolError::failed(format!(
            "the page refused the action: {}",
            shorten(&exception.text, 200)
        )));
    }
    Ok(returned.result.value.unwrap_or(Value::Null))
}

/// Evaluates `expression` in the page; its result by value.
async fn evaluate(page: &Page, expression: &str) -> Result<Value, ToolError> {
    let evaluated: Evaluated = page
        .call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )
        .await
        .map_err(|error| cdp_failed("run a script on the page", &error))?;
    if let Some(exception) = &evaluated.exception_details {
        return Err(ToolError::failed(format!(
            "the browser could not run a script on the page: {}",
            shorten(&exception.text, 200)
        )));
    }
    Ok(evaluated.result.value.unwrap_or(Value::Null))
}

/// The page's main frame.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Frame {
    id: String,
    /// Changes with every navigation.
    loader_id: String,
    url: String,
    /// `#…`, when the URL has one.
    url_fragment: Option<String>,
}

async fn main_frame(page: &Page) -> Result<Frame, CdpError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Tree {
        frame_tree: FrameTree,
    }
    #[derive(Deserialize)]
    struct FrameTree {
        frame: Frame,
    }
    let tree: Tree = page.call("Page.getFrameTree", json!({})).await?;
    Ok(tree.frame_tree.frame)
}

/// The main frame's loader id, which changes with every navigation.
async fn main_loader(page: &Page) -> Result<String, ToolError> {
    main_frame(page)
        .await
        .map(|frame| frame.loader_id)
        .map_err(|error| cdp_failed("read the page's frames", &error))
}

impl Frame {
    /// The URL, fragment included.
    fn full_url(&self) -> String {
        format!(
            "{}{}",
            self.url,
            self.url_fragment.as_deref().unwrap_or_default()
        )
    }
}

/// The page's URL and title.
async fn page_info(page: &Page) -> (String, Option<String>) {
    let (frame, title) = tokio::join!(main_frame(page), title(page));
    (frame.map(|f| f.full_url()).unwrap_or_default(), title)
}

/// The document's title, its white space collapsed, unless empty.
async fn title(page: &Page) -> Option<String> {
    evaluate(page, "document.title")
        .await
        .ok()?
        .as_str()
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
}

/// The main document's HTTP status, when the browser knows it.
async fn status(page: &Page) -> Option<u64> {
    evaluate(
        page,
        "(performance.getEntriesByType('navigation')[0] || {}).responseStatus || 0",
    )
    .await
    .ok()?
    .as_u64()
    .filter(|status| *status > 0)
}

/// Why a page did not load.
#[derive(Debug)]
enum NotLoaded {
    /// Chromium's network error (`net::ERR_NAME_NOT_RESOLVED`).
    Net(String),
    Cdp(CdpError),
}

impl std::fmt::Display for NotLoaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLoaded::Net(error) => f.write_str(error),
            NotLoaded::Cdp(error) => error.fmt(f),
        }
    }
}

/// Navigates the page to `url` and waits for the `load` event of the
/// document it lands on: this navigation's, or one the page moved on to
/// before it loaded (a script's `location.replace`).
async fn navigate(page: &Page, url: &str) -> Result<(), NotLoaded> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Navigated {
        frame_id: String,
        /// None for a navigation within the document.
        loader_id: Option<String>,
        error_text: Option<String>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Lifecycle {
        frame_id: String,
        loader_id: String,
        name: String,
    }
    // Whatever the page shows now may still load; that is not the end.
    let before = main_frame(page).await.ok().map(|frame| frame.loader_id);
    let mut lifecycle: Events<Lifecycle> = page.subscribe("Page.lifecycleEvent");
    let navigated: Navigated = page
        .call("Page.navigate", json!({"url": url}))
        .await
        .map_err(NotLoaded::Cdp)?;
    if let Some(error) = navigated.error_text.filter(|e| !e.is_empty()) {
        return Err(NotLoaded::Net(error));
    }
    if navigated.loader_id.is_none() {
        return Ok(());
    }
    while let Some(event) = lifecycle.next().await {
        if event.name == "load"
            && event.frame_id == navigated.frame_id
            && before.as_ref() != Some(&event.loader_id)
        {
            return Ok(());
        }
    }
    Err(NotLoaded::Cdp(CdpError::Closed {
        method: "Page.navigate",
        reason: "the browser closed the connection while the page loaded".to_owned(),
    }))
}

/// A PNG of the viewport, or of the whole page.
async fn capture(page: &Page, full_page: bool) -> Result<Vec<u8>, CdpError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metrics {
        css_content_size: Size,
    }
    #[derive(Deserialize)]
    struct Size {
        width: f64,
        height: f64,
    }
    #[derive(Deserialize)]
    struct Captured {
        data: String,
    }
    let mut params = json!({"format": "png"});
    if full_page {
        let metrics: Metrics = page.call("Page.getLayoutMetrics", json!({})).await?;
        let size = metrics.css_content_size;
        params["captureBeyondViewport"] = json!(true);
        params["clip"] = json!({
            "x": 0, "y": 0, "width": size.width, "height": size.height, "scale": 1,
        });
    }
    let captured: Captured = page.call("Page.captureScreenshot", params).await?;
    base64::engine::general_purpose::STANDARD
        .decode(captured.data.as_bytes())
        .map_err(|error| CdpError::Unexpected {
            method: "Page.captureScreenshot",
            detail: format!("the image is not base64: {error}"),
        })
}

/// Whether `refusal` was for the host and port of `url`.
fn same_target(refusal: &Refusal, url: &str) -> bool {
    Url::parse(url).is_ok_and(|url| {
        url.host_str().is_some_and(|host| {
            host.trim_matches(['[', ']'])
                .eq_ignore_ascii_case(&refusal.host)
        }) && url.port_or_known_default() == Some(refusal.port)
    })
}

/// Lists the requests the guard refused, once each.
fn blocked(output: &mut String, refusals: &[Refusal]) {
    let mut messages: Vec<&str> = Vec::new();
    for refusal in refusals {
        if !messages.contains(&refusal.message.as_str()) {
            messages.push(&refusal.message);
        }
    }
    if messages.is_empty() {
        return;
    }
    let _ = writeln!(
        output,
        "Blocked {} request{} of this page:",
        refusals.len(),
        if refusals.len() == 1 { "" } else { "s" }
    );
    for message in messages.iter().take(5) {
        let _ = writeln!(output, "- {message}");
    }
}

/// The centre of a quad (four x,y corners), unless it has no area.
fn centre(quad: &[f64]) -> Option<(f64, f64)> {
    if quad.len() < 8 {
        return None;
    }
    let xs = [quad[0], quad[2], quad[4], quad[6]];
    let ys = [quad[1], quad[3], quad[5], quad[7]];
    let width =
        xs.iter().cloned().fold(f64::MIN, f64::max) - xs.iter().cloned().fold(f64::MAX, f64::min);
    let height =
        ys.iter().cloned().fold(f64::MIN, f64::max) - ys.iter().cloned().fold(f64::MAX, f64::min);
    (width >= 1.0 && height >= 1.0)
        .then(|| (xs.iter().sum::<f64>() / 4.0, ys.iter().sum::<f64>() / 4.0))
}

fn cdp_failed(what: &str, error: &CdpError) -> ToolError {
    ToolError::failed(format!("the browser could not {what}: {error}"))
}

/// An accessibility node as the renderer takes it, unless it does not
/// parse.
fn node(raw: Value) -> Option<Node> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct AxNode {
        node_id: String,
        #[serde(default)]
        ignored: bool,
        role: Option<AxValue>,
        name: Option<AxValue>,
        value: Option<AxValue>,
        #[serde(default)]
        properties: Vec<AxProperty>,
        #[serde(default)]
        child_ids: Vec<String>,
        #[serde(rename = "backendDOMNodeId")]
        backend_dom_node_id: Option<i64>,
    }
    #[derive(Deserialize)]
    struct AxProperty {
        name: String,
        value: AxValue,
    }
    let ax: AxNode = match serde_json::from_value(raw) {
        Ok(ax) => ax,
        Err(error) => {
            tracing::debug!(%error, "browser: an accessibility node not understood");
            return None;
        }
    };
    Some(Node {
        id: ax.node_id,
        ignored: ax.ignored,
        role: text(ax.role.as_ref()),
        name: text(ax.name.as_ref()),
        value: ax.value.as_ref().map(|v| text(Some(v))),
        properties: ax
            .properties
            .iter()
            .map(|p| (p.name.clone(), text(Some(&p.value))))
            .collect(),
        children: ax.child_ids,
        backend: ax.backend_dom_node_id,
    })
}

/// A value of the accessibility tree.
#[derive(Debug, Deserialize)]
struct AxValue {
    value: Option<Value>,
}

fn text(value: Option<&AxValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FrameEvent {
    frame_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DownloadBegins {
    guid: String,
    suggested_filename: String,
}

#[derive(Debug, Deserialize)]
struct DownloadProgress {
    guid: String,
    /// `inProgress`, `completed` or `canceled`.
    state: String,
}

/// Watches for what an action sets off: a navigation of the main frame,
/// a download.
struct Watch {
    started: Events<FrameEvent>,
    stopped: Events<FrameEvent>,
    downloads: Events<DownloadBegins>,
    progress: Events<DownloadProgress>,
    main: Option<String>,
}

impl Watch {
    async fn start(running: &Running) -> Watch {
        let page = &running.page;
        let browser = running.connection();
        Watch {
            started: page.subscribe("Page.frameStartedLoading"),
            stopped: page.subscribe("Page.frameStoppedLoading"),
            downloads: browser.subscribe("Browser.downloadWillBegin"),
            progress: browser.subscribe("Browser.downloadProgress"),
            main: main_frame(page).await.ok().map(|frame| frame.id),
        }
    }

    /// Waits for a navigation the action started (if one starts within
    /// [`SETTLE`]) to finish, and for a download it started; says what
    /// happened in `output`.
    async fn settle(
        mut self,
        running: &mut Running,
        settings: &Settings,
        mark: u64,
        output: &mut String,
    ) {
        let main = self.main.clone();
        let is_main = |frame: &str| main.as_deref().is_none_or(|m| m == frame);
        let mut navigated = false;
        let deadline = tokio::time::Instant::now() + SETTLE;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.started.next()).await {
            if is_main(&event.frame_id) {
                navigated = true;
                break;
            }
        }
        let mut finished = true;
        if navigated {
            let deadline = tokio::time::Instant::now() + settings.timeout;
            finished = false;
            while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.stopped.next()).await
            {
                if is_main(&event.frame_id) {
                    finished = true;
                    break;
                }
            }
        }
        if let Ok(Some(download)) =
            tokio::time::timeout(Duration::from_millis(50), self.downloads.next()).await
        {
            let dir = running
                .downloads()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "the workspace's downloads directory".to_owned());
            let name = shorten(&download.suggested_filename, 100);
            let mut done = None;
            let deadline = tokio::time::Instant::now() + settings.timeout;
            while let Ok(Some(event)) =
                tokio::time::timeout_at(deadline, self.progress.next()).await
            {
                if event.guid == download.guid && event.state != "inProgress" {
                    done = Some(event.state);
                    break;
                }
            }
            let _ = writeln!(
                output,
                "{} {name} to {dir}.",
                match done.as_deref() {
                    Some("completed") => "Downloaded",
                    Some(_) => "The download was cancelled:",
                    None => "Still downloading",
                }
            );
        }
        if navigated {
            let (url, title) = page_info(&running.page).await;
            if finished {
                let _ = writeln!(
                    output,
                    "The page is now {url}{}.",
                    title.map(|t| format!(" ({t})")).unwrap_or_default()
                );
            } else {
                let _ = writeln!(
                    output,
                    "The page {url} is still loading after {}s (tools.browser.timeout_secs).",
                    settings.timeout.as_secs()
                );
            }
            let refusals = running.proxy.refusals_since(mark);
            if let Some(refusal) = refusals.iter().find(|r| same_target(r, &url)) {
                let _ = writeln!(output, "That page was not loaded: {}", refusal.message);
            }
            blocked(output, &refusals);
            output.push_str("browser.snapshot shows its elements; browser.content its text.\n");
        } else {
            blocked(output, &running.proxy.refusals_since(mark));
        }
    }
}
