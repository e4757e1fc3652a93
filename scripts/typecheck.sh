#!/usr/bin/env bash
# mypy --strict on cairnq as installed (the wheel maps _speedups/ and protocol/
# into the package, so the source tree alone does not type-check as one package).
set -euo pipefail
source "$(dirname "$0")/env.sh"
make_venv
if [ "${CAIRNQ_SKIP_INSTALL:-}" != "1" ]; then
  install_cairnq "[postgres,test]"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mypy>=1.10"
cd "$(mktemp -d)"
"$VENV/bin/python" -m mypy --strict -p cairnq
# The pytest plugin is a top-level module (setup.py py_modules): mypy finds no
# such module in site-packages without a py.typed package, so by its file.
"$VENV/bin/python" -m mypy --strict "$ROOT/_cairnq_pytestplugin.py"
