"""The dashboard websocket: /ws/dashboard/<team>/ (one team) and /ws/dashboard/ (the team list).

It forwards the domain's ``team.changed`` doorbells to the browser and nothing
else; the page re-reads what it shows from the database (the snapshot view),
so a lost doorbell or a dropped socket never leaves it stale. Only signed-in
people get in (session cookie via AuthMiddlewareStack; the route is wrapped in
AllowedHostsOriginValidator, see frontend/routing.py).
"""
from mailbox import events
from mailbox.consumers import LeanConsumer
from mailbox.db import database_sync_to_async
from teams.models import Team

TEAM_LIST_WINDOW = 100
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


def _team_ids(name: str | None) -> list[int]:
    if name is not None:
        return list(Team.objects.filter(name=name).values_list("pk", flat=True))
    return list(Team.objects.order_by("name").values_list("pk", flat=True)[:TEAM_LIST_WINDOW])


class DashboardConsumer(LeanConsumer):
    groups_joined: list[str] = []

    async def connect(self):
        self.groups_joined = []
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        team_name = self.scope["url_route"]["kwargs"].get("team")
        team_ids = await database_sync_to_async(_team_ids)(team_name)
        if team_name is not None and not team_ids:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        for team_id in team_ids:
            group = events.dashboard_group(team_id)
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()
        # The page re-reads on this frame: anything before the subscription is in that read.
        await self.send_json({"type": "subscribed", "team": team_name})

    async def disconnect(self, code):
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        if content.get("type") == "ping":
            await self.send_json({"type": "pong"})

    async def team_changed(self, event):
        await self.send_json({k: v for k, v in event.items() if k != "type"} | {"type": "team.changed"})
