#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/browser, Python Playwright).
#
#   scripts/chromium.sh            # install with apt-get if /usr/bin/chromium is missing
#   scripts/chromium.sh --check    # exit 0 if it is there and starts, 1 otherwise; installs nothing
#
# The tests drive the system browser (executable_path=/usr/bin/chromium), never
# a Playwright-downloaded one. scripts/test.sh calls this before pytest; when it
# fails, the browser tests skip and say why.
#
# Settings (environment):
#   EASEML_CHROMIUM   the browser binary (default /usr/bin/chromium)
set -euo pipefail

CHROMIUM="${EASEML_CHROMIUM:-/usr/bin/chromium}"

say() { echo "chromium.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

works() {
    [[ -x "$CHROMIUM" ]] && "$CHROMIUM" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1
}

if [[ "${1:-}" == "--check" ]]; then
    works
    exit
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--check]" >&2; exit 2; }

if works; then
    say "$("$CHROMIUM" --version 2>/dev/null) at $CHROMIUM"
    exit 0
fi
[[ "$CHROMIUM" == /usr/bin/chromium ]] || die "$CHROMIUM is missing or does not start (EASEML_CHROMIUM points there)"

if [[ $(id -u) -eq 0 ]]; then
    as_root() { "$@"; }
elif sudo -n true 2>/dev/null; then
    as_root() { sudo -n "$@"; }
else
    die "chromium is not installed; run as root or: sudo apt-get install -y chromium"
fi
command -v apt-get >/dev/null || die "no apt-get here; install Debian's chromium package by hand"

say "installing chromium with apt-get"
as_root apt-get update >&2
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-liberation >&2
works || die "apt-get installed chromium but $CHROMIUM does not start"
say "$("$CHROMIUM" --version 2>/dev/null) at $CHROMIUM"
