#!/usr/bin/env bash
# The server, the dashboard and a keyless demo team on the embedded default (SQLite + the
# in-memory channel layer), in the project's own .venv (scripts/setup.sh). Arguments go to
# `manage.py demo` (e.g. `bash scripts/demo.sh --port 8001`; `--help` lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${STEERBOARD_VENV:-.venv}/bin/python" manage.py demo "$@"
