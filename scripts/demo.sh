#!/usr/bin/env bash
# One command from a fresh clone to the main job: build and install cairnq,
# then submit and drain tasks on a local SQLite file (`cairnq demo`).
# Extra arguments go to `cairnq demo` (e.g. --tasks 20000 --concurrency 64).
set -euo pipefail
source "$(dirname "$0")/env.sh"
make_venv
install_cairnq ""
cd /tmp && exec "$VENV/bin/cairnq" demo "$@"
