#!/usr/bin/env bash
# Run the whole test suite (the README's second command calls this after the
# install):
#   - tests/, including the browser tests (tests/browser: JupyterLab driven by
#     Debian's chromium; scripts/chromium.sh installs it with apt-get if needed);
#   - the example notebooks under notebooks/, each run top to bottom by nbval
#     (--nbval-lax: every cell must run without an error).
# Starts a loopback PostgreSQL through scripts/postgres.sh so the PostgreSQL
# contract tests run; if that fails they skip and say why (and likewise the
# browser tests when chromium cannot be installed, and the JupyterHub tests
# when scripts/jupyterhub.sh cannot install jupyterhub and its proxy).
# Extra arguments go to pytest. When none of them is a path, the suite is
# tests/ and notebooks/; `bash scripts/test.sh tests/store` runs just that.
# The 40 slowest tests are listed at the end (CI must stay under 30 minutes).
# The suite runs on EASEML_TEST_WORKERS pytest-xdist workers (default 3 on
# the 2-core CI machine: many slow tests wait on their subprocesses), each
# test file on one worker (--dist loadfile: a module's fixtures, such as a hub
# or a service, start once); EASEML_TEST_WORKERS=0 runs it in one process.
# The browser tests (tests/browser) time what chromium draws against what the
# service trains, and a browser starved by three busy workers can fall far
# behind, so the whole suite runs them afterwards, alone, in one process.
# pytest's exit code 5 ("no tests collected") is turned into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${EASEML_TEST_POSTGRES_URL:-}" ]; then
  line=$(bash scripts/postgres.sh start 2>/dev/null | grep '^export EASEML_TEST_POSTGRES_URL=' || true)
  if [ -n "$line" ]; then
    eval "$line"
  else
    echo "scripts/test.sh: could not start PostgreSQL; its tests will be skipped" >&2
  fi
fi
if ! bash scripts/chromium.sh; then
  echo "scripts/test.sh: could not install chromium; the browser tests will be skipped" >&2
fi
if ! bash scripts/jupyterhub.sh; then
  echo "scripts/test.sh: could not install jupyterhub or configurable-http-proxy; the hub tests will be skipped" >&2
fi
paths=(tests notebooks)
for arg in "$@"; do
  if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then
    paths=()
    break
  fi
done
workers=${EASEML_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadfile)
fi
if [ "${#paths[@]}" -eq 0 ]; then  # the caller named the paths: one run
  python -m pytest "${parallel[@]}" --nbval-lax --nbval-current-env --durations=40 "$@"
  status=$?
else
  python -m pytest "${parallel[@]}" --nbval-lax --nbval-current-env --durations=40 --ignore=tests/browser \
    "${paths[@]}" "$@"
  status=$?
  python -m pytest --durations=10 tests/browser "$@"
  browser=$?
  if [ "$status" -eq 5 ]; then  # pytest's "no tests collected": fine if the browser run found some
    status=$browser
  elif [ "$status" -eq 0 ] && [ "$browser" -ne 5 ]; then
    status=$browser
  fi
fi
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests, which counts as a failure" >&2
  exit 1
fi
exit "$status"
