"""The client side of Steerboard: agent sessions, models and the team host.

Imports no Django and nothing of the server apps; it speaks only the wire
contract (websockets + httpx + pydantic-free dataclasses + the stdlib).

An ``AgentSession`` (session.py) composes connection.py (the reconnecting
websocket), inbox.py (steered messages), outbox.py (entries until
acknowledged), turns.py (the turn runner) and resume.py (cold-resume from the
history); docs/agents.md, "How the session is built".
"""
from steerboard_agents.client import ServerClient, ToolError
from steerboard_agents.host import Host
from steerboard_agents.model import EchoModel, Model, ModelError, ModelReply, StepContext, ToolCall, Usage
from steerboard_agents.registry import model_factory
from steerboard_agents.session import AgentSession

__all__ = [
    "AgentSession",
    "EchoModel",
    "Host",
    "Model",
    "ModelError",
    "ModelReply",
    "ServerClient",
    "StepContext",
    "ToolCall",
    "ToolError",
    "Usage",
    "model_factory",
]
