#!/usr/bin/env bash
# One command from a fresh clone to a passing test suite: installs what is
# missing (libpq-dev, a virtualenv, the test requirements), starts PostgreSQL
# if it is installed but stopped, builds cairnq as a wheel, installs it, and
# runs the tests against the installed package (not the source tree).
# Extra arguments go to pytest (e.g. -k claim, -x).
set -euo pipefail
source "$(dirname "$0")/env.sh"
need_libpq
bash "$ROOT/scripts/ensure-postgres.sh"
make_venv
install_cairnq "[postgres,test]"
export CAIRNQ_TEST_INSTALLED=1
# From a scratch directory, so no subprocess can import the source tree by accident.
WORKDIR="$(mktemp -d)"
trap 'rm -rf "$WORKDIR"' EXIT
cd "$WORKDIR"
"$VENV/bin/python" -I -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "$ROOT/tests" "$@"
