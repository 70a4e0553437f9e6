"""Pydantic models of the websocket frames (protocol.md). Every inbound frame is
validated here before a service sees it."""
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, model_validator

EntryId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class Source(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: str
    message_id: str | None = None
    prompt_id: str | None = None


class Entry(BaseModel):
    """One session history entry. Known fields are checked; the rest is kept as reported."""

    model_config = ConfigDict(extra="allow")
    id: EntryId
    kind: Literal["user_message", "prompt", "assistant_text", "tool_call", "tool_result", "turn_start", "turn_end"]
    source: Source | None = None
    prompt_id: str | None = None

    @model_validator(mode="after")
    def _team_message_has_id(self) -> "Entry":
        if self.source and self.source.kind == "team-message" and not self.source.message_id:
            raise ValueError("a team-message source needs its message_id")
        if self.kind == "prompt" and not self.prompt_id and self.source and self.source.prompt_id:
            self.prompt_id = self.source.prompt_id
        return self

    def as_stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


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


class ToolFrame(BaseModel):
    """One of the nine Team tools, called over the session's own websocket (REST's
    ``POST /api/v1/tools/<name>`` without a request per call); answered by a
    ``tool_result`` frame with the same ``id``."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["tool"]
    id: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    name: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    arguments: dict[str, Any] = Field(default_factory=dict)


AgentFrame = TypeAdapter(Annotated[Union[Hello, StatusFrame, EntryFrame, ToolFrame], Field(discriminator="type")])


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
