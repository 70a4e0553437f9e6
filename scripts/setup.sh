#!/usr/bin/env bash
# The project's own Python environment: .venv in the checkout (STEERBOARD_VENV to put it
# elsewhere), holding exactly the versions in requirements.lock (hash-checked) and the agent
# SDK from sdk/ (editable). The system Python is left as it was: nothing is installed into it,
# and the server's apps are never installed as importable packages (a Django project runs from
# its folder). scripts/demo.sh and scripts/test.sh run this first; it installs again only when
# requirements.lock or sdk/pyproject.toml changed. Refreshing the lock: docs/operations.md,
# "Dependencies".
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${STEERBOARD_VENV:-.venv}

if [[ ! -x $venv/bin/python ]]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 leaves venv out: its package python3-venv adds it.
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      rm -rf "$venv"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$venv"
    else
      echo "python3 -m venv failed: install python3-venv (sudo apt-get install python3-venv) and run this again" >&2
      exit 1
    fi
  fi
fi

stamp="$venv/.installed"
wanted="$(cat requirements.lock sdk/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
  echo "== installing requirements.lock and the agent SDK into $venv" >&2
  pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install --require-hashes -r requirements.lock
  "${pip[@]}" install --no-deps -e ./sdk
  echo "$wanted" > "$stamp"
fi
