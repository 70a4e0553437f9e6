"""Choosing models: ``--model NAME`` for everyone, ``--model MEMBER=NAME`` for one member, the
vendors' prefixes before ``package.module:Class``, and the vendors' SDKs as optional extras."""
import pytest

from steerboard_agents.anthropic_messages import AnthropicMessagesModel
from steerboard_agents.keyless import KeylessModel
from steerboard_agents.model import EchoModel
from steerboard_agents.openai_chat import OpenAIChatModel
from steerboard_agents.registry import VendorOptions, model_factory, models_choose
from tests.support.fresh_import import fresh_import


@pytest.fixture
def keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return monkeypatch


def test_each_member_gets_its_own_model_and_everyone_else_the_default(keys):
    choice = models_choose(["lead=anthropic:claude-x", "*=openai:gpt-x", "researcher=echo"])
    lead, researcher, other = choice("lead"), choice("researcher"), choice("implementer")
    assert isinstance(lead, AnthropicMessagesModel) and (lead.member, lead.model) == ("lead", "claude-x")
    assert isinstance(researcher, EchoModel)
    assert isinstance(other, OpenAIChatModel) and (other.member, other.model) == ("implementer", "gpt-x")


def test_a_bare_name_is_everyones_and_without_one_the_rest_stay_keyless():
    assert isinstance(models_choose(["echo"])("anyone"), EchoModel)
    choice = models_choose(["lead=echo"])
    assert isinstance(choice("lead"), EchoModel) and isinstance(choice("worker"), KeylessModel)
    assert isinstance(models_choose(None)("lead"), KeylessModel)


def test_the_vendors_prefix_is_read_before_module_class_so_a_model_name_may_hold_colons(keys):
    model = model_factory("openai:llama3.1:8b")("lead")
    assert isinstance(model, OpenAIChatModel) and model.model == "llama3.1:8b"


def test_flags_win_over_the_sdks_variables_and_the_retries_reach_the_sdk(keys):
    keys.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    from_env = model_factory("openai:m")("lead")
    assert str(from_env.client.base_url).startswith("http://127.0.0.1:1/v1")
    options = VendorOptions(openai_base_url="http://127.0.0.1:2/v1", anthropic_base_url="http://127.0.0.1:3",
                            max_retries=7, max_tokens=123)
    chosen = model_factory("openai:m", options)("lead")
    assert str(chosen.client.base_url).startswith("http://127.0.0.1:2/v1")
    assert (chosen.client.max_retries, chosen.max_tokens) == (7, 123)
    claude = model_factory("anthropic:c", options)("lead")
    assert str(claude.client.base_url).startswith("http://127.0.0.1:3")
    assert (claude.client.max_retries, claude.max_tokens) == (7, 123)


@pytest.mark.parametrize(
    "values, says",
    [
        (["lead=echo", "lead=keyless"], "two models for 'lead'"),
        (["echo", "*=keyless"], "two models for everyone"),
        (["openai:"], "names no model: openai:MODEL"),
        (["lead="], "names no model for 'lead'"),
        (["gpt"], "unknown model 'gpt'; choose keyless, echo, openai:MODEL, anthropic:MODEL or package.module:Class"),
    ],
)
def test_what_cannot_be_chosen_is_a_clear_error(keys, values, says):
    with pytest.raises(ValueError) as refused:
        models_choose(values)
    assert says in str(refused.value)


@pytest.mark.parametrize("spec, variable", [("openai:m", "OPENAI_API_KEY"), ("anthropic:m", "ANTHROPIC_API_KEY")])
def test_a_vendor_model_without_a_key_is_refused_at_once_naming_the_variable(keys, spec, variable):
    keys.delenv(variable)
    with pytest.raises(ValueError) as refused:
        model_factory(spec)
    assert f"set {variable}" in str(refused.value)


def test_the_keyless_pace_needs_a_keyless_member(keys):
    assert models_choose(["lead=openai:m"]).paced(1.0)("worker").step_delay == 1.0
    with pytest.raises(ValueError, match="paces the keyless model only"):
        models_choose(["openai:m"]).paced(1.0)


VENDORS = ("openai", "anthropic")


def test_agents_runs_without_the_vendors_sdks_and_names_the_extra_when_one_is_chosen(monkeypatch, capsys):
    monkeypatch.setenv("STEERBOARD_TOKEN", "x")
    with fresh_import(["steerboard_agents"], absent=VENDORS):
        import steerboard_agents.__main__
        import steerboard_agents.registry  # noqa: F401

        for vendor in VENDORS:
            with pytest.raises(SystemExit) as exited:
                steerboard_agents.__main__.main(["run", "--server", "http://127.0.0.1:9", "--model", f"{vendor}:some-model"])
            assert exited.value.code == 2
            err = capsys.readouterr().err
            assert "argument --model" in err and f"pip install 'steerboard[{vendor}]'" in err, err


def test_importing_agents_loads_neither_vendor_sdk():
    with fresh_import(["steerboard_agents"], absent=VENDORS) as attempted:
        import steerboard_agents.__main__  # noqa: F401
    assert attempted == []
