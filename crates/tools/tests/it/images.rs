//! Images a tool attaches (`ToolContext::attach_image`): returned with the
//! call's result as base64, left out with a note when too large, never
//! with an error, and the text of an untrusted tool still wrapped.

use async_trait::async_trait;
use base64::Engine as _;
use flynn_protocol::{ImageSource, ToolEffect};
use flynn_tools::{MAX_IMAGE_BYTES, ToolError, TypedTool, wrap_untrusted};
use schemars::JsonSchema;
use serde::Deserialize;

use super::*;

/// A fake tool that draws a PNG of the size asked and attaches it.
struct Picture {
    untrusted: bool,
}

#[derive(Deserialize, JsonSchema)]
struct PictureArgs {
    width: u32,
    height: u32,
    /// The file's size in bytes.
    bytes: usize,
    #[serde(default)]
    fail: bool,
}

/// A PNG header of `width` x `height` padded to `bytes`.
fn png(width: u32, height: u32, bytes: usize) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
    png.extend(width.to_be_bytes());
    png.extend(height.to_be_bytes());
    png.resize(bytes.max(png.len()), 0);
    png
}

#[async_trait]
impl TypedTool for Picture {
    type Args = PictureArgs;
    fn name(&self) -> &str {
        "test.picture"
    }
    fn description(&self) -> &str {
        "Draw."
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }
    fn untrusted_output(&self) -> bool {
        self.untrusted
    }
    async fn run(&self, args: PictureArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        ctx.attach_image("image/png", png(args.width, args.height, args.bytes));
        if args.fail {
            return Err(ToolError::failed("the drawing broke"));
        }
        Ok("drew it".to_owned())
    }
}

fn executor(untrusted: bool) -> ToolExecutor {
    let mut registry = ToolRegistry::new();
    registry.register(Picture { untrusted });
    executor_with(registry, 50 * 1024)
}

fn draw(width: u32, height: u32, bytes: usize) -> ToolCall {
    call(
        "test.picture",
        json!({"width": width, "height": height, "bytes": bytes}),
    )
}

#[tokio::test]
async fn an_attached_image_comes_back_as_base64_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path());
    let result = executor(false).execute(&draw(800, 600, 2_000), &ctx).await;
    let data = base64::engine::general_purpose::STANDARD.encode(png(800, 600, 2_000));
    assert_eq!(
        result,
        ToolResult {
            images: vec![ImageSource::Base64 {
                media_type: "image/png".into(),
                data,
            }],
            ..ok("drew it\n[an image (image/png, 2000 bytes) is attached after the tool results]")
        }
    );
    // The context the turn lent keeps nothing of the call's.
    assert_eq!(ctx.attachments.take(), Vec::new());
}

#[tokio::test]
async fn an_untrusted_tools_text_stays_wrapped_and_marks_the_turn() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path());
    let result = executor(true).execute(&draw(800, 600, 100), &ctx).await;
    assert_eq!(
        result.content,
        format!(
            "{}\n[an image (image/png, 100 bytes) is attached after the tool results]",
            wrap_untrusted("test.picture", "drew it")
        )
    );
    assert_eq!(result.images.len(), 1);
    assert!(ctx.provenance.untrusted_source().is_some());
}

#[tokio::test]
async fn images_too_large_or_too_long_are_left_out_and_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path());
    let executor = executor(false);
    let big = executor
        .execute(&draw(800, 600, MAX_IMAGE_BYTES + 1), &ctx)
        .await;
    assert_eq!(
        big,
        ok(
            "drew it\n[an image (image/png, 1500001 bytes) was not attached: images in tool results may have at most 1500000 bytes]"
        )
    );
    let long = executor.execute(&draw(1280, 9_000, 100), &ctx).await;
    assert_eq!(
        long,
        ok(
            "drew it\n[an image (image/png, 1280x9000 px) was not attached: images in tool results may have at most 8000 px a side]"
        )
    );
}

#[tokio::test]
async fn a_failed_call_returns_no_image() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path());
    let result = executor(false)
        .execute(
            &call(
                "test.picture",
                json!({"width": 8, "height": 8, "bytes": 100, "fail": true}),
            ),
            &ctx,
        )
        .await;
    assert_eq!(result, err("the drawing broke"));
}
