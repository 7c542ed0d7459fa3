//! Reading the PostgreSQL store's rows back into the crate's types, and
//! the small conversions its writes share.

use std::borrow::Cow;

use flynn_protocol::Usage;
use sqlx::Row;
use sqlx::postgres::PgRow;

pub(super) use crate::codec::{Encoded, encode, status_from, to_i64, to_u64};
use crate::{Result, UsageTotal};

/// `text` as PostgreSQL's `TEXT` can hold it. SQLite keeps the NUL
/// character; PostgreSQL refuses the whole write, which would refuse a
/// message whose first line (the session's title) held one. Each NUL is
/// stored as U+FFFD, the replacement character.
pub(super) fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// [`text`] of an optional value.
pub(super) fn opt_text(value: Option<&str>) -> Option<Cow<'_, str>> {
    value.map(text)
}

/// The bytes of a message row's stored JSON.
pub(super) fn content_len(row: &PgRow) -> usize {
    row.try_get::<&str, _>("content").map_or(0, str::len)
}

/// The sums of a usage query's row (`calls`, `input`, `output`,
/// `cache_read`, `cache_write`, `cost`, `unpriced`).
pub(super) fn usage_total(row: &PgRow) -> Result<UsageTotal> {
    let count = |name: &str| -> Result<u64> { Ok(to_u64(row.try_get::<i64, _>(name)?)) };
    Ok(UsageTotal {
        calls: count("calls")?,
        usage: Usage {
            input_tokens: count("input")?,
            output_tokens: count("output")?,
            cache_read_tokens: count("cache_read")?,
            cache_write_tokens: count("cache_write")?,
        },
        cost_usd: row.try_get("cost")?,
        unpriced_calls: count("unpriced")?,
    })
}

crate::codec::row_decoders!(pub(super) sqlx::postgres::PgRow);
