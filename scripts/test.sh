#!/usr/bin/env bash
# Run the whole test suite (the README's second command calls this after the
# install). Starts a loopback PostgreSQL through scripts/postgres.sh so the
# PostgreSQL contract tests run; if that fails they skip and say why.
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
python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "scripts/test.sh: pytest collected no tests, which counts as a failure" >&2
  exit 1
fi
exit "$status"
