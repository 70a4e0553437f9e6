"""A host's later start for a member it already runs carries a new token (the server
revoked the earlier one, teams/tokens.py): the running session takes it for its next
request and reconnect, and the state file keeps it (issue 12, item 11)."""
import asyncio
import json

from steerboard_agents import EchoModel, Host
from steerboard_agents.session import AgentSession


async def test_a_repeated_start_hands_its_new_token_to_the_running_session(tmp_path):
    state = tmp_path / "host.json"
    host = Host("http://127.0.0.1:9", "sbh_host", EchoModel, state_path=state)
    session = AgentSession(host.server, "sbm_first", model_factory=EchoModel)
    running = asyncio.get_running_loop().create_future()  # a session that has not ended
    host.sessions["worker"] = (session, running)
    try:
        answer = host.start({"type": "start", "member": "worker", "token": "sbm_second", "reason": "resume"})
        assert answer == {"type": "started", "member": "worker"}
        assert host.sessions["worker"] == (session, running), "still the one session"
        assert session.token == "sbm_second"
        assert session.client.token == "sbm_second"
        assert session.client._http.headers["Authorization"] == "Bearer sbm_second"
        assert json.loads(state.read_text())["members"] == {"worker": "sbm_second"}
    finally:
        running.cancel()
        await session.client.aclose()
