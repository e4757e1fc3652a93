#!/usr/bin/env bash
# Start the machine's PostgreSQL cluster if it is installed but not running.
set -uo pipefail
if pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  exit 0
fi
if [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null 2>&1; then
  version="$(ls /etc/postgresql | sort -V | tail -n 1)"
  echo "== starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do
    pg_isready -h 127.0.0.1 -p 5432 -q && exit 0
    sleep 1
  done
fi
echo "== PostgreSQL is not available; Postgres tests will be skipped" >&2
exit 0
