//! The browser tools (`browser.*`, feature `browser`): the system's
//! Chromium or Chrome, headless, driven over the DevTools Protocol by
//! [`cdp`], a small client of our own on the pipe Chromium opens.
//!
//! Each session that uses the browser gets its own Chromium process with
//! its own profile (`FLYNN_HOME/browser/<session>`, 0700: cookies and
//! storage kept between calls and restarts), started on first use and
//! closed after `tools.browser.idle_secs`, at shutdown, or when
//! `max_browsers` others run. A process per session, not one per agent,
//! because a profile is a process's `--user-data-dir`: one process cannot
//! hold two profiles on disk, and separate processes keep one chat's
//! cookies, pages and crashes away from another's.
//!
//! Every request the browser makes goes through [`proxy`], which applies
//! the SSRF guard to the address it connects to. Everything a page says
//! is untrusted: every tool but `browser.close` marks its output so.
//! A session's calls take turns on its browser (each holds the session's
//! [`Lease`](session::Lease)); none of them may run in parallel with
//! other calls of a batch.

mod actions;
mod cdp;
mod proxy;
mod session;
mod snapshot;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

pub use session::{Browsers, browser_version, find_executable};

use crate::{Tool, ToolContext, ToolError, TypedTool, into_dyn};

/// Time to start Chromium, beyond a call's own work.
const STARTUP: Duration = Duration::from_secs(25);

/// Every browser tool, sharing `browsers`.
pub fn tools(browsers: &Browsers) -> Vec<Arc<dyn Tool>> {
    vec![
        into_dyn(BrowserOpen(browsers.clone())),
        into_dyn(BrowserSnapshot(browsers.clone())),
        into_dyn(BrowserClick(browsers.clone())),
        into_dyn(BrowserType(browsers.clone())),
        into_dyn(BrowserSelect(browsers.clone())),
        into_dyn(BrowserScroll(browsers.clone())),
        into_dyn(BrowserContent(browsers.clone())),
        into_dyn(BrowserScreenshot(browsers.clone())),
        into_dyn(BrowserClose(browsers.clone())),
    ]
}

/// A call's timeout: the page timeout, plus starting the browser.
fn call_timeout(browsers: &Browsers) -> Duration {
    browsers.settings().timeout * 2 + STARTUP
}

/// `note` (the browser was restarted), then `output`.
fn with_note(note: Option<String>, output: String) -> String {
    match note {
        Some(note) => format!("{note}\n\n{output}"),
        None => output,
    }
}

/// `browser.open`.
#[derive(Debug)]
pub struct BrowserOpen(Browsers);

/// Arguments of `browser.open`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenArgs {
    /// An http(s) URL.
    url: String,
}

#[async_trait]
impl TypedTool for BrowserOpen {
    type Args = OpenArgs;

    fn name(&self) -> &str {
        "browser.open"
    }

    fn description(&self) -> &str {
        "Open a URL in this chat's browser (cookies kept). Then browser.snapshot numbers the \
         elements to click, type into or select; browser.content reads the text."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: OpenArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let url = actions::parse_url(&args.url, &self.0)?;
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let settings = self.0.settings();
        let output = actions::open(lease.running()?, &url, settings).await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.snapshot`.
#[derive(Debug)]
pub struct BrowserSnapshot(Browsers);

/// Arguments of `browser.snapshot` (none).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[async_trait]
impl TypedTool for BrowserSnapshot {
    type Args = NoArgs;

    fn name(&self) -> &str {
        "browser.snapshot"
    }

    fn description(&self) -> &str {
        "The open page as an accessibility tree: text, headings and numbered elements ([3] \
         button \"Send\") for browser.click, browser.type and browser.select."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, _args: NoArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::snapshot(lease.running()?, self.0.settings()).await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.click`.
#[derive(Debug)]
pub struct BrowserClick(Browsers);

/// Arguments of `browser.click`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClickArgs {
    /// The element's number in the latest browser.snapshot.
    element: u32,
}

#[async_trait]
impl TypedTool for BrowserClick {
    type Args = ClickArgs;

    fn name(&self) -> &str {
        "browser.click"
    }

    fn description(&self) -> &str {
        "Click an element by its number from the latest browser.snapshot; waits for a page it \
         opens."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: ClickArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::click(lease.running()?, args.element, self.0.settings()).await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.type`.
#[derive(Debug)]
pub struct BrowserType(Browsers);

/// Arguments of `browser.type`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TypeArgs {
    /// The field's number in the latest browser.snapshot.
    element: u32,
    /// Replaces what the field holds.
    text: String,
    /// Press Enter afterwards (submits most forms).
    #[serde(default)]
    submit: bool,
}

#[async_trait]
impl TypedTool for BrowserType {
    type Args = TypeArgs;

    fn name(&self) -> &str {
        "browser.type"
    }

    fn description(&self) -> &str {
        "Type text into a field by its number from the latest browser.snapshot, replacing its \
         content."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: TypeArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::type_text(
            lease.running()?,
            args.element,
            &args.text,
            args.submit,
            self.0.settings(),
        )
        .await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.select`.
#[derive(Debug)]
pub struct BrowserSelect(Browsers);

/// Arguments of `browser.select`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SelectArgs {
    /// The list's number in the latest browser.snapshot.
    element: u32,
    /// The option's label (or value) as the snapshot shows it.
    option: String,
}

#[async_trait]
impl TypedTool for BrowserSelect {
    type Args = SelectArgs;

    fn name(&self) -> &str {
        "browser.select"
    }

    fn description(&self) -> &str {
        "Choose an option of a drop-down or list by the list's number from the latest \
         browser.snapshot."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: SelectArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::select(
            lease.running()?,
            args.element,
            &args.option,
            self.0.settings(),
        )
        .await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.scroll`.
#[derive(Debug)]
pub struct BrowserScroll(Browsers);

/// Where `browser.scroll` goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Direction {
    #[default]
    Down,
    Up,
    Top,
    Bottom,
}

/// Arguments of `browser.scroll`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrollArgs {
    /// Bring this element (its number in the latest browser.snapshot)
    /// into view instead.
    #[serde(default)]
    element: Option<u32>,
    /// By a screen (default down).
    #[serde(default)]
    direction: Option<Direction>,
}

#[async_trait]
impl TypedTool for BrowserScroll {
    type Args = ScrollArgs;

    fn name(&self) -> &str {
        "browser.scroll"
    }

    fn description(&self) -> &str {
        "Scroll the page by a screen (down, up, top, bottom) or to an element from the latest \
         browser.snapshot."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: ScrollArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::scroll(
            lease.running()?,
            args.element,
            args.direction.unwrap_or_default(),
        )
        .await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.content`.
#[derive(Debug)]
pub struct BrowserContent(Browsers);

#[async_trait]
impl TypedTool for BrowserContent {
    type Args = NoArgs;

    fn name(&self) -> &str {
        "browser.content"
    }

    fn description(&self) -> &str {
        "The open page's readable text as markdown, as it is now (after scripts, clicks and \
         typing)."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, _args: NoArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::content(lease.running()?, self.0.settings()).await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.screenshot`.
#[derive(Debug)]
pub struct BrowserScreenshot(Browsers);

/// Arguments of `browser.screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotArgs {
    /// The whole page rather than the visible part.
    #[serde(default)]
    full_page: bool,
}

#[async_trait]
impl TypedTool for BrowserScreenshot {
    type Args = ScreenshotArgs;

    fn name(&self) -> &str {
        "browser.screenshot"
    }

    fn description(&self) -> &str {
        "Save a PNG screenshot of the open page in the workspace (screenshots/) and return its \
         path; a model that reads images also sees the screenshot."
    }

    fn timeout(&self) -> Duration {
        call_timeout(&self.0)
    }

    /// Reads the page; the file it writes is a new one under
    /// `screenshots/`, named by Flynn, never one the model picks.
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: ScreenshotArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let mut lease = self.0.lease(&ctx.session, &ctx.workspace).await?;
        let output = actions::screenshot(lease.running()?, ctx, args.full_page).await?;
        Ok(with_note(lease.note.take(), output))
    }
}

/// `browser.close`.
#[derive(Debug)]
pub struct BrowserClose(Browsers);

#[async_trait]
impl TypedTool for BrowserClose {
    type Args = NoArgs;

    fn name(&self) -> &str {
        "browser.close"
    }

    fn description(&self) -> &str {
        "Close this chat's browser (its cookies are kept for next time)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(15)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, _args: NoArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(if self.0.close(&ctx.session).await {
            "Closed the browser.".to_owned()
        } else {
            "No browser was open.".to_owned()
        })
    }

    /// Closes every session's browser (the other tools share them).
    async fn shutdown(&self) {
        self.0.shutdown().await;
    }
}
