"""A model class from outside ``sdk/steerboard_agents/``, for ``python -m steerboard_agents run --model tests.agents.cli_model:Shout``."""
from steerboard_agents.model import ModelReply, StepContext, ToolCall


class Shout:
    def __init__(self, member: str):
        self.member = member

    async def step(self, context: StepContext) -> ModelReply:
        return ModelReply(text=f"{self.member} heard: {context.inputs()[-1]['text'].upper()}")


class NoStep:
    def __init__(self, member: str):
        self.member = member


class Roster:
    """Reads the roster (one Team tool call), then says how many are on it."""

    def __init__(self, member: str):
        self.member = member

    async def step(self, context: StepContext) -> ModelReply:
        if context.step == 0:
            return ModelReply(tool_calls=[ToolCall("list_agents", {})])
        return ModelReply(text=f"{self.member} read the roster")
