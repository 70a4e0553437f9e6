"""Websocket consumers for agent sessions (/ws/agent/) and team hosts (/ws/host/).

They only translate frames to service calls and channel-layer events to frames.
An agent session's frames feed its ``sessions.ConnectedSession``, which owns what
they do: entries and sends go to the process's writer without blocking the
socket (the next frame is read while they commit), answers (``ack``,
``tool_result``) go out in the order their commits finish, and the quotas and
the cap on tool calls in flight are its. A host's frames go to mailbox/members/hosts.py.
"""
import asyncio
import collections
import logging

from autobahn.exception import Disconnected
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.consumer import get_handler_name
from django.utils import timezone
from pydantic import ValidationError

from mailbox.plumbing import events
from mailbox.plumbing.db import to_db_thread
from mailbox.members import hosts, presence, sessions
from mailbox.plumbing import log_context, outage, tracing
from mailbox.operations import sweeper
from mailbox.plumbing import auth, quota, wire
from mailbox.transports import edge, tools
from mailbox.plumbing.auth import bearer_from_headers, host_team_from_headers
from teams.errors import ErrorCode, TeamError
from teams.tokens import token_hash

log = logging.getLogger(__name__)


# The server asks the client to reconnect (this process was taken for dead;
# mailbox/members/presence.py). Not 1012 ("service restart"): the websocket library
# under daphne lets a server close only with 1000 or 3000-4999.
CLOSE_RECONNECT = 4012
# The frame needed the database (or Redis), which the server cannot reach just now:
# after the SERVICE_UNAVAILABLE error frame, reconnect after a pause and say hello
# (the edge closes a socket whose token it could not look up so too).
CLOSE_UNAVAILABLE = edge.CLOSE_UNAVAILABLE
# The socket's token was revoked (or its member retired) after the socket opened.
CLOSE_UNAUTHENTICATED = 4401
# The token already holds MAX_SOCKETS_PER_TOKEN websockets on this process.
CLOSE_TOO_MANY = 4429

# Tests only: called with each agent or host consumer as its socket starts, so that an in-process
# client can await the consumer's handling of what it sent (tests/support/inproc.py, ``settled``).
# None in production: one check per socket, none per frame.
opened = None


def _error(code: ErrorCode, message: str) -> dict:
    return {"type": "error", **TeamError(code, message).as_wire()}


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = first.get("loc", ())
    # A frame is a union tagged by 'type': pydantic puts the tag first; the field's path is the rest.
    where = ".".join(str(p) for p in (loc[1:] if len(loc) > 1 else loc)) or "frame"
    return f"{where}: {first.get('msg', 'invalid')}"


def _refusal(content, exc: TeamError) -> dict:
    """A frame refused by wire.value_check: a tool call's refusal is its ``tool_result``
    (when its id can be answered), anything else an ``error`` frame."""
    call_id = content.get("id") if isinstance(content, dict) and content.get("type") == "tool" else None
    if isinstance(call_id, str) and 1 <= len(call_id) <= 128 and "\x00" not in call_id and call_id.isprintable():
        name = content.get("name")
        if isinstance(name, str):
            tools.refused(name, exc)
        return {"type": "tool_result", "id": call_id, **exc.as_wire()}
    return {"type": "error", **exc.as_wire()}


class LeanConsumer(AsyncJsonWebsocketConsumer):
    """A consumer whose every frame does not cost a thread hop.

    Channels' ``dispatch`` runs ``close_old_connections`` on a worker thread
    before each handler, for consumers that use the ORM on the event loop's
    threads. These consumers reach the database only through mailbox/plumbing/db.py's
    threads, which look after their own connections."""

    async def dispatch(self, message):
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)


class _JsonFrames(LeanConsumer):
    """Bad JSON gets an error frame; the connection stays open. Whatever a frame
    makes fail ends in an ``error`` frame, never in a crash of the socket; and
    ``disconnect`` runs once however the socket ends (a close, a crash of any
    handler, a cancelled application), so no session or host outlives it."""

    _detached = False
    _closed_unavailable = False

    async def __call__(self, scope, receive, send):
        if opened is not None:
            opened(self, scope)
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self._detached:
                # Channels did not get to websocket_disconnect: a handler raised or the task was cancelled.
                await asyncio.shield(self._detach_once(None))

    async def websocket_disconnect(self, message):
        await self._detach_once(message.get("code"))
        await super().websocket_disconnect(message)  # disconnect() is a no-op now; raises StopConsumer

    async def _detach_once(self, code) -> None:
        if self._detached:
            return
        self._detached = True
        presence.socket_closed(self.channel_name)
        try:
            await self.detach(code)
        except Exception as exc:
            # Most likely the database is out of reach: the process ends this socket's
            # session or host row once it is back (recovery.presence_reconcile).
            log.warning("detaching %s failed: %s: %s; retrying when the database answers",
                        type(self).__name__, type(exc).__name__, exc)
            sweeper.reconcile_soon()

    async def detach(self, code) -> None:
        """End what this socket held (a session, a host's presence); runs exactly once."""

    async def disconnect(self, code):
        pass  # detach() does it, once

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            if text_data is None:
                await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "Frames are JSON text."))
                return
            try:
                content, suspect = wire.json_parse(text_data)
            except TeamError as exc:  # nested too deep, a number out of range
                await self.send_json({"type": "error", **exc.as_wire()})
                return
            except ValueError:
                await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "That frame is not valid JSON."))
                return
            if suspect:
                try:
                    wire.value_check(content)
                except TeamError as exc:  # a NUL or a lone surrogate, named
                    await self.send_json(_refusal(content, exc))
                    return
            if not isinstance(content, dict):
                await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "A frame is a JSON object with a 'type'."))
                return
            await self.receive_json(content)
        except Exception as exc:
            what = outage.noted(exc, "a websocket frame")
            if what is not None:
                await self.unavailable(what)
                return
            # One line, no traceback: a frame the checks above let through made something fail.
            log.warning(
                "a frame on %s failed: %s: %.200s", type(self).__name__, type(exc).__name__, str(exc)
            )
            await self.send_json(_error(ErrorCode.SERVER_ERROR, "That frame could not be handled; the socket stays open."))

    async def refused(self, exc: TeamError, code: int) -> None:
        """Accept only to say why in an ``error`` frame, then close with ``code``: a refusal
        the client should read and reconnect after (a refused handshake is final to it)."""
        await self.accept()
        await self.send_json({"type": "error", **exc.as_wire()})
        await self.close(code=code)

    async def sockets_admitted(self, open_sockets: int) -> bool:
        """Whether the token (``self.token``) may hold one more socket, ``open_sockets``
        already open; refused with 4429 (``refused``) when not."""
        try:
            quota.sockets_admit(open_sockets)
        except TeamError as exc:
            self._detached = True  # it holds nothing yet, however the refusal below ends
            await self.refused(exc, CLOSE_TOO_MANY)
            return False
        return True

    async def unavailable(self, what: str = "database") -> None:
        """A frame needed the database (or Redis), out of reach just now: say so with
        SERVICE_UNAVAILABLE, then close with 4503; the client reconnects after a
        pause, and its hello (replay, unacknowledged entries sent again) picks up."""
        if self._closed_unavailable:
            return
        self._closed_unavailable = True
        await self.send_json(outage.unavailable_frame(what))
        await self.close(code=CLOSE_UNAVAILABLE)


class AgentConsumer(_JsonFrames):
    member = None
    session: sessions.ConnectedSession | None = None
    revoked = False

    async def connect(self):
        try:
            self.member = await edge.member_required(self.scope)  # the one the edge found
        except TeamError:
            self.member = None
        except Exception as exc:
            if outage.noted(exc, "a websocket connect") is None:
                raise
            await self.accept()
            await self.unavailable()
            return
        if self.member is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        log_context.bind(**log_context.of_member(self.member))  # this socket's lines name its member
        # The token's SHA-256: what revocation closes this socket by, and the tool frames' rate key.
        self.token = self.rate_key = token_hash(bearer_from_headers(self.scope["headers"]))
        if not await self.sockets_admitted(auth.sockets_open(self.token)):
            self.member = None  # nothing of this socket to detach
            return
        self.outbox: collections.deque[dict] = collections.deque()
        self.flushing = False
        self.session = sessions.ConnectedSession(member=self.member, channel=self.channel_name, push=self.push)
        # No group: what is for this member's session is sent to the channel its
        # hello records as the member's current one (mailbox/plumbing/events.py).
        presence.socket_opened(self.channel_name)
        auth.socket_opened(self.token, self)
        await self.accept()

    async def detach(self, code):
        if self.member is None:
            return
        auth.socket_closed(self.token, self)
        events.session_unregister(self.channel_name)
        await self.session.close()

    # --- revocation: every frame speaks for a token that still exists ---------------------------
    def token_revoked(self) -> None:
        """On the event loop: the token this socket came with is gone (revoked, superseded,
        or its member retired; mailbox/plumbing/auth.py). No frame of it is handled from now on,
        and the socket closes with 4401 after the frames already queued for it."""
        if self.revoked:
            return
        self.revoked = True
        self.push({"type": "session.revoked"})

    async def session_revoked(self, event):
        message = "This websocket's token was revoked (or its member retired); its frames are refused."
        await self.send_json(_error(ErrorCode.UNAUTHENTICATED, message))
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def _token_alive(self) -> bool:
        """Whether this socket's token still exists: known without the database while the
        process reads the revokes (mailbox/plumbing/auth.py), else looked up as for REST."""
        if self.revoked:
            return False
        if auth.token_alive(self.token):
            return True
        if await to_db_thread(auth.token_recheck)(self.token) is None:
            self.token_revoked()
            return False
        return True

    async def receive_json(self, content, **kwargs):
        if not await self._token_alive():
            return
        try:
            frame = wire.AgentFrame.validate_python(content)
        except ValidationError as exc:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, _validation_message(exc)))
            return
        session = self.session
        if isinstance(frame, wire.ToolFrame):
            carried = None
            if frame.entries is not None:  # an entries frame just before the call, which waits for them
                try:
                    carried = self._entries(frame)
                except TeamError as exc:
                    await self.send_json({"type": "error", **exc.as_wire()})
                    # Refused whole: the call still waits for the entries the socket sent before.
                    carried = sessions.Carried(session, list(session.writes))
            self._tool_call(frame, carried)
            return
        try:
            if isinstance(frame, wire.EntryFrame) and session.said_hello:
                session.entry(frame.entry)
                return
            if isinstance(frame, wire.EntriesFrame) and session.said_hello:
                self._entries(frame)
                if frame.status is not None:  # after these entries, as a status frame right after them
                    await session.status(frame.status)
                return
            if isinstance(frame, wire.Hello):  # after the entries before it, as a status
                replay = await session.hello(frame.status)
                await self.send_json(
                    {"type": "welcome", "member": self.member.name, "team": self.member.team.name, "replay": len(replay),
                     "features": wire.FEATURES}
                )
                for message in replay:
                    await self.session_steer({"message": message})
                # From now on this process pushes to the session directly, after the replay.
                events.session_register(self.channel_name, session)
            elif not session.said_hello:
                await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "Say hello first."))
            elif isinstance(frame, wire.StatusFrame):
                await session.status(frame.status)
        except TeamError as exc:
            await self.send_json({"type": "error", **exc.as_wire()})

    def _entries(self, frame: "wire.EntriesFrame | wire.ToolFrame") -> "sessions.Carried":
        """An entries frame's entries (or a tool frame's) to the session; refused whole (a
        ``TeamError``, nothing stored) before hello or past the per-frame cap."""
        if not self.session.said_hello:
            raise TeamError(ErrorCode.VALIDATION_ERROR, "Say hello first.")
        if len(frame.entries) > quota.entries_per_request():  # refused whole: none of them is stored
            raise quota.too_many_entries(len(frame.entries))
        call_id = frame.id if isinstance(frame, wire.ToolFrame) else None
        return self.session.entries(wire.entries_parsed(frame), call_id=call_id)

    # --- tool calls: beside the next frames, answered when each finishes ----------------------
    def _tool_call(self, frame: "wire.ToolFrame", carried: "sessions.Carried | None" = None) -> None:
        refusal = self.session.tool_calls_full()
        if refusal is None:
            try:
                quota.request_charge(self.rate_key)
            except TeamError as exc:
                refusal = exc
        if refusal is None:
            self.session.tool_call_start(self._tool_run(frame, carried))
            return
        answer = {"type": "session.frame", "frame": {"type": "tool_result", "id": frame.id,
                                                     **tools.refused(frame.name, refusal).as_wire()}}
        if carried is None:
            self.push(answer)
        else:  # after the answers of the entries it carried, as a call's result always is
            asyncio.ensure_future(self._answer_after(carried, answer))

    async def _answer_after(self, carried: "sessions.Carried", answer: dict) -> None:
        await carried.answered()
        self.push(answer)

    async def _tool_run(self, frame: "wire.ToolFrame", carried: "sessions.Carried | None" = None) -> None:
        answer: dict = {"type": "tool_result", "id": frame.id}
        if carried is not None:
            # The history that led to the call is durable before it runs: its entries and every
            # entry before them answered. One that could not be stored (the database is out of
            # reach: the socket closes 4503) leaves the call unmade, as REST's 503 would.
            failed = await carried.answered()
            if failed is not None:
                what = outage.unavailable(failed)
                if what is not None:
                    answer.update(outage.unavailable_body(what))
                else:
                    answer.update(tools.refused(frame.name, TeamError(
                        ErrorCode.SERVER_ERROR, "An entry this call came after could not be stored; the call was not made.",
                    )).as_wire())
                self.push({"type": "session.frame", "frame": answer})
                return
        try:
            answer["result"] = await tools.tool_call(
                member=self.member, name=frame.name, arguments=frame.arguments, transport="ws",
                headers=tracing.frame_headers(frame), trace_out=answer,  # the call's span, when traced
            )
        except TeamError as exc:
            answer.update(exc.as_wire())
        except Exception as exc:
            what = outage.noted(exc, "a tool call")
            if what is not None:  # as REST's 503: nothing was stored, call again
                answer.update(outage.unavailable_body(what))
                self.push({"type": "session.frame", "frame": answer})
                return
            log.warning("tool %s of %s failed", frame.name, self.member, exc_info=True)
            answer.update(TeamError(ErrorCode.SERVER_ERROR, "The server failed; this is a bug.").as_wire())
        if self.outbox or self.flushing:
            self.push({"type": "session.frame", "frame": answer})  # after what waits to go out
            return
        # Nothing waits to go out: sent from here, as the flush would (no task of its own).
        self.flushing = True
        try:
            await self.send_json(answer)
        except Disconnected:
            log.info("sending to %s stopped: the socket is closed", self.member)
        except Exception:
            log.warning("sending to %s failed", self.member, exc_info=True)
        finally:
            self.flushing = False
            if self.outbox:  # pushed meanwhile
                self.flushing = True
                asyncio.ensure_future(self._flush())

    # --- what goes out: pushes from this process and channel-layer events, in order -------
    def push(self, event: dict) -> None:
        """On the event loop: queue an event for this socket; one task sends them in order."""
        self.outbox.append(event)
        if not self.flushing:
            self.flushing = True
            asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while self.outbox:
                await self.dispatch(self.outbox.popleft())
        except Disconnected:
            # The socket closed under the send (the client went, or an outage closed it 4503):
            # what was queued for it is sent again after the next hello (replay, acks of resends).
            log.info("sending to %s stopped: the socket is closed", self.member)
            self.outbox.clear()
        except Exception:
            log.warning("sending to %s failed", self.member, exc_info=True)
            self.outbox.clear()
        finally:
            self.flushing = False

    async def session_frame(self, event):
        await self.send_json(event["frame"])

    # --- a tool frame's entries: their last acks go in its tool_result --------------------------
    held: tuple[str, list] | None = None  # (the tool frame's id, the acks its tool_result may carry)

    async def session_acks_held(self, event):
        """The last acks of a tool frame's entries: held until the next frame this socket sends,
        which carries them when it is that call's tool_result (one frame instead of two), else
        goes after them, so acks keep their order with everything else."""
        await self._held_sent()
        self.held = (event["id"], event["acks"])

    async def send_json(self, content, close=False):
        held = self.held
        if held is not None and content.get("type") == "tool_result" and content.get("id") == held[0]:
            self.held = None
            content = {**content, "acks": held[1]}
        else:
            await self._held_sent()
        await super().send_json(content, close=close)

    async def _held_sent(self) -> None:
        """The held acks as a frame of their own (before any other frame, and before a close)."""
        held, self.held = self.held, None
        if held is not None:
            await super().send_json({"type": "acks", "acks": held[1]})

    async def session_steer(self, event):
        self.session.steer_sent(event["message"]["id"])
        await self.send_json({"type": "steer", "message": event["message"]})
        if tracing.enabled:  # the pushed event of the message's deliver span
            tracing.pushed(event["message"])

    async def session_prompt(self, event):
        await self.send_json({"type": "prompt", "prompt": event["prompt"]})

    async def session_interrupt(self, event):
        await self.send_json({"type": "interrupt"})

    async def session_unavailable(self, event):
        # An entry could not be stored: the database is out of reach. The session sends it again after its next hello.
        if self._closed_unavailable:
            return
        self._closed_unavailable = True
        await self.send_json({**outage.unavailable_frame(), "entry_id": event["entry_id"]})
        await self.close(code=CLOSE_UNAVAILABLE)

    async def session_reset(self, event):
        # This process was taken for dead and its sessions ended: reconnect and say hello again.
        # Acks still held are of entries already stored: they go first, so the session need
        # not send those entries again after its hello.
        await self._held_sent()
        await self.close(code=CLOSE_RECONNECT)


class HostConsumer(_JsonFrames):
    team = None

    async def connect(self):
        self.team = await to_db_thread(host_team_from_headers)(self.scope["headers"])
        if self.team is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        log_context.bind(team=self.team.name)
        self.token = token_hash(bearer_from_headers(self.scope["headers"]))
        if not await self.sockets_admitted(auth.host_sockets_open(self.token)):
            self.team = None  # nothing of this socket to detach
            return
        auth.host_socket_opened(self.token)
        presence.socket_opened(self.channel_name)
        self.group = events.host_group(self.team.pk)
        joined_at = timezone.now()  # every start asked from here on reaches this socket
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await to_db_thread(hosts.host_arrived)(team_id=self.team.pk, channel=self.channel_name, joined_at=joined_at)

    async def detach(self, code):
        if self.team is None:
            return
        auth.host_socket_closed(self.token)
        try:
            await self.channel_layer.group_discard(self.group, self.channel_name)
        finally:
            await to_db_thread(hosts.host_disconnected)(channel=self.channel_name)

    async def receive_json(self, content, **kwargs):
        try:
            frame = wire.HostFrame.validate_python(content)
        except ValidationError as exc:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, _validation_message(exc)))
            return
        if isinstance(frame, wire.StartFailed):
            await to_db_thread(hosts.host_start_failed)(
                team_id=self.team.pk, member_name=frame.member, error=frame.error
            )

    async def host_reset(self, event):
        await self.close(code=CLOSE_RECONNECT)  # as session_reset: this host's presence was dropped

    async def host_start(self, event):
        await self.send_json(
            {"type": "start", "member": event["member"], "token": event["token"], "reason": event["reason"]}
        )
