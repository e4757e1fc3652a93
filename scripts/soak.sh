#!/usr/bin/env bash
# Soak: the reliability campaign with bigger sizes, same code as CI.
#
#   bash scripts/soak.sh                 # the sizes below (about 25-30 minutes)
#   bash scripts/soak.sh --ci            # the CI sizes (about 2 minutes), same report lines
#   bash scripts/soak.sh -k contention   # extra arguments go to pytest
#   CAIRNQ_SOAK_SECONDS=600 bash scripts/soak.sh -k contention   # any size can be overridden
#
# Like scripts/test.sh it builds and installs the wheel into .cache/venv and
# runs pytest from a scratch directory, against PostgreSQL if it is available.
#
# | variable                       | CI default | soak  | what                                           |
# |--------------------------------|-----------:|------:|------------------------------------------------|
# | CAIRNQ_SOAK_SECONDS            |         15 |   300 | contention: how long the producers run         |
# | CAIRNQ_SOAK_RATE               |        100 |   150 | contention: tasks per second per producer      |
# | CAIRNQ_SOAK_WORKERS            |          4 |     4 | contention: worker processes                   |
# | CAIRNQ_SOAK_PRODUCERS          |          2 |     2 | contention: producer processes                 |
# | CAIRNQ_SOAK_LEASE_MS           |       1500 |  1500 | contention: worker lease                       |
# | CAIRNQ_SOAK_TASKS              |    160/300 |  2000 | crashes: tasks in the drain; pg faults: tasks  |
# | CAIRNQ_CRASH_KILLS             |          3 |    20 | crashes: workers killed during the drain       |
# | CAIRNQ_CRASH_ROUNDS            |          6 |    50 | crashes: producers killed mid-submit           |
# | CAIRNQ_PG_TERMINATIONS         |          5 |    30 | pg faults: rounds of pg_terminate_backend      |
# | CAIRNQ_MIXED_TASKS             |        150 |  1500 | mixed fleet: tasks per producer and SDK        |
# | CAIRNQ_HUGE_MB                 |         20 |   100 | bad input: the huge payload                    |
# | CAIRNQ_PROP_EXAMPLES           |        100 |  2000 | properties: JSON values per dialect            |
# | CAIRNQ_PROP_MACHINE_EXAMPLES   |         60 |   600 | properties: state-machine runs per dialect     |
# | CAIRNQ_PROP_STEPS              |         40 |    80 | properties: steps per state-machine run        |
set -euo pipefail
source "$(dirname "$0")/env.sh"

if [ "${1:-}" = "--ci" ]; then
  shift  # the defaults the tests use in CI
else
  export CAIRNQ_SOAK_SECONDS="${CAIRNQ_SOAK_SECONDS:-300}"
  export CAIRNQ_SOAK_RATE="${CAIRNQ_SOAK_RATE:-150}"
  export CAIRNQ_SOAK_WORKERS="${CAIRNQ_SOAK_WORKERS:-4}"
  export CAIRNQ_SOAK_PRODUCERS="${CAIRNQ_SOAK_PRODUCERS:-2}"
  export CAIRNQ_SOAK_LEASE_MS="${CAIRNQ_SOAK_LEASE_MS:-1500}"
  export CAIRNQ_SOAK_TASKS="${CAIRNQ_SOAK_TASKS:-2000}"
  export CAIRNQ_CRASH_KILLS="${CAIRNQ_CRASH_KILLS:-20}"
  export CAIRNQ_CRASH_ROUNDS="${CAIRNQ_CRASH_ROUNDS:-50}"
  export CAIRNQ_PG_TERMINATIONS="${CAIRNQ_PG_TERMINATIONS:-30}"
  export CAIRNQ_MIXED_TASKS="${CAIRNQ_MIXED_TASKS:-1500}"
  export CAIRNQ_HUGE_MB="${CAIRNQ_HUGE_MB:-100}"
  export CAIRNQ_PROP_EXAMPLES="${CAIRNQ_PROP_EXAMPLES:-2000}"
  export CAIRNQ_PROP_MACHINE_EXAMPLES="${CAIRNQ_PROP_MACHINE_EXAMPLES:-600}"
  export CAIRNQ_PROP_STEPS="${CAIRNQ_PROP_STEPS:-80}"
fi
# async tests are otherwise cut off after 120 s each
export CAIRNQ_TEST_TIMEOUT_S="${CAIRNQ_TEST_TIMEOUT_S:-7200}"

env | grep -E '^CAIRNQ_(SOAK|CRASH|PG|MIXED|HUGE|PROP)_' | sort | sed 's/^/== /' || true
# -s: each scenario prints its "[reliability] ... lost: n, duplicates: n, errors surfaced: n" line
run_tests -s -q -rfEs \
  "$ROOT/tests/reliability/test_reliability_contention.py" \
  "$ROOT/tests/reliability/test_reliability_crashes.py" \
  "$ROOT/tests/reliability/test_reliability_postgres_faults.py" \
  "$ROOT/tests/reliability/test_reliability_bad_input.py" \
  "$ROOT/tests/reliability/test_reliability_mixed_fleet.py" \
  "$ROOT/tests/api/test_properties.py" \
  "$@"
