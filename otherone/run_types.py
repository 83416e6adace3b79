"""The declaration types a run's request, result and record name: agent ids, limit overrides,
tree budgets, durations.

Apart from `otherone.definitions` (which re-exports them): reading a run record (`otherone show`,
`otherone.runs`) then does not build every declaration model (issue 16).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
)

if TYPE_CHECKING:
    from otherone.definitions import RuntimeLimits

AGENT_ID_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"

#: An agent id: lowercase letter first, then lowercase letters, digits, ``_`` or ``-`` (≤ 64).
AgentId = Annotated[str, StringConstraints(pattern=AGENT_ID_PATTERN)]
#: What a model profile id looks like.
PROFILE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
#: A model profile id (a request's choice of model, `AgentRunRequest.model`).
ModelProfileId = Annotated[str, StringConstraints(pattern=PROFILE_ID_PATTERN)]

#: What the agent taking over a conversation sees of it (`HandoffPolicy.context`).
HandoffContext = Literal["full", "summary", "last_turns"]


class FrozenModel(BaseModel):
    """Base of the declarations: immutable, unknown fields refused.

    Errors never show the input: a secret pasted in the wrong field (a key as ``api_key_env``,
    in ``metadata``) would otherwise be printed back with pydantic's ``input_value=...``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


def _positive_finite_duration(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be greater than zero")
    if value > timedelta(days=365):
        raise ValueError("must be at most 365 days")
    return value


def _not_a_bool(value: Any) -> Any:
    """Refuse true/false where a number is meant: pydantic reads them as 1 and 0, so a TOML
    `max_model_calls = true` became one model call, `run_timeout = true` one second."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true/false")
    return value


#: For numbers and durations: `true`/`false` are refused, not read as 1/0.
NOT_A_BOOL = BeforeValidator(_not_a_bool)

PositiveDuration = Annotated[timedelta, NOT_A_BOOL, AfterValidator(_positive_finite_duration)]

PositiveCount = Annotated[int, Field(gt=0, le=1_000_000), NOT_A_BOOL]


def plain_decimal(value: Decimal) -> str:
    """``value`` in fixed-point notation, without trailing zeros (``0.0000003``, not
    ``3E-7``): how an amount of money reads in JSON, exactly."""
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


#: An amount in US dollars, exact (a `Decimal`, never a float: sums of many small call costs
#: stay exact); written in JSON as a fixed-point string (``"0.0123"``). TOML and Python may
#: give a number or a string; ``true``/``false`` are refused.
Money = Annotated[
    Decimal,
    NOT_A_BOOL,
    Field(ge=0, allow_inf_nan=False),
    PlainSerializer(plain_decimal, return_type=str, when_used="json"),
]


class RunLimitOverrides(FrozenModel):
    """Per-request limits. Each must be ≤ the runtime's (overrides can only tighten)."""

    max_depth: Annotated[int, Field(ge=0, le=64)] | None = None
    max_total_runs: PositiveCount | None = None
    max_children_per_run: PositiveCount | None = None
    max_iterations_per_run: PositiveCount | None = None
    max_model_calls: PositiveCount | None = None
    max_tool_calls: PositiveCount | None = None
    max_agent_calls: PositiveCount | None = None
    max_handoffs: Annotated[int, Field(strict=True, ge=0, le=1000)] | None = None
    # strict, as in `RuntimeLimits`: "5", 5.0 and true (read as 1) are refused, not coerced.
    max_context_transfer_bytes: Annotated[int, Field(strict=True, gt=0, le=1024 * 1024)] | None = (
        None
    )
    max_result_bytes: Annotated[int, Field(strict=True, gt=0, le=1024 * 1024)] | None = None
    run_timeout: PositiveDuration | None = None
    root_timeout: PositiveDuration | None = None
    max_sleep: PositiveDuration | None = None
    token_budget: Annotated[int, Field(strict=True, gt=0)] | None = None
    cost_budget: Money | None = None
    max_output_bytes: Annotated[int, Field(strict=True, gt=0)] | None = None


class TreeBudget(FrozenModel):
    """What a run and everything it starts may still spend (``tokens`` and ``output_bytes``
    None = unlimited).

    Tree-wide budgets are enforced by allowance: the root starts with the limits, a parent hands
    each child a share, and takes back what the child's whole tree did not use when it ends. No
    shared counter is needed, so runs on different workers can never overspend together.
    """

    runs: Annotated[int, Field(ge=0)]
    model_calls: Annotated[int, Field(ge=0)]
    tool_calls: Annotated[int, Field(ge=0)]
    agent_calls: Annotated[int, Field(ge=0)]
    tokens: Annotated[int, Field(ge=0)] | None = None
    #: UTF-8 bytes of final answers (`RuntimeLimits.max_output_bytes`); absent in budgets
    #: written before it existed (unlimited, as they were).
    output_bytes: Annotated[int, Field(ge=0)] | None = None
    #: US dollars of model calls (`RuntimeLimits.cost_budget`); None: unlimited.
    cost: Money | None = None

    @classmethod
    def for_root(cls, limits: RuntimeLimits) -> TreeBudget:
        return cls(
            runs=limits.max_total_runs - 1,  # the root itself is the first run
            model_calls=limits.max_model_calls,
            tool_calls=limits.max_tool_calls,
            agent_calls=limits.max_agent_calls,
            tokens=limits.token_budget,
            output_bytes=limits.max_output_bytes,
            cost=limits.cost_budget,
        )
