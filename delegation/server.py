"""``/a2a``: every team member as an A2A agent, on the ``a2a-sdk``'s Starlette routes.

- ``GET /a2a/<team>/<member>/.well-known/agent-card.json``: the member's Agent Card;
  ``GET /a2a/<team>/.well-known/agent-card.json``: the team's, whose endpoints are
  the Lead's. Cards are public (docs/a2a.md, "Who may call").
- ``POST /a2a/<team>/<member>/``: the JSON-RPC binding (SendMessage,
  SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask);
  ``/a2a/<team>/<member>/rest/...``: the HTTP+JSON binding of the same methods.

Every request but a card's carries ``Authorization: Bearer <operator token or A2A
credential>``. The edge (mailbox/transports/edge.py) checked the Host, the body's declared
size and the token's request rate (mailbox/plumbing/quota.py, the bucket the token has
everywhere). ``A2AApp`` is the rest of the gate in front of the SDK: the member
of the path and the caller (delegation/credentials.py); and the hostile-input
parser (mailbox/plumbing/wire.py) on the path, the query and the body, before the SDK
parses anything. A request's W3C ``traceparent`` is the parent of what it does
when the server traces (mailbox/plumbing/tracing.py: an A2A send's span). Refusals
before the A2A layer (401, 403, 404, 429, 503) are Steerboard's JSON error; a
value the parser refuses is the binding's own invalid-params error naming the
field (JSON-RPC ``-32602``, the HTTP+JSON binding's 400), as the handler
answers a ``VALIDATION_ERROR``. A method that finds the database out of reach,
or a member's prompt queue full, is answered 503 or 429 the same way, in place
of the SDK's answer (``HttpAnswer``).
"""
import logging
from mailbox.plumbing import log_context, outage, tracing
from mailbox.transports import edge
from mailbox.plumbing import wire
from mailbox.plumbing.auth import bearer_from_headers
from mailbox.transports.edge import body_read, respond_json
from urllib.parse import unquote

from a2a.auth.user import User
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import InvalidParamsError
from django.conf import settings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from delegation import db as a2a_db
from delegation import selectors
from delegation.credentials import Caller, caller_for_team
from delegation.handler import ANSWER_STATE, RATE_STATE, HttpAnswer, MemberRequestHandler
from teams.errors import ErrorCode, TeamError
from teams.models import Member

PREFIX = "/a2a"
CARD_PATH = ".well-known/agent-card.json"
MEMBER_KEY = "steerboard.a2a_member"
CALLER_KEY = "steerboard.a2a_caller"
ANSWER_KEY = "steerboard.a2a_answer"
RATE_KEY = edge.RATE_KEY  # the token's request bucket, which the edge charged one


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
        context.state[ANSWER_STATE] = request.scope[ANSWER_KEY]
        context.state[RATE_STATE] = request.scope.get(RATE_KEY)
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


# The SDK logs a traceback with the -32600/-32602 it answers for an envelope or params it
# cannot parse: the client's error, not the server's. The line stays.
_CLIENT_ERRORS = ("Failed to validate base JSON-RPC request", "Failed to parse request params")


def _client_error(record: logging.LogRecord) -> bool:
    return record.msg in _CLIENT_ERRORS


def _quiet_client_errors() -> None:
    log_context.traceback_left_out("a2a.server.routes.jsonrpc_dispatcher", _client_error)


def build_app() -> Starlette:
    _quiet_client_errors()
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
        ],
        exception_handlers={404: _no_route, 405: _no_route},
    )


async def _no_route(request: Request, exc) -> JSONResponse:
    """A path or method no binding serves: the JSON error shape, as everywhere else."""
    if exc.status_code == 405:
        refusal = TeamError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not served at this path.")
    else:
        refusal = TeamError(ErrorCode.NOT_FOUND, "No such path: see docs/a2a.md for the endpoints.")
    return JSONResponse(refusal.as_wire(), status_code=refusal.http_status, headers=getattr(exc, "headers", None))


def _authenticated(*, headers, team_name: str, member_name: str) -> tuple[Member, Caller]:
    member = selectors.member_of_path(team_name=team_name, member_name=member_name)
    return member, caller_for_team(token=bearer_from_headers(headers), team=member.team)


def _refused_params(message: str) -> InvalidParamsError:
    return InvalidParamsError(message=message, data={"code": str(ErrorCode.VALIDATION_ERROR)})


def _rpc_id(body) -> str | int | None:
    """The JSON-RPC request's id, when the body has a usable one (to answer it by)."""
    found = body.get("id") if isinstance(body, dict) else None
    if isinstance(found, bool) or not isinstance(found, str | int):
        return None
    if isinstance(found, str) and ("\x00" in found or len(found) > 128):
        return None
    return found if isinstance(found, str) or wire.INT_MIN <= found <= wire.INT_MAX else None


def _body_refusal(raw: bytes) -> tuple[TeamError | ValueError, object] | None:
    """What the hostile-input parser refuses in a body, with the JSON-RPC id it had; None when it passes."""
    try:
        value, suspect = wire.json_parse(raw)
    except (TeamError, ValueError) as exc:
        return exc, None
    try:
        if suspect:
            wire.value_check(value)
    except TeamError as exc:
        return exc, _rpc_id(value)
    return None


def _path_refusal(scope) -> str | None:
    """A NUL or lone surrogate in the path or the query string (ids travel in both)."""
    for where, text in (("path", scope.get("path", "")),
                        ("query", unquote(scope.get("query_string", b"").decode("latin-1")))):
        try:
            wire.value_check(text, where)
        except TeamError as exc:
            return exc.message
    return None


async def _refuse(send, binding: str, error: InvalidParamsError | JSONParseError, rpc_id=None) -> None:
    """The binding's own answer to a request the parser refused (as the SDK answers one);
    before a binding is known (the path), Steerboard's error."""
    if binding == "jsonrpc":
        await respond_json(send, 200, build_error_response(rpc_id, error))
    elif binding == "rest":
        payload = build_rest_error_payload(error)
        await respond_json(send, payload["error"]["code"], payload)
    else:
        refusal = TeamError(ErrorCode.VALIDATION_ERROR, error.message)
        await respond_json(send, refusal.http_status, refusal.as_wire())


def _replay(body: bytes, receive):
    """An ASGI ``receive`` that hands the SDK the body the gate already read, then the
    connection's own messages (a stream listens for the client's disconnect)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _answering(send, answer: HttpAnswer):
    """``send``, but a method that set ``answer`` (a 503, a 429) is answered with it
    instead of the SDK's response, when that has not started yet."""
    started = False

    async def guarded(message):
        nonlocal started
        if message["type"] == "http.response.start" and answer.status and not started:
            answer.sent = True
            await respond_json(send, answer.status, answer.body, answer.headers)
        if answer.sent:
            return
        started = started or message["type"] == "http.response.start"
        await send(message)

    return guarded


class A2AApp:
    """ASGI app for ``/a2a``: the gate (module docstring), then the SDK's routes."""

    def __init__(self):
        self._app = None

    async def __call__(self, scope, receive, send):
        if self._app is None:
            self._app = build_app()
        parts = scope.get("path", "").split("/")  # ['', 'a2a', team, member, ...]
        if len(parts) < 4 or not parts[2] or not parts[3]:
            await edge.refuse(scope, receive, send, TeamError(ErrorCode.NOT_FOUND, "Use /a2a/<team>/<member>/."))
            return
        team_name, member_name = parts[2], parts[3]
        team_card = member_name == ".well-known"
        card = team_card or "/".join(parts[4:]) == CARD_PATH
        binding = "card" if card else "rest" if len(parts) > 4 and parts[4] == "rest" else "jsonrpc"
        refused = _path_refusal(scope)
        if refused:
            await _refuse(send, "rest" if binding == "rest" else "gate", _refused_params(refused))
            return
        try:
            if team_card:
                scope[MEMBER_KEY] = await a2a_db.run(selectors.lead_of_team, team_name=team_name)
                scope["steerboard.a2a_team_card"] = True
            elif card:
                scope[MEMBER_KEY] = await a2a_db.run(selectors.member_of_path, team_name=team_name, member_name=member_name)
            else:
                scope[MEMBER_KEY], scope[CALLER_KEY] = await a2a_db.run(
                    _authenticated, headers=scope.get("headers", ()), team_name=team_name, member_name=member_name
                )
        except TeamError as exc:
            extra = [(b"www-authenticate", b'Bearer realm="steerboard"')] if exc.http_status == 401 else []
            await edge.refuse(scope, receive, send, exc, extra)
            return
        except Exception as exc:
            what = outage.noted(exc, "an A2A request")
            if what is None:
                raise
            await respond_json(send, 503, outage.unavailable_body(what, persisted=None), edge.unavailable_headers())
            return
        if scope.get("method") == "POST":
            receive = await _body_checked(receive, send, binding)
            if receive is None:
                return
        answer = scope[ANSWER_KEY] = HttpAnswer()
        if not tracing.enabled:
            await self._app(scope, receive, _answering(send, answer))
            return
        with tracing.request_context(scope.get("headers")):  # the caller's traceparent: its send's parent
            await self._app(scope, receive, _answering(send, answer))


async def _body_checked(receive, send, binding: str):
    """Read the body and put it through the parser: a ``receive`` that replays it to the
    SDK, or None once the request is answered (too large, refused, or gone)."""
    try:
        body = await body_read(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    except ConnectionResetError:
        return None
    if body is None:
        refusal = edge.too_large()
        await respond_json(send, refusal.http_status, refusal.as_wire())
        return None
    found = _body_refusal(body) if body else None
    if found is None:
        return _replay(body, receive)
    exc, rpc_id = found
    if isinstance(exc, TeamError):
        error = _refused_params(exc.message)
    elif binding == "jsonrpc":
        error = JSONParseError(
            message=f"The body is not JSON: {exc}"[:300], data={"code": str(ErrorCode.VALIDATION_ERROR)}
        )
    else:
        error = _refused_params(f"body: not JSON ({exc})"[:300])
    await _refuse(send, binding, error, rpc_id)
    return None



a2a_app = A2AApp()
