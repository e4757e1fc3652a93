#!/usr/bin/env bash
# One command from a fresh clone to a passing test suite: installs what is
# missing (libpq-dev, a virtualenv, the test requirements), starts PostgreSQL
# if it is installed but stopped, builds cairnq as a wheel, installs it, and
# runs the tests against the installed package (not the source tree).
# Extra arguments go to pytest (e.g. -k claim, -x).
set -euo pipefail
source "$(dirname "$0")/env.sh"
run_tests "$ROOT/tests" "$@"
