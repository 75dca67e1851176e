#!/usr/bin/env bash
# JupyterHub and its proxy for the hub tests (tests/service/test_jupyterhub.py,
# marker `jupyterhub`): they start a real hub on loopback with `easeml serve
# --jupyterhub` as its managed service.
#
#   scripts/jupyterhub.sh            # pip/npm install what is missing; a no-op when both are there
#   scripts/jupyterhub.sh --check    # exit 0 if both are there, 1 otherwise; installs nothing
#
# Needs only the package registries: `jupyterhub` from PyPI (into the Python
# that runs the tests: $PYTHON, default `python`) and `configurable-http-proxy`
# from npm (`npm install -g`). scripts/test.sh calls this before pytest; when it
# fails, the hub tests skip and say why.
set -euo pipefail

PYTHON="${PYTHON:-python}"

say() { echo "jupyterhub.sh: $*" >&2; }
die() { say "error: $*"; exit 1; }

have_hub() { "$PYTHON" -c "import jupyterhub" >/dev/null 2>&1; }
have_proxy() { command -v configurable-http-proxy >/dev/null 2>&1; }

if [[ "${1:-}" == "--check" ]]; then
    have_hub && have_proxy
    exit
fi
[[ $# -eq 0 ]] || { echo "usage: $0 [--check]" >&2; exit 2; }

if ! have_hub; then
    say "installing jupyterhub with pip"
    "$PYTHON" -m pip install --quiet "jupyterhub>=6" >&2 || die "pip install jupyterhub failed"
    have_hub || die "pip installed jupyterhub but '$PYTHON -c \"import jupyterhub\"' fails"
fi
if ! have_proxy; then
    command -v npm >/dev/null || die "no npm here; install Debian's npm (apt-get install -y npm) first"
    say "installing configurable-http-proxy with npm"
    npm install -g --silent configurable-http-proxy >&2 || die "npm install -g configurable-http-proxy failed"
    have_proxy || die "npm installed configurable-http-proxy but it is not on PATH ($(npm prefix -g)/bin)"
fi
say "jupyterhub $("$PYTHON" -c 'import jupyterhub; print(jupyterhub.__version__)'), configurable-http-proxy $(configurable-http-proxy --version 2>/dev/null)"
