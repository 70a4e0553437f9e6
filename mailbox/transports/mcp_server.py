"""The ten Team tools over MCP streamable HTTP, at ``/mcp`` (the official ``mcp`` package).

The same registry as REST (mailbox.transports.tools.TOOLS): the same names, descriptions
and JSON Schemas from the pydantic models, and every call goes through
``tool_call``, so results and error codes are REST's. A refused call is an MCP
tool error (``isError``) without structured content: a text block
``CODE: message``, then the REST error body ``{"error": {"code", "message"}}``
(plus ``persisted: false`` for a refused send) as JSON text.

Authentication: ``Authorization: Bearer <member token>`` on every request, as
on REST; the member is the sender of everything the call does. The edge
(mailbox/transports/edge.py) checked the Host, the body's size, the token and its rate, and
left the token's member in the scope; without one the endpoint answers 401
before MCP sees the request.

Resources: ``steerboard://policy`` (the team policy, also the server's
instructions) and the inbox cursor ``steerboard://inbox{?after_seq,limit}``.
Reading the inbox is how an MCP session takes its mail into its context: each
undelivered message it returns is recorded in the member's history (a
``user_message`` entry with the team-message source, folded like any entry)
and marked delivered.

The session manager runs stateless (no MCP session survives a request), so
any daphne process behind a load balancer can answer any request; responses
are SSE streams, so a long ``wait_agent`` is kept alive by pings. Daphne runs
no ASGI lifespan, so the manager's task group is started lazily, once per
event loop, by the first request.
"""
import asyncio
import json
from urllib.parse import parse_qs, urlsplit

from asgiref.sync import ThreadSensitiveContext
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from mailbox.members import inbox
from mailbox.transports import edge, policy, tools
from mailbox.plumbing import wire
from mailbox.transports.tools import TOOLS, tool_call
from teams.errors import ErrorCode, TeamError

MEMBER_KEY = edge.MEMBER_KEY
INBOX_URI = "steerboard://inbox"
POLICY_URI = "steerboard://policy"


def _member(ctx):
    request = ctx.request
    member = request.scope.get(MEMBER_KEY) if request is not None else None
    if member is None:  # McpApp lets no request through without one
        raise edge.unauthenticated()
    return member


def tool_schemas() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.args.model_json_schema(),
            output_schema=tool.result.model_json_schema(),
        )
        for tool in TOOLS.values()
    ]


def _text(body: dict) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=json.dumps(body))]


async def _list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=tool_schemas())


async def _call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    try:
        member = _member(ctx)
        arguments = params.arguments if params.arguments is not None else {}
        try:
            wire.value_check(arguments, "arguments")  # REST's refusals: nesting, NUL, lone surrogates, big ints
        except TeamError as exc:
            raise tools.refused(params.name, exc)
        headers = ctx.request.scope.get("headers") if ctx.request is not None else None
        result = await tool_call(
            member=member, name=params.name, arguments=arguments, transport="mcp", headers=headers
        )
    except TeamError as exc:
        return refusal(exc.as_wire())
    return types.CallToolResult(content=_text(result), structured_content=result)


def refusal(body: dict) -> types.CallToolResult:
    """A refused call as the MCP tool error the specification shows: ``isError`` and text content, no
    ``structuredContent``, since what a tool declares in its ``outputSchema`` is its result, which a
    refusal is not (a client that validates structured content against the schema, as the TypeScript
    SDK does, would throw instead of showing the refusal). The first text block reads
    ``CODE: message`` for the model and the person; the second is REST's error body as JSON, for code
    (``persisted``, ``retry_after`` and the like included)."""
    error = body["error"]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{error['code']}: {error['message']}"), *_text(body)],
        is_error=True,
    )


async def _list_resources(ctx, params) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[
            types.Resource(
                name="inbox",
                uri=INBOX_URI,
                mime_type="application/json",
                description="Your messages in seq order from the start (see the inbox template for the cursor). "
                "Reading marks the undelivered ones delivered.",
            ),
            types.Resource(
                name="policy", uri=POLICY_URI, mime_type="text/markdown", description="The team policy."
            ),
        ]
    )


async def _list_resource_templates(ctx, params) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(
        resource_templates=[
            types.ResourceTemplate(
                name="inbox-page",
                uri_template=INBOX_URI + "{?after_seq,limit}",
                mime_type="application/json",
                description="Your messages with seq > after_seq (limit 1-100, default 50), oldest first, with "
                "their states, next_cursor (more right now) and last_seq (poll from here next time). Reading it "
                "records each undelivered message in your history and marks it delivered; never resend mail "
                "you received this way.",
            )
        ]
    )


def _inbox_query(uri: str) -> tuple[int, int]:
    query = parse_qs(urlsplit(uri).query)
    try:
        after_seq = int(query.get("after_seq", ["0"])[0] or 0)
        limit = int(query.get("limit", ["50"])[0] or 50)
    except ValueError:
        raise MCPError(types.INVALID_PARAMS, "VALIDATION_ERROR: after_seq and limit are whole numbers.")
    if not 1 <= limit <= 100 or after_seq < 0:
        raise MCPError(types.INVALID_PARAMS, "VALIDATION_ERROR: limit is 1-100 and after_seq is not negative.")
    return after_seq, limit


async def _read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri == POLICY_URI:
        contents = types.TextResourceContents(uri=uri, mime_type="text/markdown", text=policy.policy_markdown())
        return types.ReadResourceResult(contents=[contents])
    if uri == INBOX_URI or uri.startswith(INBOX_URI + "?"):
        after_seq, limit = _inbox_query(uri)
        try:
            member = _member(ctx)
            page = await inbox.inbox_take(member=member, after_seq=after_seq, limit=limit)
        except TeamError as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc.code}: {exc.message}")
        contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=json.dumps(page))
        return types.ReadResourceResult(contents=[contents])
    raise MCPError(types.INVALID_PARAMS, f"NOT_FOUND: no resource {uri!r}; resources/list shows them.")


server = Server(
    "steerboard",
    title="Steerboard Agent Team",
    instructions=policy.policy_markdown(),
    on_list_tools=_list_tools,
    on_call_tool=_call_tool,
    on_list_resources=_list_resources,
    on_list_resource_templates=_list_resource_templates,
    on_read_resource=_read_resource,
)


class McpApp:
    """ASGI app for /mcp: POST only, with the member the edge found; then the MCP transport."""

    def __init__(self):
        self._loop = None
        self._manager: StreamableHTTPSessionManager | None = None
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task | None = None

    async def _started_manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._runner is None or self._runner.done():
            self._loop = loop
            # SSE responses: a long call (wait_agent waits up to an hour) gets keepalive pings.
            self._manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=False)
            self._ready = asyncio.Event()
            self._runner = loop.create_task(self._run(self._manager, self._ready))
        await self._ready.wait()
        if self._runner.done():
            raise RuntimeError("the MCP session manager stopped")
        return self._manager

    @staticmethod
    async def _run(manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        try:
            async with manager.run():
                ready.set()
                await asyncio.Event().wait()  # until the process ends
        finally:
            ready.set()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await edge.refuse(scope, receive, send, TeamError(ErrorCode.NOT_FOUND, "MCP is served over HTTP."))
        if scope.get("method") != "POST":
            # Stateless: no standalone SSE stream (GET) and no session to end (DELETE).
            refusal = TeamError(ErrorCode.METHOD_NOT_ALLOWED, "POST MCP messages to /mcp.")
            return await edge.refuse(scope, receive, send, refusal, [(b"allow", b"POST")])
        try:
            member = await edge.member_required(scope)  # the one the edge found
        except TeamError as exc:
            return await edge.refuse(scope, receive, send, exc, [edge.bearer_challenge(scope.get("headers", []))])
        manager = await self._started_manager()
        # Sync database work of this request runs in a thread of its own, as in Django's handler.
        async with ThreadSensitiveContext():
            await manager.handle_request({**scope, MEMBER_KEY: member}, receive, send)


mcp_app = McpApp()
