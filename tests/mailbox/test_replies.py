"""send_message reply_to: a reply joins the thread of a message its sender received."""
import pytest
from channels.db import database_sync_to_async

from mailbox.models import TeamMessage
from tests.support.inproc import spawn, team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def messages(api, token: str) -> dict[str, dict]:
    listing = await api.http.get("/api/v1/teams/alpha/messages", headers={"Authorization": f"Bearer {token}"})
    assert listing.status_code == 200, listing.text
    return {m["id"]: m for m in listing.json()["messages"]}


async def test_a_reply_joins_the_thread_of_the_message_it_answers(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    question = await api.ok(team["lead"], "send_message", target="implementer", message="which tests fail?")
    assert question["thread_id"] == question["message_id"]  # a new thread starts at its first message

    answer = await api.ok(impl, "send_message", target="lead", message="two", reply_to=question["message_id"])
    assert answer["thread_id"] == question["message_id"]
    follow_up = await api.ok(team["lead"], "send_message", target="implementer", message="fix them",
                             reply_to=answer["message_id"])
    assert follow_up["thread_id"] == question["message_id"]

    listed = await messages(api, team["lead"])
    assert {listed[m]["thread_id"] for m in listed} == {question["message_id"]}
    assert listed[answer["message_id"]]["reply_to"] == question["message_id"]
    assert listed[follow_up["message_id"]]["reply_to"] == answer["message_id"]
    assert listed[question["message_id"]]["reply_to"] is None


async def test_a_reply_may_go_to_someone_else_in_the_thread(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "reviewer")
    asked = await api.ok(team["lead"], "send_message", target="implementer", message="done?")
    forwarded = await api.ok(impl, "send_message", target="reviewer", message="please check",
                             reply_to=asked["message_id"])
    assert forwarded["thread_id"] == asked["message_id"]


async def test_replying_to_a_message_the_sender_never_received_is_refused(api):
    team = await team_new()
    impl = await spawn(api, team["lead"], "alpha", "implementer")
    await spawn(api, team["lead"], "alpha", "reviewer")
    to_reviewer = await api.ok(team["lead"], "send_message", target="reviewer", message="review task-1")
    before = await database_sync_to_async(TeamMessage.objects.count)()

    # Someone else's mail, one's own sent mail, and an id that does not exist.
    for sender, reply_to in [
        (impl, to_reviewer["message_id"]),
        (team["lead"], to_reviewer["message_id"]),
        (impl, "team-message-00000000-0000-0000-0000-000000000000"),
    ]:
        refused = await api.tool(sender, "send_message", target="reviewer", message="re", reply_to=reply_to)
        assert refused.status_code == 404, refused.text
        assert refused.json()["error"]["code"] == "NOT_FOUND"
        assert refused.json()["persisted"] is False
    assert await database_sync_to_async(TeamMessage.objects.count)() == before


async def test_a_reply_to_a_message_of_another_team_is_refused(api):
    alpha = await team_new("alpha")
    beta = await team_new("beta")
    impl = await spawn(api, alpha["lead"], "alpha", "implementer")
    beta_impl = await spawn(api, beta["lead"], "beta", "implementer")
    theirs = await api.ok(beta["lead"], "send_message", target="implementer", message="beta work")
    refused = await api.tool(impl, "send_message", target="lead", message="re", reply_to=theirs["message_id"])
    assert refused.status_code == 404
    assert beta_impl  # the real recipient could reply
    ok = await api.ok(beta_impl, "send_message", target="lead", message="re", reply_to=theirs["message_id"])
    assert ok["thread_id"] == theirs["message_id"]
