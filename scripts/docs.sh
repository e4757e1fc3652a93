#!/usr/bin/env bash
# The API reference, generated from the docstrings of the installed package,
# into build/docs/ (open build/docs/index.html).
set -euo pipefail
source "$(dirname "$0")/env.sh"
make_venv
if [ "${CAIRNQ_SKIP_INSTALL:-}" != "1" ]; then
  install_cairnq "[postgres,test]"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pdoc>=14"
rm -rf "$ROOT/build/docs"
cd "$(mktemp -d)"
"$VENV/bin/python" -m pdoc cairnq cairnq.client cairnq.worker cairnq.context cairnq.models \
  cairnq.errors cairnq.retention cairnq.backpressure cairnq.watch cairnq.events cairnq.store \
  cairnq.observability cairnq.observability.metrics cairnq.observability.prometheus cairnq.observability.tracing \
  cairnq.observability.otel_metrics cairnq.periodic cairnq.dashboard cairnq.dashboard.queries \
  --docformat markdown -o "$ROOT/build/docs"
echo "== API reference in $ROOT/build/docs/index.html"
