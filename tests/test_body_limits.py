"""config/asgi.py refuses on the headers, before reading a body (issue 12, item 17):
a Content-Length over the upload limit answers 413, a body for the agents' API or
/mcp without a valid member token answers 401; the application never reads it."""
import json

import pytest
from django.conf import settings

from config.asgi import application
from tests.support.inproc import team_new

pytestmark = pytest.mark.django_db(transaction=True)


async def _call(path: str, *, length: int | str, token: str | None = None, method: str = "POST") -> tuple[int, dict, int]:
    """One request whose body is never sent: answers (status, body, how often receive was called)."""
    headers = [(b"host", b"testserver"), (b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 5000), "server": ("testserver", 80),
    }
    reads, sent = [], []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    status = sent[0]["status"]
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]) or b"{}")
    return status, body, len(reads)


@pytest.mark.parametrize("path", ["/api/v1/tools/send_message", "/api/v1/session/entries", "/api/v1/teams/t/prompts", "/mcp"])
async def test_a_body_over_the_limit_is_refused_on_its_content_length(path):
    team = await team_new()
    status, body, reads = await _call(path, length=200 * 1024 * 1024, token=team["lead"])
    assert (status, body["error"]["code"], reads) == (413, "TEAM_MESSAGE_TOO_LARGE", 0)
    if path == "/api/v1/tools/send_message":
        assert body["persisted"] is False  # as the tool itself answers it
    else:
        assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in body["error"]["message"]


@pytest.mark.parametrize("path", ["/api/v1/tools/send_message", "/api/v1/session/entries", "/api/v1/inbox", "/mcp"])
async def test_an_unauthenticated_body_is_refused_before_it_is_read(path):
    for token in (None, "sbm_not-a-token"):
        status, body, reads = await _call(path, length=1024, token=token)
        assert (status, body["error"]["code"], reads) == (401, "UNAUTHENTICATED", 0), (path, token)


async def test_a_malformed_content_length_is_a_400():
    status, body, reads = await _call("/api/v1/tools/list_agents", length="12abc")
    assert (status, body["error"]["code"], reads) == (400, "VALIDATION_ERROR", 0)


async def test_an_authenticated_body_within_the_limit_goes_through():
    team = await team_new()
    status, body, reads = await _call("/api/v1/tools/list_agents", length=2, token=team["lead"])
    assert status == 200 and reads == 1
    assert body["agents"][0]["name"] == "lead"
