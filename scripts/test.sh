#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs (the Python packages
# only into the project's .venv), starts the services it needs, then runs pytest twice: on the embedded default (SQLite +
# in-memory channel layer) and on PostgreSQL + Redis. Extra arguments go to
# pytest (e.g. `bash scripts/test.sh -k mailbox`). STEERBOARD_BACKENDS picks
# the runs: "embedded postgres" (default), or one of them.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }

log "python packages: requirements.lock and the agent SDK in the project's .venv (scripts/setup.sh)"
bash scripts/setup.sh
python="$(pwd)/${STEERBOARD_VENV:-.venv}/bin/python"

if ! command -v chromium >/dev/null 2>&1; then
  log "installing Debian's chromium for the browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi

# Node 22 (the npm package `node`, a binary from the npm registry) and the TypeScript MCP
# clients, pinned by tests/mcp_ts/package-lock.json, for tests/e2e/test_mcp_typescript.py.
if ! cmp -s tests/mcp_ts/package-lock.json tests/mcp_ts/node_modules/.installed-lock.json 2>/dev/null; then
  log "Node 22 and the TypeScript MCP SDK and Inspector into tests/mcp_ts/node_modules (npm ci)"
  if ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq npm >/dev/null
  fi
  (cd tests/mcp_ts && npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json node_modules/.installed-lock.json)
fi

# Bytecode is cached: a run starts some two hundred Python processes (daphne, manage
# workers, hosts, the CLI), and with PYTHONDONTWRITEBYTECODE set (some machines' default
# environment) each compiled the project's modules afresh and every pytest worker rewrote
# every test module's asserts again. The __pycache__ folders are ignored by git.
unset PYTHONDONTWRITEBYTECODE

backends=${STEERBOARD_BACKENDS:-"embedded postgres"}
# Many tests wait on real processes (daphne starts, Chromium, PostgreSQL restarts): four
# pytest-xdist workers overlap those waits and keep both cores busy. Each test goes to
# whichever worker is free, except that a shared_server module's tests stay on one worker
# together (tests/conftest.py groups them), so the slow files do not queue up on one worker.
# STEERBOARD_TEST_WORKERS=0 runs everything in this process (pytest's own -n overrides).
workers=(-n "${STEERBOARD_TEST_WORKERS:-4}" --dist loadgroup)

# The PostgreSQL run needs the services. A test whose processes run on one backend
# whatever the run is on runs once, in that backend's run (tests/support/live.py):
# several processes and private-cluster outages in the PostgreSQL run
# (postgres_run_only), the demo and the settings checks in the embedded run
# (embedded_run_only); the other run would repeat them unchanged.
{
  log "services: PostgreSQL and Redis on 127.0.0.1"
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! command -v redis-server >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq postgresql redis-server >/dev/null
  fi
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
  fi
  pg_isready -q -h 127.0.0.1 -p 5432 || { echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2; exit 1; }
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { echo "Redis is not answering on 127.0.0.1:6379" >&2; exit 1; }
}

status=0
for backend in $backends; do
  case "$backend" in
    embedded)
      log "test suite on the embedded default (SQLite + in-memory channel layer)"
      env -u DATABASE_URL -u REDIS_URL "$python" -m pytest "${workers[@]}" "$@" || status=$?
      ;;
    postgres)
      log "test suite on PostgreSQL + Redis (channels_redis)"
      DATABASE_URL=${STEERBOARD_PG_URL:-postgres://postgres@127.0.0.1:5432/steerboard} \
      REDIS_URL=${STEERBOARD_REDIS_URL:-redis://127.0.0.1:6379/0} \
        "$python" -m pytest "${workers[@]}" "$@" || status=$?
      ;;
    *) echo "unknown backend $backend" >&2; exit 2 ;;
  esac
  # pytest's 5 means no test ran: that is a failure here too.
  [[ $status -eq 0 ]] || { echo "test run on $backend failed (exit $status)" >&2; exit "$status"; }
done
