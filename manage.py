#!/usr/bin/env python
"""Django's command-line utility for Steerboard."""
import os
import secrets
import sys
from pathlib import Path


def _demo_secret_key() -> None:
    """`manage.py demo` runs without any setting: it makes its own SECRET_KEY (kept
    in var/demo-secret-key, so the demo's logins survive a restart of the demo).
    Every other command needs SECRET_KEY set, or DEBUG=1 (config/settings.py)."""
    if os.environ.get("SECRET_KEY"):
        return
    var = Path(os.environ.get("STEERBOARD_VAR_DIR", Path(__file__).resolve().parent / "var"))
    var.mkdir(parents=True, exist_ok=True)
    path = var / "demo-secret-key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    os.environ["SECRET_KEY"] = path.read_text().strip()


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if sys.argv[1:2] == ["demo"]:
        _demo_secret_key()
        if not {"-h", "--help"} & set(sys.argv):
            # Loading Django takes seconds on a slow machine: say so before it starts.
            print("Steerboard demo: loading Django ...", flush=True)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
