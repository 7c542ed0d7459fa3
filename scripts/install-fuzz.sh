#!/usr/bin/env sh
# Installs cargo-fuzz (and checks the nightly toolchain it needs) for
# `cargo xtask fuzz`. Idempotent: returns at once when both are present.
set -eu

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "install-fuzz: installing the nightly toolchain (libFuzzer needs -Z flags)" >&2
    rustup toolchain install nightly --profile minimal
fi

if cargo fuzz --version >/dev/null 2>&1; then
    exit 0
fi

echo "install-fuzz: installing cargo-fuzz" >&2
cargo install cargo-fuzz --locked
