//! Links Flynn's binaries with packed relative relocations (`DT_RELR`,
//! `-z pack-relative-relocs`) when the C library that will load them
//! supports it. A position-independent Rust binary carries one 24-byte
//! relocation per pointer in its read-only data (about 3 MB of the
//! `flynn` binary); packed, they take a few kilobytes, and the loader
//! applies them faster.
//!
//! glibc loads such binaries from 2.36 on, and refuses them before. The
//! binary is built for the machine that builds it (the README's
//! `cargo install`), so the check is the build machine's glibc: packed
//! when it is 2.36 or newer, left as before otherwise, on other C
//! libraries and systems, and when cross-compiling. `FLYNN_RELR=0` turns
//! it off (a binary to copy to an older system), `FLYNN_RELR=1` on.
//!
//! `bins/flynn-daemon` and `bins/flynn-tui` build with this script too.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-env-changed=FLYNN_RELR");
    if packs() {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

fn packs() -> bool {
    match std::env::var("FLYNN_RELR").as_deref() {
        Ok("0") => return false,
        Ok("1") => return true,
        _ => {}
    }
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    if !native || var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return false;
    }
    glibc().is_some_and(|version| version >= (2, 36))
}

/// The build machine's glibc version, from `getconf GNU_LIBC_VERSION`
/// ("glibc 2.36").
fn glibc() -> Option<(u32, u32)> {
    let output = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}
