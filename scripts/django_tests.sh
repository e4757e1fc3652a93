#!/usr/bin/env bash
# The Django suite (tests/contrib/django: the django.tasks backend and the
# cairnq_worker command) against real Django 6 from PyPI, on SQLite and on
# PostgreSQL, from a fresh clone: Django 6 needs Python >= 3.12, so this makes
# its own virtualenv (.cache/venv-django) on the first such Python it finds
# (python3.14 .. python3.12 on PATH, then pyenv's), builds cairnq as a wheel
# into .cache/dist-django (apart from scripts/test.sh's, so both can run at
# once), installs it with the postgres, test and django extras, and runs
# pytest on the installed wheel from a scratch directory.
# Extra arguments go to pytest (e.g. -x, -k worker).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

find_python() {
  local pyenv_root candidate
  pyenv_root="$(pyenv root 2>/dev/null || echo /nonexistent)"
  for candidate in python3.14 python3.13 python3.12 \
      "$pyenv_root"/versions/3.1[2-9]*/bin/python3.1[2-9]; do
    # (a pyenv shim is on PATH whether or not it may run that version)
    if "$candidate" -c "import sys; sys.exit(sys.version_info < (3, 12))" >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ -z "${PYTHON:-}" ]; then
  if ! PYTHON="$(find_python)"; then
    echo "Django 6 needs Python >= 3.12, and none was found (PATH, pyenv); set PYTHON=..." >&2
    exit 1
  fi
fi
export PYTHON
export CAIRNQ_VENV="${CAIRNQ_VENV:-$ROOT/.cache/venv-django}"
source "$ROOT/scripts/env.sh"

need_libpq
bash "$ROOT/scripts/ensure-postgres.sh"
make_venv
echo "== building the cairnq wheel ($("$VENV/bin/python" -V))"
DIST="$ROOT/.cache/dist-django"
mkdir -p "$ROOT/.cache"
rm -rf "$DIST"
if ! "$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$DIST" "$ROOT" \
    >"$DIST.log" 2>&1; then
  cat "$DIST.log" >&2
  exit 1
fi
WHEEL="$(ls "$DIST"/*.whl)"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$WHEEL"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$WHEEL[postgres,test,django]"
(cd / && "$VENV/bin/python" -c "import cairnq, django; print('== cairnq', cairnq.__version__, 'at', cairnq.__file__, '| Django', django.__version__)")

export CAIRNQ_TEST_INSTALLED=1
WORKDIR="$(mktemp -d)"
trap 'rm -rf "$WORKDIR"' EXIT
cd "$WORKDIR"
"$VENV/bin/python" -I -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "$ROOT/tests/contrib" "$@"
