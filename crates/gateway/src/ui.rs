//! The web chat and dashboard: static files embedded in the binary
//! (`crates/gateway/ui/`), served without a token (the page asks for it
//! and talks to `/rpc` like any other client), with a strict content
//! security policy: only this origin's scripts, styles and connections.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file: its path, type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../ui/index.html"),
    },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/app.js"),
    },
    Asset {
        path: "/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../ui/app.css"),
    },
    Asset {
        path: "/sw.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../ui/sw.js"),
    },
    Asset {
        path: "/manifest.webmanifest",
        content_type: "application/manifest+json",
        body: include_bytes!("../ui/manifest.webmanifest"),
    },
    Asset {
        path: "/icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../ui/icon.svg"),
    },
    Asset {
        path: "/icon-192.png",
        content_type: "image/png",
        body: include_bytes!("../ui/icon-192.png"),
    },
    Asset {
        path: "/icon-512.png",
        content_type: "image/png",
        body: include_bytes!("../ui/icon-512.png"),
    },
];

/// The policy every page response carries. `connect-src 'self'` covers the
/// page's own WebSocket.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The paths the UI serves.
pub(crate) fn paths() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|a| a.path).chain(["/index.html"])
}

/// `GET` of an embedded file, with an ETag so browsers revalidate cheaply.
pub(crate) async fn serve(request: Request) -> Response {
    let path = match request.uri().path() {
        "/index.html" => "/",
        other => other,
    };
    let Some(asset) = ASSETS.iter().find(|a| a.path == path) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let etag = format!("\"{}\"", hex::encode(&Sha256::digest(asset.body)[..8]));
    let fresh = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}
