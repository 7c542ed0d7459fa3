//! Session storage for Flynn on SQLite through sqlx.
