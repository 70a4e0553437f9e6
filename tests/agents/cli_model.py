"""A model class from outside ``agents/``, for ``python -m agents run --model tests.agents.cli_model:Shout``."""
from agents.model import ModelReply, StepContext


class Shout:
    def __init__(self, member: str):
        self.member = member

    async def step(self, context: StepContext) -> ModelReply:
        return ModelReply(text=f"{self.member} heard: {context.inputs()[-1]['text'].upper()}")


class NoStep:
    def __init__(self, member: str):
        self.member = member
