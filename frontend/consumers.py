"""The dashboard websocket: /ws/dashboard/<team>/ (one team) and /ws/dashboard/ (the team list).

It forwards the domain's ``team.changed`` doorbells to the browser and nothing
else; the page re-reads what it shows from the database (the snapshot view),
so a lost doorbell or a dropped socket never leaves it stale. Only signed-in
people get in (session cookie via AuthMiddlewareStack; the route is wrapped in
an exact same-origin check, see frontend/routing.py).

A socket without a signed-in session is accepted and closed at once with 4401
(a close before the handshake would reach the browser as an HTTP 403, which
the page cannot tell from a network error); the page then goes to the login
page. Each socket joins a group of its session (``session_group``): signing
out closes every socket that session still has open, with 4401 too. A socket
stays open only while its session stays signed in (accounts/sessions.py): each
also joins a group of its user (``user_group``), rung when the user changes (a
password reset, deactivated, deleted: frontend/signals.py), on which this
process checks its sockets' sessions at once; and while any are open, one task
checks them all every ``SESSION_RECHECK_INTERVAL`` seconds (one read of the
sessions and one of their users), which also ends the sockets of sessions
that expired or were deleted, and those whose doorbell was lost. Those no
longer signed in are closed with 4401.

The team list hears of teams made by any process: another daphne, or
``manage.py team_create`` on the embedded default, where the in-memory channel
layer reaches no other process (and creating a team rings nobody anyway: no
dashboard group exists for a team before it does). While team-list sockets are
open in this process one task reads the teams' count and highest id every
``TEAM_WATCH_INTERVAL`` seconds (one index-only read for all of them); when
that changed, each of them joins the new teams' groups and gets a
``team.changed`` with ``"kind": "team"``, and the page re-reads.
"""
import asyncio
import json
import logging

from accounts.sessions import sessions_signed_out
from frontend import selectors
from frontend.signals import session_group, user_group
from mailbox.plumbing import events
from mailbox.plumbing.db import to_db_thread
from mailbox.plumbing import outage
from mailbox.transports.consumers import LeanConsumer
from teams.errors import ErrorCode, TeamError

log = logging.getLogger(__name__)
TEAM_WATCH_INTERVAL = 2.0
SESSION_RECHECK_INTERVAL = 5.0  # the bound on a signed-out socket staying open (docs/dashboard.md)
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# A browser only ever sends {"type": "ping"}; anything longer is not ours.
MAX_FRAME_CHARS = 4096


class _TeamListWatch:
    """The team-list sockets of this process (on one event loop), and the one task that
    reads the teams' mark for them every ``TEAM_WATCH_INTERVAL`` while any is open."""

    def __init__(self):
        self.sockets: set[DashboardConsumer] = set()
        self.task: asyncio.Task | None = None

    def add(self, socket: "DashboardConsumer") -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(TEAM_WATCH_INTERVAL)
            if not self.sockets:
                return
            try:
                mark = await to_db_thread(selectors.teams_mark)()
            except Exception:  # the database is away: /readyz tells the page; try again next time
                continue
            for socket in [s for s in self.sockets if s.teams_mark != mark]:
                try:
                    await socket.teams_changed()
                except Exception:
                    log.warning("could not tell a team list about new teams", exc_info=True)


class _SessionWatch:
    """Every signed-in dashboard socket of this process (on one event loop), and the one
    task that checks their sessions: every ``SESSION_RECHECK_INTERVAL`` while any is open,
    and at once when asked (``recheck_now``: a user changed)."""

    def __init__(self):
        self.sockets: set[DashboardConsumer] = set()
        self.task: asyncio.Task | None = None
        self.recheck = asyncio.Event()

    def add(self, socket: "DashboardConsumer") -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.recheck = asyncio.Event()
            self.task = asyncio.ensure_future(self._run())

    def recheck_now(self) -> None:
        self.recheck.set()

    async def _run(self) -> None:
        while self.sockets:
            try:
                await asyncio.wait_for(self.recheck.wait(), SESSION_RECHECK_INTERVAL)
            except TimeoutError:
                pass
            self.recheck.clear()
            sockets = list(self.sockets)
            if not sockets:
                return
            try:
                ended = await to_db_thread(sessions_signed_out)(sessions={s.session_key: s.user_id for s in sockets})
            except Exception as exc:  # the database is away: /readyz tells the page; check again next time
                if outage.noted(exc, "a dashboard session check") is None:
                    log.warning("could not check the dashboard sockets' sessions", exc_info=True)
                continue
            for socket in sockets:
                if socket.session_key in ended and socket in self.sockets:
                    self.sockets.discard(socket)
                    try:
                        await socket.close(code=CLOSE_UNAUTHENTICATED)
                    except Exception:  # it went meanwhile; the others still close
                        log.debug("closing a signed-out dashboard socket failed", exc_info=True)


# Each event loop's watches (one loop in a server process; a test may run several).
_watches: dict[asyncio.AbstractEventLoop, tuple[_SessionWatch, _TeamListWatch]] = {}


def _watches_of_loop() -> tuple[_SessionWatch, _TeamListWatch]:
    loop = asyncio.get_running_loop()
    found = _watches.get(loop)
    if found is None:
        if len(_watches) > 16:  # loops of finished tests: forget them
            for old in [old for old in _watches if old.is_closed()]:
                del _watches[old]
        found = _watches[loop] = (_SessionWatch(), _TeamListWatch())
    return found


def session_watch() -> _SessionWatch:
    """This event loop's signed-in dashboard sockets and their session checks."""
    return _watches_of_loop()[0]


def team_list_watch() -> _TeamListWatch:
    return _watches_of_loop()[1]


def _error(message: str) -> dict:
    return {"type": "error", **TeamError(ErrorCode.VALIDATION_ERROR, message).as_wire()}


class DashboardConsumer(LeanConsumer):
    groups_joined: list[str] = []
    teams_mark: tuple[int, int | None] | None = None
    session_key: str | None = None
    user_id: str | None = None

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the socket ended (disconnect() does not run when the task is cancelled)
            self._unwatched()

    async def connect(self):
        self.groups_joined = []
        user = self.scope.get("user")
        session = self.scope.get("session")
        if user is None or not user.is_authenticated or session is None or not session.session_key:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        self.session_key, self.user_id = session.session_key, str(user.pk)
        team_name = self.scope["url_route"]["kwargs"].get("team")
        if team_name is None:
            team_ids, self.teams_mark = await to_db_thread(selectors.team_list_read)()
        else:
            team_ids = await to_db_thread(selectors.dashboard_team_ids)(team_name)
        if team_name is not None and not team_ids:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        groups = [events.dashboard_group(team_id) for team_id in team_ids]
        groups += [session_group(self.session_key), user_group(self.user_id)]
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()
        session_watch().add(self)
        # The page re-reads on this frame: anything before the subscription is in that read.
        await self.send_json({"type": "subscribed", "team": team_name})
        if team_name is None:
            team_list_watch().add(self)

    async def teams_changed(self) -> None:
        """Teams were made (or removed) since this team list last looked: follow the
        new ones too, then ring the page."""
        team_ids, self.teams_mark = await to_db_thread(selectors.team_list_read)()
        for group in (events.dashboard_group(team_id) for team_id in team_ids):
            if group not in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
                self.groups_joined.append(group)
        await self.send_json({"type": "team.changed", "kind": "team"})

    async def _refuse(self, code: int) -> None:
        """Accept, then close with ``code``: the browser sees the code (a refused
        handshake would only be an HTTP 403 to it)."""
        await self.accept()
        await self.close(code=code)

    def _unwatched(self) -> None:
        found = _watches.get(asyncio.get_running_loop())
        if found is not None:
            for watch in found:
                watch.sockets.discard(self)

    async def disconnect(self, code):
        self._unwatched()
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """Whatever arrives, the socket stays open: a frame that is not a JSON object
        gets an error frame (as on the agents' sockets)."""
        if text_data is None:
            await self.send_json(_error("Frames are JSON text."))
            return
        if len(text_data) > MAX_FRAME_CHARS:
            await self.send_json(_error(f"A frame is at most {MAX_FRAME_CHARS} characters."))
            return
        try:
            content = json.loads(text_data)
        except (ValueError, RecursionError):
            await self.send_json(_error("That frame is not valid JSON."))
            return
        if not isinstance(content, dict):
            await self.send_json(_error("A frame is a JSON object with a 'type'."))
            return
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})
        else:
            await self.send_json(_error("The only frame a dashboard sends is {\"type\": \"ping\"}."))

    async def team_changed(self, event):
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "team.changed"})

    async def session_ended(self, event):
        session_watch().sockets.discard(self)
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def session_check(self, event):
        """The user changed (frontend/signals.py): check this process's sockets' sessions now."""
        session_watch().recheck_now()
