"""Refresh docs/dashboard.png from a real demo run: the team page mid-workflow.

Clones this checkout to a temporary directory (a fresh embedded database), runs
`python manage.py demo` there with a fixed demo password, signs in with Debian's
Chromium, takes a full-page screenshot AT seconds after the kickoff (default 24:
the implementer mid-turn, both tasks on the board), and prints how long the team
worked (kickoff to TEAM_WORKFLOW_OK). Needs the test extras (Playwright) and
Debian's chromium, as `bash scripts/test.sh` installs them.

    python scripts/dashboard_screenshot.py [--at 24] [--port 8123] [--out docs/dashboard.png]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a file, from scripts/: the checkout's tests/support too
from tests.support.chromium import launch_chromium  # noqa: E402 (the browser tests' Chromium and flags)

PASSWORD = "demo-screenshot-pw"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at", type=float, default=24.0, help="seconds after the kickoff (default 24)")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    args = parser.parse_args()

    clone = tempfile.mkdtemp(prefix="steerboard-shot-")
    subprocess.run(["git", "clone", "-q", str(ROOT), clone], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}  # the embedded default
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "demo", "--port", str(args.port), "--password", PASSWORD,
         "--exit-when-done", "--timeout", "300"],
        cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    started = time.monotonic()
    marks: dict[str, object] = {}

    def follow() -> None:
        for line in demo.stdout:
            print(f"{time.monotonic() - started:6.1f} s  {line.rstrip()}", flush=True)
            if line.strip().startswith("dashboard "):
                marks["url"] = line.split()[-1]
            for word, mark in (("Kickoff", "kickoff"), ("TEAM_WORKFLOW_OK", "ok")):
                if word in line:
                    marks[mark] = time.monotonic()

    threading.Thread(target=follow, daemon=True).start()
    try:
        while "url" not in marks:
            if demo.poll() is not None:
                return demo.returncode or 1
            time.sleep(0.2)
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(str(marks["url"]))
            page.fill('input[name="username"]', "demo")
            page.fill('input[name="password"]', PASSWORD)
            page.click('button[type="submit"], input[type="submit"]')
            page.wait_for_url(re.compile(r"/teams/"))
            while "kickoff" not in marks:
                time.sleep(0.2)
            time.sleep(max(0.0, marks["kickoff"] + args.at - time.monotonic()))
            # The roster shows each member as one row; the picture opens the implementer's lane.
            opener = page.locator('[data-lane-details="implementer"] > summary')
            if opener.count():
                opener.click()
                page.wait_for_timeout(300)
            shot = Path(clone) / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        demo.wait(timeout=300)
    finally:
        if demo.poll() is None:
            demo.terminate()
    shutil.copy(shot, args.out)
    worked = marks["ok"] - marks["kickoff"] if "ok" in marks else None
    print(f"wrote {args.out}; the team worked {worked:.1f} s (kickoff to TEAM_WORKFLOW_OK)" if worked else
          f"wrote {args.out}; no TEAM_WORKFLOW_OK seen")
    return demo.returncode


if __name__ == "__main__":
    sys.exit(main())
