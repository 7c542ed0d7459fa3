#!/usr/bin/env bash
# Installs the system packages the tests need, only when they are missing:
#
#   bubblewrap (`bwrap`): the sandbox of shell.exec and process.start; the
#   flynn-tools sandbox tests run commands under it.
#   chromium and chromium-driver: the web chat and dashboard tests drive
#   a headless Chromium through WebDriver.
#   tmux: flynn-tui's end-to-end test runs it in a real terminal.
#   python3 and git: the sandbox tests connect to Unix sockets with
#   python3 and check that common commands (git, python3) still run.
#   postgresql: the PostgreSQL session store's tests (scripts/postgres.sh
#   starts a throwaway server on loopback).
#   espeak-ng and opus-tools (`opusenc`): the voice tests speak with a
#   real local engine and encode it as an Ogg Opus voice note.
#   poppler-utils (`pdftotext`): drive.read reads PDFs in Drive with it.
#
# Idempotent and quick when everything is there. Debian/Ubuntu (apt-get),
# as root or through sudo.
set -euo pipefail

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
[ -x /usr/bin/python3 ] || missing+=(python3)
command -v git >/dev/null 2>&1 || missing+=(git)
# The PostgreSQL store's tests and the cluster test run against a real
# server (scripts/postgres.sh starts it).
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v espeak-ng >/dev/null 2>&1 || missing+=(espeak-ng)
command -v opusenc >/dev/null 2>&1 || missing+=(opus-tools)
command -v pdftotext >/dev/null 2>&1 || missing+=(poppler-utils)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "install-test-deps: need root or sudo to install: ${missing[*]}" >&2
  echo "install-test-deps: run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: no apt-get here; install these with your package manager: ${missing[*]}" >&2
  exit 1
fi

echo "install-test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet.
if ! "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
  "${as_root[@]}" apt-get update
  "${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
