"""A model class from outside ``sdk/steerboard_agents/``, for ``python -m steerboard_agents run --model tests.agents.cli_model:Shout``."""
from steerboard_agents.model import ModelReply, StepContext


class Shout:
    def __init__(self, member: str):
        self.member = member

    async def step(self, context: StepContext) -> ModelReply:
        return ModelReply(text=f"{self.member} heard: {context.inputs()[-1]['text'].upper()}")


class NoStep:
    def __init__(self, member: str):
        self.member = member
