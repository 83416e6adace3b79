"""Validation of the domain types: the seed's defaults, ids, sizes, ranges, finite limits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from otherone import (
    AccessPolicy,
    AgentDefinition,
    ConfigurationError,
    InvalidRequestError,
    ModelProfile,
    RunLimitOverrides,
    RuntimeConfig,
    RuntimeLimits,
    RuntimePolicy,
    tool,
)
from otherone.client.agent_client import build_request, root_run_id
from otherone.definitions import HandoffPolicy


def test_runtime_limits_have_the_seed_defaults() -> None:
    limits = RuntimeLimits()
    assert (limits.max_depth, limits.max_total_runs, limits.max_children_per_run) == (3, 32, 8)
    assert (limits.max_concurrent_model_calls, limits.max_concurrent_tool_calls) == (4, 8)
    assert (limits.max_iterations_per_run, limits.max_model_calls, limits.max_tool_calls) == (
        12,
        64,
        128,
    )
    assert limits.max_agent_calls == 32
    assert (limits.max_context_transfer_bytes, limits.max_result_bytes) == (64 * 1024, 256 * 1024)
    assert (limits.run_timeout, limits.root_timeout) == (
        timedelta(minutes=5),
        timedelta(minutes=15),
    )
    assert limits.token_budget is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_depth", -1),
        ("max_total_runs", 0),
        ("max_iterations_per_run", 10**9),
        ("run_timeout", 0),
        ("run_timeout", -5),
        ("root_timeout", float("inf")),
        ("root_timeout", 10**12),
        ("token_budget", 0),
        ("max_result_bytes", 10**9),
    ],
)
def test_limits_must_be_positive_and_finite(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as error:
        RuntimeLimits.model_validate({field: value})
    assert field in str(error.value)


@pytest.mark.parametrize(
    "field", ["token_budget", "max_context_transfer_bytes", "max_result_bytes"]
)
@pytest.mark.parametrize("value", ["5", 5.0, True])
def test_overrides_take_byte_and_token_counts_as_integers_only(field: str, value: Any) -> None:
    """As `RuntimeLimits` does: a request's "5", 5.0 or true (read as 1) is refused, naming the
    field, instead of quietly becoming a count."""
    with pytest.raises(ValidationError) as error:
        RunLimitOverrides.model_validate({field: value})
    assert field in str(error.value)
    RuntimeLimits.model_validate({field: 5})


def test_overrides_can_only_tighten() -> None:
    limits = RuntimeLimits()
    tightened = limits.tightened(
        RunLimitOverrides(max_tool_calls=5, root_timeout=timedelta(seconds=30))
    )
    assert (tightened.max_tool_calls, tightened.root_timeout) == (5, timedelta(seconds=30))
    with pytest.raises(ValueError, match=r"limits\.max_depth.*only tighten"):
        limits.tightened(RunLimitOverrides(max_depth=4))
    with pytest.raises(ValueError, match="run_timeout"):
        limits.tightened(RunLimitOverrides(run_timeout=timedelta(hours=1)))


@pytest.mark.parametrize(
    "agent_id", ["", "Agent", "1agent", "a" * 65, "has space", "a.b", "agent\n"]
)
def test_agent_ids_follow_the_seed_pattern(agent_id: str) -> None:
    with pytest.raises(ValidationError):
        AgentDefinition(id=agent_id, description="x")


def test_agent_description_and_prompt_sizes_are_bounded_in_bytes() -> None:
    with pytest.raises(ValidationError, match="description"):
        AgentDefinition(id="a", description="")
    with pytest.raises(ValidationError, match="description"):
        AgentDefinition(id="a", description="   ")
    with pytest.raises(ValidationError, match="1024 bytes"):
        AgentDefinition(id="a", description="é" * 513)  # 1026 bytes, 513 characters
    with pytest.raises(ValidationError, match="system_prompt"):
        AgentDefinition(id="a", description="x", system_prompt="x" * (128 * 1024 + 1))
    AgentDefinition(id="a", description="é" * 512)


def test_agent_defaults_are_closed() -> None:
    agent = AgentDefinition(id="a", description="x")
    assert agent.tools == AccessPolicy.none() and agent.callable_agents == AccessPolicy.none()
    assert agent.memory.value == "disabled" and agent.context.kind == "explicit_only"
    assert not agent.tools.allows("anything")


def test_access_policy_shorthands() -> None:
    agent = AgentDefinition.model_validate(
        {"id": "a", "description": "x", "tools": ["b", "a", "a"]}
    )
    assert agent.tools == AccessPolicy.allow("a", "b")
    assert AgentDefinition.model_validate(
        {"id": "a", "description": "x", "tools": "all"}
    ).tools.allows("z")
    with pytest.raises(ValidationError):
        AccessPolicy(mode="all", names=("x",))


def test_model_profile_refuses_inline_keys_and_checks_ranges() -> None:
    with pytest.raises(ValidationError, match="api_key_env"):
        ModelProfile.model_validate(
            {"id": "m", "provider": "openai", "model": "x", "api_key": "sk-secret"}
        )
    with pytest.raises(ValidationError):
        ModelProfile(id="m", provider="openai", model="x", temperature=float("nan"))
    with pytest.raises(ValidationError):
        ModelProfile(id="m", provider="openai", model="x", top_p=1.5)
    with pytest.raises(ValidationError):
        ModelProfile.model_validate({"id": "m", "provider": "nope", "model": "x"})
    with pytest.raises(ValidationError, match="only allowed for provider 'scripted'"):
        ModelProfile.model_validate(
            {"id": "m", "provider": "openai", "model": "x", "script": {"a": ["hi"]}}
        )


def _model() -> ModelProfile:
    return ModelProfile(id="m", provider="scripted", model="x")


def test_runtime_config_cross_references() -> None:
    with pytest.raises(ConfigurationError, match="at least one model"):
        RuntimeConfig(agents=[AgentDefinition(id="a", description="x")]).validate()
    with pytest.raises(ConfigurationError, match=r"agents\.a.*unknown model 'gpt'"):
        RuntimeConfig(
            models=[_model()], agents=[AgentDefinition(id="a", description="x", model="gpt")]
        ).validate()
    with pytest.raises(ConfigurationError, match="unknown tool 'search'"):
        RuntimeConfig(
            models=[_model()],
            agents=[AgentDefinition(id="a", description="x", tools=AccessPolicy.allow("search"))],
        ).validate()
    with pytest.raises(ConfigurationError, match="unknown agent 'b'"):
        RuntimeConfig(
            models=[_model()],
            agents=[
                AgentDefinition(id="a", description="x", callable_agents=AccessPolicy.allow("b"))
            ],
        ).validate()
    with pytest.raises(ConfigurationError, match="duplicate agent id 'a'"):
        RuntimeConfig(models=[_model()], agents=[AgentDefinition(id="a", description="x")] * 2)
    with pytest.raises(ConfigurationError, match="default_model"):
        RuntimeConfig(models=[_model()], default_model="other").validate()


def test_reserved_tool_names_are_refused() -> None:
    def recall() -> str:
        """Pretends to be memory."""
        return ""

    with pytest.raises(ConfigurationError, match="reserved"):
        RuntimeConfig(models=[_model()], tools=[tool(name="memory.recall")(recall)])


def test_snapshot_is_versioned_by_content_and_effective_access_is_an_intersection() -> None:
    @tool
    def search(query: str) -> str:
        """Search."""
        return query

    @tool
    def delete_all() -> str:
        """Dangerous."""
        return ""

    agent = AgentDefinition(id="a", description="x", tools=AccessPolicy.all())
    config = RuntimeConfig(
        models=[_model()],
        agents=[agent],
        tools=[search, delete_all],
        policy=RuntimePolicy(tools=AccessPolicy.allow("search")),
    )
    snapshot = config.snapshot()
    assert snapshot.tool_names_for(agent) == ["search"]
    assert snapshot.version == config.snapshot().version
    changed = RuntimeConfig(models=[_model()], agents=[agent], tools=[search, delete_all])
    assert changed.snapshot().version != snapshot.version
    assert '"api_key"' not in snapshot.model_dump_json()  # only api_key_env, a reference


def test_per_agent_answers_are_kept_per_version_but_never_for_a_changed_agent() -> None:
    """`RuntimeSnapshot` keeps each agent's tools, targets and skills per snapshot version;
    callers get lists of their own, and an agent that is not the snapshot's own is asked anew."""

    @tool
    def search(query: str) -> str:
        """Search."""
        return query

    config = RuntimeConfig(
        models=[_model()],
        agents=[
            AgentDefinition(
                id="a",
                description="x",
                tools=AccessPolicy.all(),
                handoff=HandoffPolicy(agents=AccessPolicy.all()),
            ),
            AgentDefinition(id="b", description="y"),
        ],
        tools=[search],
    )
    snapshot = config.snapshot()
    agent = snapshot.agent("a")
    names = snapshot.tool_names_for(agent)
    names.append("taken by the caller")
    assert snapshot.tool_names_for(agent) == ["search"]
    assert [target.id for target in snapshot.handoff_targets(agent)] == ["b"]
    narrowed = agent.model_copy(
        update={"tools": AccessPolicy.none(), "handoff": HandoffPolicy(agents=AccessPolicy.none())}
    )
    assert snapshot.tool_names_for(narrowed) == []
    assert snapshot.handoff_targets(narrowed) == []
    other = RuntimeConfig(
        models=[_model()],
        agents=[AgentDefinition(id="a", description="x", tools=AccessPolicy.none())],
        tools=[search],
    ).snapshot()
    assert other.version != snapshot.version
    assert other.tool_names_for(other.agent("a")) == []


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"entry_agent": "Bad Agent", "input": "hi"}, "entry_agent"),
        ({"entry_agent": "a", "input": "   "}, "input"),
        ({"entry_agent": "a", "input": []}, "input"),
        ({"entry_agent": "a", "input": "hi", "idempotency_key": ""}, "idempotency_key"),
        ({"entry_agent": "a", "input": "hi", "idempotency_key": "k" * 257}, "idempotency_key"),
        ({"entry_agent": "a", "input": "hi", "session": {"session_id": " "}}, "session.session_id"),
        (
            {"entry_agent": "a", "input": "hi", "session": {"context_window": 0}},
            "session.context_window",
        ),
        (
            {"entry_agent": "a", "input": "hi", "session": {"threshold_percentage": 1.5}},
            "session.threshold_percentage",
        ),
        (
            {"entry_agent": "a", "input": "hi", "runtime_context": {"partition_key": "a b"}},
            "runtime_context.partition_key",
        ),
        ({"entry_agent": "a", "input": "hi", "limits": {"max_depth": -1}}, "limits.max_depth"),
        ({"entry_agent": "a", "input": "hi", "surprise": 1}, "surprise"),
        ({"entry_agent": "a", "input": "x" * (1024 * 1024 + 1)}, "input"),
    ],
)
def test_bad_requests_name_the_field(fields: dict[str, Any], field_name: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        build_request(**fields)
    assert error.value.field is not None and error.value.field.startswith(field_name)
    assert field_name in str(error.value)


def test_root_run_ids_derive_from_partition_and_key() -> None:
    keyed = build_request(entry_agent="a", input="hi", idempotency_key="k")
    assert root_run_id(keyed) == root_run_id(keyed.model_copy(update={"input": "other"}))
    other_partition = build_request(
        entry_agent="a",
        input="hi",
        idempotency_key="k",
        runtime_context={"partition_key": "tenant-b"},
    )
    assert root_run_id(keyed) != root_run_id(other_partition)
    unkeyed = build_request(entry_agent="a", input="hi")
    assert root_run_id(unkeyed) != root_run_id(unkeyed)
    assert keyed.fingerprint() != keyed.model_copy(update={"input": "other"}).fingerprint()


def test_a_config_with_text_no_snapshot_could_store_is_refused_naming_the_field() -> None:
    from otherone.config import RuntimeConfig
    from otherone.errors import ConfigurationError

    profile = ModelProfile.model_validate(
        {"id": "s", "provider": "scripted", "model": "t", "script": {"a": ["bad \udcff text"]}}
    )
    with pytest.raises(ConfigurationError) as refused:
        RuntimeConfig(models=[profile])
    assert refused.value.table == "models.s" and refused.value.field == "script.a.0.text"
