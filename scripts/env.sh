#!/usr/bin/env bash
# Shared setup, sourced by demo.sh and test.sh: a virtualenv under .cache/venv
# with cairnq built from this checkout as a wheel (Cython kernels compiled)
# and installed like a user would install it. Idempotent and quick when done.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CAIRNQ_VENV:-$ROOT/.cache/venv}"
PY="${PYTHON:-python3}"

need_libpq() {
  # psycopg[c] compiles against libpq; pg_config tells where it is.
  if ! command -v pg_config >/dev/null 2>&1; then
    echo "== installing libpq-dev (pg_config is missing)"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpq-dev >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpq-dev >/dev/null
    fi
  fi
}

need_browser() {
  # The dashboard's browser tests drive Debian's headless Chromium through its
  # chromedriver (never a downloaded browser).
  if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "== installing chromium and chromium-driver (the dashboard's browser tests)"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
      sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
  fi
}

make_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    echo "== creating $VENV"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip wheel
  fi
}

install_cairnq() {
  # $1: extra requirements (e.g. ".[postgres,test]" deps), installed before the wheel.
  echo "== building the cairnq wheel"
  rm -rf "$ROOT/.cache/dist"
  "$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    -w "$ROOT/.cache/dist" "$ROOT" 2>&1 | grep -v -i -E "warning|^\s*$" || true
  local wheel
  wheel="$(ls "$ROOT"/.cache/dist/cairnq_fast-*.whl)"  # the distribution cairnq-fast
  # A venv made before the rename holds this project as the distribution `cairnq`:
  # remove it, or cairnq refuses to import beside it (cairnq/_distribution.py).
  "$VENV/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y cairnq >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel$1"
  (cd / && "$VENV/bin/python" -c "import cairnq; print('==', cairnq.IMPLEMENTATION, cairnq.__version__, 'kernels:', cairnq.SPEEDUPS, 'at', cairnq.__file__)")
}

run_tests() {
  # Everything the test suite needs, then pytest on the installed wheel with
  # the given arguments, from a scratch directory, so nothing (not even a
  # subprocess) can import the source tree by accident.
  need_libpq
  need_browser
  bash "$ROOT/scripts/ensure-postgres.sh"
  make_venv
  install_cairnq "[postgres,test]"
  export CAIRNQ_TEST_INSTALLED=1
  export CAIRNQ_REQUIRE_BROWSER=1  # the browser tests fail, never skip, here
  WORKDIR="$(mktemp -d)"
  trap 'rm -rf "$WORKDIR"' EXIT
  cd "$WORKDIR"
  "$VENV/bin/python" -I -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "$@"
}
