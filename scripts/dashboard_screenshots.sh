#!/usr/bin/env bash
# Refresh the README's dashboard screenshots (docs/images/dashboard-overview.png,
# docs/images/dashboard-task.png): runs the dashboard's browser tests on SQLite
# (headless Chromium, installed when missing) with CAIRNQ_SCREENSHOTS pointing
# at a scratch directory, then copies those two pages into docs/images.
# Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/env.sh"
SHOTS="$(mktemp -d)"
trap 'rm -rf "$SHOTS"' EXIT
(
  export CAIRNQ_SCREENSHOTS="$SHOTS" CAIRNQ_TEST_DIALECTS=sqlite
  run_tests -q "$ROOT/tests/dashboard/test_browser.py" "$@"
)
mkdir -p "$ROOT/docs/images"
for page in overview task; do
  cp "$SHOTS/dashboard-$page.png" "$ROOT/docs/images/dashboard-$page.png"
  echo "== docs/images/dashboard-$page.png"
done
