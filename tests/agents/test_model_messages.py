"""A member's history as each vendor's messages, and each vendor's answer as a ModelReply.

The histories are the SDK's own entries (sdk/steerboard_agents/turns.py writes them so); the messages are
checked against the vendors' ordering rules as the fake vendors check every request
(tests/support/fake_models.py), and the answers are built by the vendors' SDK types from
the JSON their APIs send.
"""
import json

import pytest

from steerboard_agents import anthropic_messages, openai_chat
from steerboard_agents.model import StepContext, Usage
from steerboard_agents.transcript import wire_id
from steerboard_agents.turns import LOCAL_TOOL_SPECS
from tests.support.fake_models import anthropic_problems, openai_problems

A, B, C = "a" * 32, "b" * 32, "c" * 32  # call ids as the session makes them


def message(entry_id, text, sender, turn="t1", step=0, seq=1):
    return {"id": f"msg-{entry_id}", "kind": "user_message", "turn_id": turn, "step": step, "text": text,
            "source": {"kind": "team-message", "message_id": entry_id, "sender": sender, "team": "red", "seq": seq}}


def call(call_id, tool, arguments, turn="t1", step=0, **extra):
    return {"id": f"call-{call_id}", "kind": "tool_call", "turn_id": turn, "step": step, "call_id": call_id,
            "tool": tool, "arguments": arguments, **extra}


def result(call_id, tool, value=None, error=None, turn="t1", step=0, **extra):
    entry = {"id": f"result-{call_id}", "kind": "tool_result", "turn_id": turn, "step": step, "call_id": call_id, "tool": tool}
    entry.update({"error": error} if error else {"result": value})
    return {**entry, **extra}


def said(text, turn="t1", step=0, **extra):
    return {"id": f"text-{turn}-{step}", "kind": "assistant_text", "turn_id": turn, "step": step, "text": text, **extra}


def edge(kind, turn, step=0, **fields):
    return {"id": f"{kind}-{turn}", "kind": kind, "turn_id": turn, "step": step, **fields}


# One turn of a Lead: a prompt; a reply with text and two calls; a teammate's message steered
# in during that step (it enters at step 1); the final answer. Then a second turn started by
# a steer, whose call was interrupted.
HISTORY = [
    edge("turn_start", "t1", cause="prompt"),
    {"id": "prompt-7", "kind": "prompt", "turn_id": "t1", "step": 0, "prompt_id": 7, "author": "ops", "text": "Build it."},
    said("Spawning a worker.", usage={"model": "m", "input_tokens": 10, "output_tokens": 5, "cached_tokens": 0}),
    call(A, "spawn_teammate", {"name": "worker", "description": "d", "prompt": ""}),
    result(A, "spawn_teammate", {"member": {"name": "worker"}}),
    call(B, "await_message", {"sender": "worker"}, local=True),
    result(B, "await_message", {"timed_out": False, "arrived": [{"sender": "worker", "message_id": "m-1"}]}),
    message("m-1", "Done with task-1.", "worker", step=1),
    said("The worker is done.", step=1),
    edge("turn_end", "t1", step=1, reason="done"),
    edge("turn_start", "t2", cause="steer"),
    message("m-2", "One more thing.", "worker", turn="t2", seq=2),
    call(C, "team_task_list", {}, turn="t2"),
    result(C, "team_task_list", error={"code": "INTERRUPTED", "message": "The turn was interrupted."}, turn="t2"),
    edge("turn_end", "t2", reason="interrupted"),
    edge("turn_start", "t3", cause="steer"),
    message("m-3", "Still there?", "worker", turn="t3", seq=3),
]


def context(entries, member="lead"):
    return StepContext(member=member, entries=entries, turn_id="t3", step=0, tools=["await_message"],
                       instructions="# Team policy\n- be brief", tool_specs=LOCAL_TOOL_SPECS, team="red")


SPAWNED = json.dumps({"member": {"name": "worker"}})
ARRIVED = json.dumps({"timed_out": False, "arrived": [{"sender": "worker", "message_id": "m-1"}]})
INTERRUPTED = json.dumps({"error": {"code": "INTERRUPTED", "message": "The turn was interrupted."}})


def test_openai_messages_pair_each_call_with_its_tool_message_and_put_a_steer_where_it_entered():
    messages = openai_chat.messages_for(context(HISTORY))
    assert messages[0]["role"] == "system"
    assert "You are lead, a member of the team red" in messages[0]["content"] and "- be brief" in messages[0]["content"]
    assert messages[1:] == [
        {"role": "user", "content": "[prompt from ops]\nBuild it."},
        {"role": "assistant", "content": "Spawning a worker.", "tool_calls": [
            {"id": A, "type": "function", "function": {"name": "spawn_teammate",
                                                       "arguments": json.dumps({"name": "worker", "description": "d", "prompt": ""})}},
            {"id": B, "type": "function", "function": {"name": "await_message", "arguments": json.dumps({"sender": "worker"})}},
        ]},
        {"role": "tool", "tool_call_id": A, "content": SPAWNED},
        {"role": "tool", "tool_call_id": B, "content": ARRIVED},
        # The teammate's message steered in during step 0: after that step's results, before the next answer.
        {"role": "user", "content": "[message m-1 from worker]\nDone with task-1."},
        {"role": "assistant", "content": "The worker is done."},
        {"role": "user", "content": "[message m-2 from worker]\nOne more thing."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": C, "type": "function", "function": {"name": "team_task_list", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": C, "content": INTERRUPTED},
        {"role": "user", "content": "[message m-3 from worker]\nStill there?"},
    ]
    assert openai_problems({"model": "m", "messages": messages}) == []


def test_anthropic_messages_alternate_strictly_with_the_tool_results_first_in_the_next_user_turn():
    messages = anthropic_messages.messages_for(context(HISTORY))
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "[prompt from ops]\nBuild it."}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Spawning a worker."},
            {"type": "tool_use", "id": A, "name": "spawn_teammate", "input": {"name": "worker", "description": "d", "prompt": ""}},
            {"type": "tool_use", "id": B, "name": "await_message", "input": {"sender": "worker"}},
        ]},
        # One user turn: the results first, then the message that entered at the step boundary.
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": A, "content": SPAWNED},
            {"type": "tool_result", "tool_use_id": B, "content": ARRIVED},
            {"type": "text", "text": "[message m-1 from worker]\nDone with task-1."},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "The worker is done."}]},
        {"role": "user", "content": [{"type": "text", "text": "[message m-2 from worker]\nOne more thing."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": C, "name": "team_task_list", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": C, "content": INTERRUPTED, "is_error": True},
            {"type": "text", "text": "[message m-3 from worker]\nStill there?"},
        ]},
    ]
    assert anthropic_problems({"model": "m", "max_tokens": 10, "messages": messages}) == []


def test_several_steers_at_one_boundary_are_one_user_turn_in_seq_order():
    entries = [
        edge("turn_start", "t1", cause="steer"),
        message("m-1", "first", "ann", seq=1),
        message("m-2", "second", "bob", seq=2),
    ]
    assert openai_chat.messages_for(context(entries))[1:] == [
        {"role": "user", "content": "[message m-1 from ann]\nfirst\n\n[message m-2 from bob]\nsecond"}]
    assert anthropic_messages.messages_for(context(entries)) == [{"role": "user", "content": [
        {"type": "text", "text": "[message m-1 from ann]\nfirst"}, {"type": "text", "text": "[message m-2 from bob]\nsecond"}]}]


def as_served(value):
    """An entry as the server hands it back: JSON, without the fields that were null (mailbox/plumbing/wire.py)."""
    if isinstance(value, dict):
        return {k: as_served(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_served(v) for v in value]
    return value


# The same turn as a session that died while its await_message ran, read back from the server's
# history by the session that resumed it: the resumed session ran the call again, so its result
# is the first entry it added ("resumed": true) after the restart, and the message the old
# session never let in was replayed to the new one, entering at the same boundary.
RESUMED = as_served(json.loads(json.dumps([
    *HISTORY[:6],
    result(B, "await_message", {"timed_out": False, "arrived": [{"sender": "worker", "message_id": "m-1"}]}, resumed=True),
    *HISTORY[7:],
])))


@pytest.mark.parametrize("adapter", [openai_chat, anthropic_messages])
def test_a_resumed_history_reads_as_the_same_history_written_in_one_go(adapter):
    assert adapter.messages_for(context(RESUMED)) == adapter.messages_for(context(HISTORY))


@pytest.mark.parametrize("adapter, problems", [(openai_chat, openai_problems), (anthropic_messages, anthropic_problems)])
def test_a_call_whose_result_never_came_is_answered_so_the_vendor_takes_the_history(adapter, problems):
    # A session died after reporting the call and no later session ran it again (the history
    # was read by hand, say): both vendors refuse a call left without an answer.
    entries = [edge("turn_start", "t1", cause="steer"), message("m-1", "go", "ann"),
               call(A, "list_agents", {}), message("m-2", "again", "ann", step=1)]
    messages = adapter.messages_for(context(entries))
    assert problems({"model": "m", "max_tokens": 10, "messages": messages}) == []
    text = json.dumps(messages)
    assert "NO_RESULT" in text and text.index("NO_RESULT") < text.index("again")


@pytest.mark.parametrize("adapter, problems", [(openai_chat, openai_problems), (anthropic_messages, anthropic_problems)])
def test_another_sdks_history_without_turn_ids_and_with_other_call_ids_pairs_up(adapter, problems):
    odd = "call:7/left"  # an id neither vendor takes as it is
    entries = [
        {"id": "1", "kind": "user_message", "text": "go", "source": {"kind": "team-message", "message_id": "m-1", "sender": "ann"}},
        {"id": "2", "kind": "tool_call", "call_id": odd, "tool": "list_agents", "arguments": {}},
        {"id": "3", "kind": "tool_result", "call_id": odd, "tool": "list_agents", "result": {"agents": []}},
        {"id": "4", "kind": "assistant_text", "text": "nobody"},
    ]
    messages = adapter.messages_for(context(entries))
    assert problems({"model": "m", "max_tokens": 10, "messages": messages}) == []
    safe = wire_id(odd)
    assert safe != odd and safe == wire_id(odd)
    assert json.dumps(messages).count(safe) == 2, "the call and its result carry the same id"


def test_a_history_that_starts_or_ends_with_an_answer_still_starts_and_ends_with_a_user_turn_for_anthropic():
    entries = [said("I was here first.", turn=None)]
    messages = anthropic_messages.messages_for(context(entries))
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert anthropic_problems({"model": "m", "max_tokens": 10, "messages": messages}) == []


def test_the_offered_tools_are_the_steps_tool_specs_in_each_vendors_shape():
    spec = {"name": "list_agents", "description": "List them.",
            "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}}
    assert openai_chat.tools_for([spec]) == [{"type": "function", "function": {
        "name": "list_agents", "description": "List them.", "parameters": spec["input_schema"]}}]
    assert anthropic_messages.tools_for([spec]) == [spec]


# --- answers -----------------------------------------------------------------------------------
def test_an_openai_answer_becomes_text_calls_and_usage():
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1748496646, "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None, "message": {
            "role": "assistant", "content": "Looking.", "refusal": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "team_task_get", "arguments": "{\"task_id\":\"task-1\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "list_agents", "arguments": "{not json"}},
            ]}}],
        "usage": {"prompt_tokens": 91, "completion_tokens": 14, "total_tokens": 105,
                  "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0}},
    })
    reply = openai_chat.reply_from(completion, "gpt-4o")
    assert reply.text == "Looking."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("team_task_get", {"task_id": "task-1"}),
        ("list_agents", {"arguments_not_json": "{not json"}),  # the tool refuses it, and the model reads why
    ]
    assert reply.usage == Usage(model="gpt-4o-2024-08-06", input_tokens=91, output_tokens=14, cached_tokens=64)


def test_deepseeks_cache_hits_count_as_cached_tokens():
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_validate({
        "id": "1", "object": "chat.completion", "created": 1, "model": "deepseek-chat",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103,
                  "prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20},
    })
    assert openai_chat.reply_from(completion, "deepseek-chat").usage == Usage("deepseek-chat", 100, 3, 80)


def test_an_anthropic_answer_becomes_text_calls_and_usage_with_every_input_token_counted():
    from anthropic.types import Message

    answer = Message.model_validate({
        "id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant", "model": "claude-3-opus-20240229",
        "stop_reason": "tool_use", "stop_sequence": None,
        "content": [{"type": "text", "text": "Checking the board."},
                    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "team_task_list", "input": {"status": "pending"}}],
        "usage": {"input_tokens": 20, "output_tokens": 30, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200},
    })
    reply = anthropic_messages.reply_from(answer, "claude")
    assert reply.text == "Checking the board."
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("team_task_list", {"status": "pending"})]
    assert reply.usage == Usage(model="claude-3-opus-20240229", input_tokens=1220, output_tokens=30, cached_tokens=1000)


def test_usage_on_an_entry_stays_within_what_the_protocol_allows_whatever_a_server_reported():
    # A compatible server that counts oddly must not get the entry refused (and the turn held up).
    assert Usage(model="", input_tokens=10, output_tokens=-3, cached_tokens=25).as_entry() == {
        "model": "unknown", "input_tokens": 10, "output_tokens": 0, "cached_tokens": 10}
    assert len(Usage(model="m" * 300).as_entry()["model"]) == 200
