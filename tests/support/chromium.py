"""Debian's Chromium as Playwright launches it, for the browser tests (tests/frontend/conftest.py)
and for scripts/dashboard_screenshot.py: one place owns the binary and its flags."""

CHROMIUM_EXECUTABLE = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def launch_chromium(playwright):
    """A headless Chromium browser from a started sync Playwright (``sync_playwright()``)."""
    return playwright.chromium.launch(executable_path=CHROMIUM_EXECUTABLE, args=CHROMIUM_ARGS)
