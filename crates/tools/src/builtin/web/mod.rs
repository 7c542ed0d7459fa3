//! The web tools: `web.fetch` (a page's readable content, behind an SSRF
//! guard) and `web.search` (Brave, SearXNG, Tavily or DuckDuckGo).

mod cache;
mod content;
mod extract;
mod fetch;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod guard;
mod search;

pub use extract::{Extracted, Format, extract};
pub use fetch::{WebFetch, WebFetchArgs};
pub use search::{WebSearch, WebSearchArgs};
