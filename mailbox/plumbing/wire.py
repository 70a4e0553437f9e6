"""Pydantic models of the websocket frames (docs/protocol.md). Every inbound frame is
validated here before a service sees it; the frames the server sends are modelled
too, and published as JSON Schema (``frame_schemas``).

``json_loads`` is the one JSON parser of everything a client sends (REST bodies,
websocket frames; ``value_check`` for what MCP parsed itself): it refuses, with
a ``VALIDATION_ERROR`` naming the field, what no field of the API accepts and
what would otherwise fail deep inside (RecursionError, pydantic's serialisation
depth, PostgreSQL's DataError, UTF-8 encoding): nesting deeper than
``MAX_JSON_DEPTH``, a NUL character, a lone UTF-16 surrogate, an integer outside
64 bits, NaN/Infinity. The common body pays two ``str.count`` and one ``in``.
"""
import json
import math
import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, model_validator

from teams.errors import ErrorCode, TeamError
from teams.wire_format import iso

# --- the one parser of client JSON ---------------------------------------------------------
MAX_JSON_DEPTH = 64  # arrays and objects inside each other; no field needs a tenth of it
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # every integer field is a 64-bit column or smaller
_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON string (unrolled, linear) or one bracket: what the depth scan steps over.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def validation_summary(exc: ValidationError) -> str:
    """A pydantic error in a line: the first five places and what is wrong there."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _refused(message: str) -> TeamError:
    return TeamError(ErrorCode.VALIDATION_ERROR, message)


def _int(text: str) -> int:
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise _refused(f"The number {text[:24]}{'…' if len(text) > 24 else ''} is outside the 64-bit integer range.")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _refused(f"The number {text[:24]} is not finite.")
    return value


def _constant(name: str):
    raise _refused(f"{name} is not a JSON value.")


_decoder = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)


def _depth_check(text: str) -> None:
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise _refused(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is refused.")
        elif token in "]}":
            depth -= 1


def value_check(value: Any, where: str = "") -> None:
    """Refuse a NUL, a lone surrogate or nesting past MAX_JSON_DEPTH anywhere in a
    parsed value (keys too), naming the field; iterative, so any depth is safe."""
    stack = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _string_check(item, path)
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise _refused(f"{path or 'body'}: JSON nested deeper than {MAX_JSON_DEPTH} levels is refused.")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str):
                    _string_check(key, name)
                stack.append((child, name, depth + 1))
        elif isinstance(item, int) and not isinstance(item, bool) and not INT_MIN <= item <= INT_MAX:
            raise _refused(f"{path or 'body'}: the number is outside the 64-bit integer range.")
        elif isinstance(item, float) and not math.isfinite(item):
            raise _refused(f"{path or 'body'}: the number is not finite.")


def _string_check(text: str, path: str) -> None:
    if "\x00" in text:
        raise _refused(f"{path or 'body'}: NUL characters (\\u0000) are refused.")
    if not text.isascii() and _SURROGATE.search(text):
        raise _refused(f"{path or 'body'}: a lone surrogate (\\ud800-\\udfff) is not Unicode text; refused.")


def json_loads(raw: bytes | str) -> Any:
    """Parse what a client sent. ValueError: not JSON (or not UTF-8); TeamError
    (VALIDATION_ERROR, naming the field): a value refused as above."""
    value, suspect = json_parse(raw)
    if suspect:
        value_check(value)
    return value


def json_parse(raw: bytes | str) -> tuple[Any, bool]:
    """``json_loads`` without the value check: the value, and whether it may hold a
    NUL or a lone surrogate (``value_check`` it before use)."""
    encoded = isinstance(raw, bytes | bytearray)
    text = raw.decode("utf-8") if encoded else raw  # strict UTF-8: no raw surrogate gets through
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        _depth_check(text)  # before the parser recurses
    try:
        value = _decoder.decode(text)
    except RecursionError:  # not reached after the scan; never let it escape
        raise _refused(f"JSON nested deeper than {MAX_JSON_DEPTH} levels is refused.")
    # Only an escape makes a NUL or a surrogate (or a raw code point, in a str that was never UTF-8).
    return value, "\\u" in text or (not encoded and not text.isascii() and _SURROGATE.search(text) is not None)


EntryId = Annotated[str, StringConstraints(min_length=1, max_length=128)]
# A team message's or a human prompt's id, as the history stores it (64 characters).
RecordId = Annotated[str, StringConstraints(max_length=64)]


# The source kind of an entry that carries a team message (its id folds the entry), and of
# one that carries a person's answer to the member's ask_human (a team message too, of kind
# human_answer: it also names the ask, the decision and who answered).
TEAM_MESSAGE_SOURCE = "team-message"
HUMAN_ANSWER_SOURCE = "human-answer"
MESSAGE_SOURCES = (TEAM_MESSAGE_SOURCE, HUMAN_ANSWER_SOURCE)


class Source(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: str
    message_id: RecordId | None = None
    prompt_id: RecordId | None = None


TokenCount = Annotated[int, Field(ge=0, le=10**12)]
# The entry kinds a model reply produces: the ones that may carry its usage.
USAGE_KINDS = ("assistant_text", "tool_call")


class Usage(BaseModel):
    """What one model reply used, reported on the first entry that reply produced
    (docs/protocol.md, "History entries"). ``input_tokens`` counts every input token,
    the cached ones (``cached_tokens``) included."""

    model_config = ConfigDict(extra="forbid")
    model: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0
    cached_tokens: TokenCount = 0

    @model_validator(mode="after")
    def _cached_within_input(self) -> "Usage":
        if self.cached_tokens > self.input_tokens:
            raise ValueError("cached_tokens are part of input_tokens: at most as many")
        return self


class Entry(BaseModel):
    """One session history entry. Known fields are checked; the rest is kept as reported."""

    model_config = ConfigDict(extra="allow")
    id: EntryId
    kind: Literal["user_message", "prompt", "assistant_text", "tool_call", "tool_result", "turn_start", "turn_end"]
    source: Source | None = None
    prompt_id: RecordId | None = None
    usage: Usage | None = None

    @model_validator(mode="after")
    def _team_message_has_id(self) -> "Entry":
        if self.source and self.source.kind in MESSAGE_SOURCES and not self.source.message_id:
            raise ValueError(f"a {self.source.kind} source needs its message_id")
        if self.usage is not None and self.kind not in USAGE_KINDS:
            raise ValueError(f"usage goes on the entry a model reply produced: {' or '.join(USAGE_KINDS)}")
        if self.kind == "prompt" and not self.prompt_id and self.source and self.source.prompt_id:
            self.prompt_id = self.source.prompt_id
        return self

    @property
    def delivers(self) -> str | None:
        """The team message this entry delivers: a ``user_message`` whose source is that
        message (docs/protocol.md). The one rule the writer and the websocket follow."""
        if self.kind == "user_message" and self.source is not None and self.source.kind in MESSAGE_SOURCES:
            return self.source.message_id
        return None

    def as_stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def stored_json(self) -> bytes:
        """``as_stored()`` as the JSON text the history stores (UTF-8, compact), in one step of
        pydantic's own serializer: half the CPU of dumping and then encoding. Its length is the
        entry's size in bytes for the history quota (mailbox/plumbing/quota.py)."""
        return self.__pydantic_serializer__.to_json(self, exclude_none=True)


class Hello(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["hello"]
    status: Literal["idle", "running"] = "idle"


class StatusFrame(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["status"]
    status: Literal["idle", "running"]


class EntryFrame(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["entry"]
    entry: Entry


class EntriesFrame(BaseModel):
    """Several history entries in one frame, each stored or refused as if it came alone in
    an ``entry`` frame (mailbox/members/sessions.py: ``ConnectedSession.entries``). Each is parsed on
    its own, so a malformed one is refused in its place and the others are stored."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["entries"]
    entries: Annotated[list[dict[str, Any]], Field(min_length=1)]
    # The session's status after these entries, as a ``status`` frame sent right after this
    # one would set it (FEATURE_ENTRIES_STATUS): one frame for a turn's last entries and its idle.
    status: Literal["idle", "running"] | None = None


# The optional parts of client frames this server takes, named in its ``welcome`` (``features``):
# a client uses one only when the welcome names it, so a new client keeps working with an older
# server (whose client frames are closed: an unknown field is refused).
FEATURE_TOOL_ENTRIES = "tool_entries"  # a tool frame's ``entries``
FEATURE_ENTRIES_STATUS = "entries_status"  # an entries frame's ``status``
FEATURES = [FEATURE_TOOL_ENTRIES, FEATURE_ENTRIES_STATUS]


class ToolFrame(BaseModel):
    """One of the ten Team tools, called over the session's own websocket (REST's
    ``POST /api/v1/tools/<name>`` without a request per call); answered by a
    ``tool_result`` frame with the same ``id``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["tool"]
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    arguments: dict[str, Any] = Field(default_factory=dict)
    # The caller's W3C trace context, as REST's and /mcp's headers carry it: the call's span
    # continues that trace when the server traces (mailbox/plumbing/tracing.py); one that does not
    # parse is ignored, as the W3C asks.
    traceparent: Annotated[str, StringConstraints(max_length=128)] | None = None
    tracestate: Annotated[str, StringConstraints(max_length=512)] | None = None
    # History entries the call comes after (docs/protocol.md, "Tool frames"): stored or refused
    # exactly as an ``entries`` frame sent just before this one, and the call runs only once they
    # and every entry before them on the socket are answered (FEATURE_TOOL_ENTRIES).
    entries: Annotated[list[dict[str, Any]], Field(min_length=1)] | None = None


AgentFrame = TypeAdapter(
    Annotated[Union[Hello, StatusFrame, EntryFrame, EntriesFrame, ToolFrame], Field(discriminator="type")]
)
_entry = TypeAdapter(Entry)


def entries_parsed(frame: "EntriesFrame | ToolFrame") -> list["Entry | TeamError"]:
    """An ``entries`` frame's entries, each parsed on its own: an entry, or the refusal of
    one that does not parse (with its ``entry_id`` when it has a usable one)."""
    parsed: list[Entry | TeamError] = []
    for raw in frame.entries:
        try:
            parsed.append(_entry.validate_python(raw))
        except ValidationError as exc:
            entry_id = raw.get("id")
            extra = {"entry_id": entry_id} if isinstance(entry_id, str) and 1 <= len(entry_id) <= 128 else {}
            first = exc.errors()[0]
            where = ".".join(str(part) for part in ("entry", *first.get("loc", ())))
            parsed.append(TeamError(ErrorCode.VALIDATION_ERROR, f"{where}: {first.get('msg', 'invalid')}", **extra))
    return parsed


class Started(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["started"]
    member: str


class StartFailed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["start_failed"]
    member: str
    error: Annotated[str, StringConstraints(max_length=4000)] = ""


HostFrame = TypeAdapter(Annotated[Union[Started, StartFailed], Field(discriminator="type")])


# --- what the server sends (docs/protocol.md) ----------------------------------------------
# These models describe the frames the consumers build; they are published as JSON
# Schema (``frame_schemas``, GET /api/v1/protocol/frames.json) and a test checks real
# frames against them. Server frames allow fields beyond those named here: the
# contract grows by adding, and a client ignores what it does not know.
ErrorCodeText = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]*$")]


class _ServerFrame(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    code: ErrorCodeText = Field(description="UPPER_SNAKE; docs/protocol.md lists the codes")
    message: str = Field(description="what happened and what to do")


class Welcome(_ServerFrame):
    type: Literal["welcome"]
    member: str
    team: str
    replay: int = Field(ge=0, description="how many steer frames follow at once: each undelivered message once")
    features: list[str] = Field(
        default_factory=list,
        description="the optional parts of the client frames this server takes (docs/protocol.md): "
                    "'tool_entries' (a tool frame's entries), 'entries_status' (an entries frame's status)",
    )


class SteerMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    sender: str
    target: str
    content: str
    seq: int = Field(ge=1, description="increases by one per target; a gap means a replay is coming")
    created_at: str = Field(description="ISO 8601 UTC")
    thread_id: str
    kind: Literal["message", "spawn_prompt", "human_answer"]
    ask_id: str | None = Field(None, description="human_answer only: the ask_human this answers")
    decision: str | None = Field(
        None, description="human_answer only: the option chosen, 'expired' when nobody answered in time, "
        "null for an answer in words only"
    )
    answer: str | None = Field(None, description="human_answer only: the answer in words, if any")
    answered_by: str | None = Field(None, description="human_answer only: the person (null when it expired)")
    traceparent: str | None = Field(
        None, description="the W3C trace context of the message's send, when the sending server traced it: "
        "a session that traces makes the turn it runs for the message that trace's child (docs/protocol.md)",
    )
    tracestate: str | None = Field(None, description="the W3C tracestate that goes with traceparent, if any")


def steer_message(
    *, id: str, sender: str, target: str, content: str, seq: int, created_at, thread_id: str, kind: str,
    trace: tuple[str | None, str | None] | None = None,
) -> dict:
    """A ``steer`` frame's message (SteerMessage's fields), built without validation:
    the one builder for the reference path (mailbox/engine/delivery.py) and the hot path.
    ``trace``: the message's (traceparent, tracestate), when its send was traced."""
    message = {
        "id": id,
        "sender": sender,
        "target": target,
        "content": content,
        "seq": seq,
        "created_at": iso(created_at),
        "thread_id": thread_id or id,
        "kind": kind,
    }
    if trace is not None and trace[0]:
        message["traceparent"] = trace[0]
        if trace[1]:
            message["tracestate"] = trace[1]
    return message


class Steer(_ServerFrame):
    type: Literal["steer"]
    message: SteerMessage


class HumanPrompt(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    author: str
    content: str


class PromptFrame(_ServerFrame):
    type: Literal["prompt"]
    prompt: HumanPrompt


class Interrupt(_ServerFrame):
    type: Literal["interrupt"]


class Acks(_ServerFrame):
    """The acknowledgements of consecutive stored entries of an ``entries`` frame, in order."""

    type: Literal["acks"]
    acks: list[dict[str, Any]] = Field(description='each as an ``ack`` frame without its type: {"entry_id", "folded", "cancelled"?}')


class Ack(_ServerFrame):
    type: Literal["ack"]
    entry_id: str
    folded: bool = Field(description="true: the history already held this entry (or its team message)")
    cancelled: bool | None = Field(
        None, description="true: the entry names a message an operator cancelled; nothing was recorded"
    )


class ErrorFrame(_ServerFrame):
    type: Literal["error"]
    error: ErrorBody


class ToolResult(_ServerFrame):
    """The answer to a ``tool`` frame: ``result`` (REST's 200 body) or ``error``
    (REST's error body, with its extra fields such as ``persisted``)."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"oneOf": [{"required": ["result"]}, {"required": ["error"]}]}
    )
    type: Literal["tool_result"]
    id: str
    result: dict[str, Any] | None = None
    error: ErrorBody | None = None
    acks: list[dict[str, Any]] | None = Field(
        None, description="the last acks of the entries the tool frame carried, as an ``acks`` frame's "
                          "(present when no other frame went to the session between their commit and this answer)",
    )

    @model_validator(mode="after")
    def _one_answer(self) -> "ToolResult":
        if (self.result is None) == (self.error is None):
            raise ValueError("a tool_result carries either result or error")
        return self


class Start(_ServerFrame):
    type: Literal["start"]
    member: str
    token: str
    reason: Literal["provision", "resume"]


class Ping(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["ping"]


class Subscribed(_ServerFrame):
    type: Literal["subscribed"]
    team: str | None = Field(description="null on the team list's socket")


class TeamChanged(_ServerFrame):
    type: Literal["team.changed"]
    kind: str = Field(description="what changed (message, entry, member, task, prompt, ...); re-read the snapshot")


class Pong(_ServerFrame):
    type: Literal["pong"]


def _union(*models):
    return TypeAdapter(Annotated[Union[models], Field(discriminator="type")])


# socket -> (path, frames the client sends, frames the server sends)
FRAMES = {
    "agent": ("/ws/agent/", (Hello, StatusFrame, EntryFrame, EntriesFrame, ToolFrame),
              (Welcome, Steer, PromptFrame, Interrupt, Ack, Acks, ToolResult, ErrorFrame)),
    "host": ("/ws/host/", (Started, StartFailed), (Start, ErrorFrame)),
    "dashboard": ("/ws/dashboard/<team>/ and /ws/dashboard/", (Ping,), (Subscribed, TeamChanged, Pong, ErrorFrame)),
}
SERVER_FRAME = {name: _union(*server) for name, (_, _, server) in FRAMES.items()}


def frame_schemas() -> dict:
    """One JSON Schema document (draft 2020-12) for every websocket frame, both ways.

    ``$defs`` holds each frame's model and, per socket and direction, a union named
    ``<Socket>ClientFrame`` / ``<Socket>ServerFrame`` (``oneOf`` tagged by ``type``);
    ``sockets`` maps each socket's path to those two. Generated from the models above."""
    from pydantic.json_schema import models_json_schema

    models = sorted({m for _, client, server in FRAMES.values() for m in (*client, *server)}, key=lambda m: m.__name__)
    _, top = models_json_schema([(m, "validation") for m in models], ref_template="#/$defs/{model}")
    defs = top["$defs"]
    sockets = {}
    for name, (path, client, server) in FRAMES.items():
        refs = {}
        for side, members in (("client", client), ("server", server)):
            union = f"{name.capitalize()}{side.capitalize()}Frame"
            defs[union] = {
                "oneOf": [{"$ref": f"#/$defs/{m.__name__}"} for m in members],
                "discriminator": {
                    "propertyName": "type",
                    "mapping": {m.model_fields["type"].annotation.__args__[0]: f"#/$defs/{m.__name__}" for m in members},
                },
            }
            refs[side] = {"$ref": f"#/$defs/{union}"}
        sockets[name] = {"path": path, **refs}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Steerboard websocket frames",
        "description": "Every frame of /ws/agent/, /ws/host/ and /ws/dashboard/, both ways (docs/protocol.md). "
        "Validate a frame against sockets.<socket>.<client|server>.",
        "sockets": sockets,
        "$defs": dict(sorted(defs.items())),
    }
