//! What each browser tool does to the page, over CDP.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chromiumoxide::Page;
use chromiumoxide::cdp::browser_protocol::accessibility::{AxNode, AxValue, GetFullAxTreeParams};
use chromiumoxide::cdp::browser_protocol::browser::{
    DownloadProgressState, EventDownloadProgress, EventDownloadWillBegin,
};
use chromiumoxide::cdp::browser_protocol::dom::{
    BackendNodeId, GetContentQuadsParams, ResolveNodeParams, ScrollIntoViewIfNeededParams,
};
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchKeyEventParams, DispatchKeyEventType, DispatchMouseEventParams, DispatchMouseEventType,
    InsertTextParams, MouseButton,
};
use chromiumoxide::cdp::browser_protocol::page::{
    CaptureScreenshotFormat, EventFrameStartedLoading, EventFrameStoppedLoading, GetFrameTreeParams,
};
use chromiumoxide::cdp::js_protocol::runtime::{
    CallArgument, CallFunctionOnParams, RemoteObjectId,
};
use chromiumoxide::listeners::EventStream;
use chromiumoxide::page::ScreenshotParams;
use futures::StreamExt;
use reqwest::Url;
use serde_json::Value;

use super::Direction;
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
    let navigated = tokio::time::timeout(settings.timeout, running.page.goto(url.as_str())).await;
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
            let tunnel = error.to_string().contains("ERR_TUNNEL_CONNECTION_FAILED");
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
    let tree = page
        .execute(GetFullAxTreeParams::default())
        .await
        .map_err(|error| cdp_failed("read the page's accessibility tree", &error))?;
    let nodes: Vec<Node> = tree.result.nodes.iter().map(node).collect();
    let (url, title) = page_info(page).await;
    let header = format!(
        "URL: {url}\n{}\n",
        title.map(|t| format!("Title: {t}\n")).unwrap_or_default()
    );
    let budget = settings
        .max_output
        .saturating_sub(header.len() + 200)
        .max(128);
    let rendered = snapshot::render(&nodes, budget);
    let loader = main_loader(page).await?;
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
        loader,
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
    let backend = BackendNodeId::new(target.backend);
    let _ = page
        .execute(
            ScrollIntoViewIfNeededParams::builder()
                .backend_node_id(backend)
                .build(),
        )
        .await;
    let point = page
        .execute(
            GetContentQuadsParams::builder()
                .backend_node_id(backend)
                .build(),
        )
        .await
        .ok()
        .and_then(|quads| quads.result.quads.iter().find_map(|q| centre(q.inner())));
    let watch = Watch::start(running).await;
    let mark = running.proxy.mark();
    let page = &running.page;
    match point {
        Some((x, y)) => {
            for kind in [
                DispatchMouseEventType::MouseMoved,
                DispatchMouseEventType::MousePressed,
                DispatchMouseEventType::MouseReleased,
            ] {
                let mut event = DispatchMouseEventParams::new(kind.clone(), x, y);
                if kind != DispatchMouseEventType::MouseMoved {
                    event.button = Some(MouseButton::Left);
                    event.click_count = Some(1);
                }
                page.execute(event)
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
        page.execute(InsertTextParams::new(text))
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
        for kind in [DispatchKeyEventType::KeyDown, DispatchKeyEventType::KeyUp] {
            let mut key = DispatchKeyEventParams::new(kind.clone());
            key.key = Some("Enter".to_owned());
            key.code = Some("Enter".to_owned());
            key.windows_virtual_key_code = Some(13);
            key.native_virtual_key_code = Some(13);
            if kind == DispatchKeyEventType::KeyDown {
                key.text = Some("\r".to_owned());
            }
            running
                .page
                .execute(key)
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
            .execute(
                ScrollIntoViewIfNeededParams::builder()
                    .backend_node_id(BackendNodeId::new(target.backend))
                    .build(),
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
    let html = page
        .content()
        .await
        .map_err(|error| cdp_failed("read the page", &error))?;
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

/// `browser.screenshot`: a PNG under `<workspace>/screenshots/`.
pub(crate) async fn screenshot(
    running: &mut Running,
    ctx: &ToolContext,
    full_page: bool,
) -> Result<String, ToolError> {
    let page = &running.page;
    let png = page
        .screenshot(
            ScreenshotParams::builder()
                .format(CaptureScreenshotFormat::Png)
                .full_page(full_page)
                .build(),
        )
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
async fn object_of(page: &Page, element: u32, target: &Ref) -> Result<RemoteObjectId, ToolError> {
    let gone = || {
        ToolError::failed(format!(
            "element {element} ({}) is no longer on the page (it changed since the snapshot); \
             call browser.snapshot and use its numbers",
            target.role
        ))
    };
    let resolved = page
        .execute(
            ResolveNodeParams::builder()
                .backend_node_id(BackendNodeId::new(target.backend))
                .build(),
        )
        .await
        .map_err(|_| gone())?;
    resolved.result.object.object_id.clone().ok_or_else(gone)
}

/// Calls `function` with `this` = `object`; its result by value.
async fn call(
    page: &Page,
    object: &RemoteObjectId,
    function: &str,
    arguments: Vec<Value>,
) -> Result<Value, ToolError> {
    let mut params = CallFunctionOnParams::new(function);
    params.object_id = Some(object.clone());
    params.return_by_value = Some(true);
    params.await_promise = Some(true);
    params.user_gesture = Some(true);
    params.arguments = Some(
        arguments
            .into_iter()
            .map(|value| CallArgument {
                value: Some(value),
                ..CallArgument::default()
            })
            .collect(),
    );
    let returned = page
        .execute(params)
        .await
        .map_err(|error| cdp_failed("act on the element", &error))?;
    if let Some(exception) = &returned.result.exception_details {
        return Err(ToolError::failed(format!(
            "the page refused the action: {}",
            shorten(&exception.text, 200)
        )));
    }
    Ok(returned.result.result.value.clone().unwrap_or(Value::Null))
}

/// Evaluates `expression` in the page; its result by value.
async fn evaluate(page: &Page, expression: &str) -> Result<Value, ToolError> {
    let evaluated = page
        .evaluate_expression(expression)
        .await
        .map_err(|error| cdp_failed("run a script on the page", &error))?;
    Ok(evaluated.value().cloned().unwrap_or(Value::Null))
}

/// The main frame's loader id, which changes with every navigation.
async fn main_loader(page: &Page) -> Result<String, ToolError> {
    let tree = page
        .execute(GetFrameTreeParams::default())
        .await
        .map_err(|error| cdp_failed("read the page's frames", &error))?;
    Ok(tree.result.frame_tree.frame.loader_id.inner().clone())
}

/// The page's URL and title.
async fn page_info(page: &Page) -> (String, Option<String>) {
    let url = page.url().await.ok().flatten().unwrap_or_default();
    let title = page
        .get_title()
        .await
        .ok()
        .flatten()
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty());
    (url, title)
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

fn cdp_failed(what: &str, error: &chromiumoxide::error::CdpError) -> ToolError {
    ToolError::failed(format!("the browser could not {what}: {error}"))
}

/// An accessibility node as the renderer takes it.
fn node(ax: &AxNode) -> Node {
    Node {
        id: ax.node_id.inner().clone(),
        ignored: ax.ignored,
        role: text(ax.role.as_ref()),
        name: text(ax.name.as_ref()),
        value: ax.value.as_ref().map(|v| text(Some(v))),
        properties: ax
            .properties
            .iter()
            .flatten()
            .map(|p| {
                let name = serde_json::to_value(&p.name)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                (name, text(Some(&p.value)))
            })
            .collect(),
        children: ax
            .child_ids
            .iter()
            .flatten()
            .map(|id| id.inner().clone())
            .collect(),
        backend: ax.backend_dom_node_id.map(|id| *id.inner()),
    }
}

fn text(value: Option<&AxValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Watches for what an action sets off: a navigation of the main frame,
/// a download.
struct Watch {
    started: Option<EventStream<EventFrameStartedLoading>>,
    stopped: Option<EventStream<EventFrameStoppedLoading>>,
    downloads: Option<EventStream<EventDownloadWillBegin>>,
    progress: Option<EventStream<EventDownloadProgress>>,
    main: Option<String>,
}

impl Watch {
    async fn start(running: &Running) -> Watch {
        let page = &running.page;
        Watch {
            started: page.event_listener::<EventFrameStartedLoading>().await.ok(),
            stopped: page.event_listener::<EventFrameStoppedLoading>().await.ok(),
            downloads: running
                .browser()
                .event_listener::<EventDownloadWillBegin>()
                .await
                .ok(),
            progress: running
                .browser()
                .event_listener::<EventDownloadProgress>()
                .await
                .ok(),
            main: page
                .mainframe()
                .await
                .ok()
                .flatten()
                .map(|id| id.inner().clone()),
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
        if let Some(started) = self.started.as_mut() {
            let deadline = tokio::time::Instant::now() + SETTLE;
            while let Ok(Some(event)) = tokio::time::timeout_at(deadline, started.next()).await {
                if is_main(event.frame_id.inner()) {
                    navigated = true;
                    break;
                }
            }
        }
        let mut finished = true;
        if navigated && let Some(stopped) = self.stopped.as_mut() {
            let deadline = tokio::time::Instant::now() + settings.timeout;
            finished = false;
            while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stopped.next()).await {
                if is_main(event.frame_id.inner()) {
                    finished = true;
                    break;
                }
            }
        }
        if let Some(downloads) = self.downloads.as_mut()
            && let Ok(Some(download)) =
                tokio::time::timeout(Duration::from_millis(50), downloads.next()).await
        {
            let dir = running
                .downloads()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "the workspace's downloads directory".to_owned());
            let name = shorten(&download.suggested_filename, 100);
            let mut done = None;
            if let Some(progress) = self.progress.as_mut() {
                let deadline = tokio::time::Instant::now() + settings.timeout;
                while let Ok(Some(event)) = tokio::time::timeout_at(deadline, progress.next()).await
                {
                    if event.guid == download.guid
                        && event.state != DownloadProgressState::InProgress
                    {
                        done = Some(event.state.clone());
                        break;
                    }
                }
            }
            let _ = writeln!(
                output,
                "{} {name} to {dir}.",
                match done {
                    Some(DownloadProgressState::Completed) => "Downloaded",
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
