"""``/a2a``: every team member as an A2A agent, on the ``a2a-sdk``'s Starlette routes.

- ``GET /a2a/<team>/<member>/.well-known/agent-card.json``: the member's Agent Card;
  ``GET /a2a/<team>/.well-known/agent-card.json``: the team's, whose endpoints are
  the Lead's. Cards are public (docs/a2a.md, "Who may call").
- ``POST /a2a/<team>/<member>/``: the JSON-RPC binding (SendMessage,
  SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask);
  ``/a2a/<team>/<member>/rest/...``: the HTTP+JSON binding of the same methods.

Every request but a card's carries ``Authorization: Bearer <operator token or A2A
credential>``; this wrapper checks it (delegation/credentials.py) before the SDK
sees the request, and answers a refusal as Steerboard's JSON error.
"""
from mailbox.api.tool_calls import respond_json
from mailbox.auth import bearer_from_headers
from mailbox.db import to_db_thread
from mailbox.api.tool_calls import host_allowed

from a2a.auth.user import User
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from delegation.credentials import Caller, caller_for_team
from delegation.handler import MemberRequestHandler
from teams.errors import ErrorCode, TeamError
from teams.models import Member, Phase, Team

PREFIX = "/a2a"
CARD_PATH = ".well-known/agent-card.json"
MEMBER_KEY = "steerboard.a2a_member"
CALLER_KEY = "steerboard.a2a_caller"


class CallerUser(User):
    """The A2A SDK's view of the caller (``ServerCallContext.user``)."""

    def __init__(self, caller: Caller):
        self.caller = caller

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.caller.name


class ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's context, plus the member the path names and the caller the token names."""

    def build(self, request: Request):
        context = super().build(request)
        context.state["steerboard_member"] = request.scope[MEMBER_KEY]
        context.state["steerboard_caller"] = request.scope[CALLER_KEY]
        return context

    def build_user(self, request: Request):
        return CallerUser(request.scope[CALLER_KEY])


def member_url(base: str, member: Member, team_name: str) -> str:
    return f"{base}{PREFIX}/{team_name}/{member.name}"


def agent_card(member: Member, *, team_name: str, base: str, team_card: bool = False) -> pb.AgentCard:
    """A member's Agent Card (the team's is its Lead's, named for the team)."""
    url = member_url(base, member, team_name)
    role = "the Lead" if member.is_lead else "a teammate"
    description = member.description or f"{member.name}, {role} of the Steerboard team {team_name}."
    if team_card:
        description = f"The Steerboard team {team_name}: what you send goes to its Lead. {description}"
    card = pb.AgentCard(
        name=team_name if team_card else f"{team_name}/{member.name}",
        description=description,
        version="1.0.0",
        capabilities=pb.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        supported_interfaces=[
            pb.AgentInterface(url=f"{url}/", protocol_binding=TransportProtocol.JSONRPC.value,
                              protocol_version=PROTOCOL_VERSION_CURRENT),
            pb.AgentInterface(url=f"{url}/rest", protocol_binding=TransportProtocol.HTTP_JSON.value,
                              protocol_version=PROTOCOL_VERSION_CURRENT),
        ],
        skills=[
            pb.AgentSkill(
                id=member.name,
                name=f"{member.name} ({member.role})",
                description=description,
                tags=["steerboard", member.role],
                input_modes=["text/plain"],
                output_modes=["text/plain"],
            )
        ],
    )
    card.provider.organization = "Steerboard"
    card.provider.url = base
    card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
        pb.HTTPAuthSecurityScheme(
            scheme="bearer",
            description="An operator's API token or an A2A client credential for this team (docs/a2a.md).",
        )
    )
    requirement = card.security_requirements.add()
    requirement.schemes["bearer"].SetInParent()
    return card


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


async def _card(request: Request) -> JSONResponse:
    member = request.scope[MEMBER_KEY]
    card = agent_card(member, team_name=request.path_params["team"], base=_base(request),
                      team_card=request.scope.get("steerboard.a2a_team_card", False))
    return JSONResponse(agent_card_to_dict(card), headers={"Cache-Control": "no-cache"})


def build_app() -> Starlette:
    handler = MemberRequestHandler()
    builder = ContextBuilder()
    member_routes = [
        Route(f"/{CARD_PATH}", _card, methods=["GET"]),
        *create_jsonrpc_routes(handler, "/", context_builder=builder),
        Mount("/rest", routes=create_rest_routes(handler, context_builder=builder)),
    ]
    return Starlette(
        routes=[
            Route(PREFIX + "/{team}/" + CARD_PATH, _card, methods=["GET"]),
            Mount(PREFIX + "/{team}/{member}", routes=member_routes),
        ]
    )


def _member_of_path(*, team_name: str, member_name: str) -> Member:
    team = Team.objects.filter(name=team_name).first()
    if team is None:
        raise TeamError(ErrorCode.NOT_FOUND, f"No team named {team_name!r}.")
    member = Member.objects.select_related("team").filter(team=team, name=member_name).first()
    if member is None or member.phase == Phase.RETIRED:
        raise TeamError(ErrorCode.NOT_FOUND, f"No member named {member_name!r} on team {team_name!r}.")
    return member


def _authenticated(*, headers, team_name: str, member_name: str) -> tuple[Member, Caller]:
    member = _member_of_path(team_name=team_name, member_name=member_name)
    return member, caller_for_team(token=bearer_from_headers(headers), team=member.team)


class A2AApp:
    """ASGI app for ``/a2a``: the host check, the member of the path and the caller's
    token, then the SDK's routes."""

    def __init__(self):
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            self._app = build_app()
        if not host_allowed(scope):
            await respond_json(send, 400, {"error": {"code": "VALIDATION_ERROR", "message": "Invalid Host header."}})
            return
        parts = scope.get("path", "").split("/")  # ['', 'a2a', team, member, ...]
        if len(parts) < 4 or not parts[2] or not parts[3]:
            await respond_json(send, 404, {"error": {"code": "NOT_FOUND", "message": "Use /a2a/<team>/<member>/."}})
            return
        team_name, member_name = parts[2], parts[3]
        team_card = member_name == ".well-known"
        card = team_card or "/".join(parts[4:]) == CARD_PATH
        try:
            if team_card:
                team = await to_db_thread(Team.objects.filter(name=team_name).first)()
                lead = await to_db_thread(Member.objects.filter(team=team, role="lead").first)() if team else None
                if lead is None:
                    raise TeamError(ErrorCode.NOT_FOUND, f"No team named {team_name!r}.")
                scope[MEMBER_KEY], scope["steerboard.a2a_team_card"] = lead, True
            elif card:
                scope[MEMBER_KEY] = await to_db_thread(_member_of_path)(
                    team_name=team_name, member_name=member_name
                )
            else:
                scope[MEMBER_KEY], scope[CALLER_KEY] = await to_db_thread(_authenticated)(
                    headers=scope.get("headers", ()), team_name=team_name, member_name=member_name
                )
        except TeamError as exc:
            extra = [(b"www-authenticate", b'Bearer realm="steerboard"')] if exc.http_status == 401 else []
            await respond_json(send, exc.http_status, exc.as_wire(), extra)
            return
        await self._app(scope, receive, send)


a2a_app = A2AApp()
