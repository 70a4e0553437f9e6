"""Debian's Chromium as Playwright launches it, for the browser tests (tests/frontend/conftest.py)
and for scripts/dashboard_screenshot.py: one place owns the binary and its flags, and the one
Chromium a test process shares between its browser tests (``ChromiumSession``)."""
import asyncio
import contextlib

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


class ChromiumSession:
    """One sync Playwright and one Chromium for the whole test process, started at its first
    browser test; each test gets contexts and pages of its own (``active``), closed after it.

    Sync Playwright runs its event loop in a greenlet of this thread, suspended inside the
    loop's ``run_forever`` between its calls, and marks that loop as this thread's running
    loop after each call. Any other test of the process (pytest-asyncio's, a Django test
    that calls ``async_to_sync``) would find a loop running and refuse to start its own. So
    the loop is this thread's running loop only while a browser test runs (``active``), and
    none is between them: the suspended loop waits, untouched, for the next browser test."""

    def __init__(self):
        self._playwright = None
        self._browser = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextlib.contextmanager
    def active(self):
        """The browser, for one test: Playwright's loop marked running for the test's calls,
        and unmarked after it, once the contexts the test opened are closed."""
        if asyncio._get_running_loop() is not None:
            raise RuntimeError("a browser test runs synchronously: an event loop is already running here")
        if self._browser is None:
            from playwright.sync_api import sync_playwright

            try:
                self._playwright = sync_playwright().start()
                self._loop = self._playwright._loop
                self._browser = launch_chromium(self._playwright)
            except BaseException:
                self.close()
                raise
        asyncio._set_running_loop(self._loop)  # as Playwright's own calls leave it
        if not self._browser.is_connected():  # it crashed under an earlier test: a new one
            try:
                self._browser = launch_chromium(self._playwright)
            except BaseException:
                asyncio._set_running_loop(None)
                raise
        try:
            yield self._browser
        finally:
            try:
                for ctx in list(self._browser.contexts):
                    ctx.close()
            finally:
                asyncio._set_running_loop(None)

    def close(self) -> None:
        if self._playwright is None:
            asyncio._set_running_loop(None)
            return
        asyncio._set_running_loop(self._loop)
        try:
            if self._browser is not None:
                self._browser.close()
        finally:
            self._playwright.stop()  # closes Playwright's own loop, which unmarks it
            asyncio._set_running_loop(None)
            self._playwright = self._browser = self._loop = None
