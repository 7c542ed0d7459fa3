//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds
//! each file with `include_str!`, which tracks edits to existing files but
//! not new files in the directory.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations-postgres");
}
