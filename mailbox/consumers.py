"""Websocket consumers for agent sessions (/ws/agent/) and team hosts (/ws/host/).

They only translate frames to service calls and channel-layer events to frames.
"""
import json

from channels.generic.websocket import AsyncJsonWebsocketConsumer
from pydantic import ValidationError

from mailbox import events, sessions, sweeper, wire
from mailbox.auth import host_team_from_headers, member_from_headers
from mailbox.db import database_sync_to_async
from teams.errors import ErrorCode, TeamError


# The server asks the client to reconnect (this process was taken for dead;
# mailbox/presence.py). Not 1012 ("service restart"): the websocket library
# under daphne lets a server close only with 1000 or 3000-4999.
CLOSE_RECONNECT = 4012


def _error(code: ErrorCode, message: str) -> dict:
    return {"type": "error", "error": {"code": str(code), "message": message}}


def _validation_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "frame"
    return f"{where}: {first.get('msg', 'invalid')}"


class _JsonFrames(AsyncJsonWebsocketConsumer):
    """Bad JSON gets an error frame; the connection stays open."""

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if text_data is None:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "Frames are JSON text."))
            return
        try:
            content = json.loads(text_data)
        except ValueError:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "That frame is not valid JSON."))
            return
        if not isinstance(content, dict):
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "A frame is a JSON object with a 'type'."))
            return
        await self.receive_json(content)


class AgentConsumer(_JsonFrames):
    member = None
    said_hello = False

    async def connect(self):
        sweeper.ensure_started()
        self.member = await database_sync_to_async(member_from_headers)(self.scope["headers"])
        if self.member is None:
            await self.close(code=4401)
            return
        # No group: what is for this member's session is sent to the channel its
        # hello records as the member's current one (mailbox/events.py).
        await self.accept()

    async def disconnect(self, code):
        if self.member is None:
            return
        if self.said_hello:
            await database_sync_to_async(sessions.session_closed)(member_id=self.member.pk, channel=self.channel_name)

    async def receive_json(self, content, **kwargs):
        try:
            frame = wire.AgentFrame.validate_python(content)
        except ValidationError as exc:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, _validation_message(exc)))
            return
        try:
            if isinstance(frame, wire.Hello):
                replay = await database_sync_to_async(sessions.session_hello)(
                    member_id=self.member.pk, state=frame.status, channel=self.channel_name
                )
                self.said_hello = True
                await self.send_json(
                    {"type": "welcome", "member": self.member.name, "team": self.member.team.name, "replay": len(replay)}
                )
                for message in replay:
                    await self.send_json({"type": "steer", "message": message})
            elif not self.said_hello:
                await self.send_json(_error(ErrorCode.VALIDATION_ERROR, "Say hello first."))
            elif isinstance(frame, wire.StatusFrame):
                await database_sync_to_async(sessions.session_status)(
                    member_id=self.member.pk, state=frame.status, channel=self.channel_name
                )
            else:
                created = await database_sync_to_async(sessions.entry_report)(
                    member=self.member, entry=frame.entry.as_stored()
                )
                await self.send_json({"type": "ack", "entry_id": frame.entry.id, "folded": not created})
        except TeamError as exc:
            await self.send_json({"type": "error", **exc.as_wire()})

    # channel-layer events -> frames
    async def session_steer(self, event):
        await self.send_json({"type": "steer", "message": event["message"]})

    async def session_prompt(self, event):
        await self.send_json({"type": "prompt", "prompt": event["prompt"]})

    async def session_interrupt(self, event):
        await self.send_json({"type": "interrupt"})

    async def session_reset(self, event):
        # This process was taken for dead and its sessions ended: reconnect and say hello again.
        await self.close(code=CLOSE_RECONNECT)


class HostConsumer(_JsonFrames):
    team = None

    async def connect(self):
        sweeper.ensure_started()
        self.team = await database_sync_to_async(host_team_from_headers)(self.scope["headers"])
        if self.team is None:
            await self.close(code=4401)
            return
        self.group = events.host_group(self.team.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await database_sync_to_async(sessions.host_connected)(team_id=self.team.pk, channel=self.channel_name)

    async def disconnect(self, code):
        if self.team is None:
            return
        await self.channel_layer.group_discard(self.group, self.channel_name)
        await database_sync_to_async(sessions.host_disconnected)(channel=self.channel_name)

    async def receive_json(self, content, **kwargs):
        try:
            frame = wire.HostFrame.validate_python(content)
        except ValidationError as exc:
            await self.send_json(_error(ErrorCode.VALIDATION_ERROR, _validation_message(exc)))
            return
        if isinstance(frame, wire.StartFailed):
            await database_sync_to_async(sessions.host_start_failed)(
                team_id=self.team.pk, member_name=frame.member, error=frame.error
            )

    async def host_reset(self, event):
        await self.close(code=CLOSE_RECONNECT)  # as session_reset: this host's presence was dropped

    async def host_start(self, event):
        await self.send_json(
            {"type": "start", "member": event["member"], "token": event["token"], "reason": event["reason"]}
        )
