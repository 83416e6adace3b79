"""Otherone on Temporal: a durable multi-agent runtime for LLM agents.

Everything a user declares, starts or receives is importable from here. Every name is imported
on first use (PEP 562): importing any submodule imports this package first, and neither the
workflow sandbox (which must not load I/O libraries such as `AgentClient`, `build_worker`,
`Store`) nor the CLI (which must start fast: `otherone --help` needs none of the domain types)
should pay for what it does not use.

Subpackages: `otherone.workflows` (the deterministic run loop), `otherone.activities` (model,
tool and store steps), `otherone.store` (SQL store), `otherone.worker` (worker and dev server
wiring), `otherone.client` (`AgentClient` and the `otherone` CLI).
"""

from typing import TYPE_CHECKING

from otherone.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from otherone.client import AgentClient, RunHandle, TypedRunHandle, validated_output
    from otherone.config import RuntimeConfig, RuntimeSnapshot
    from otherone.contracts import ApprovalDecision, ApprovalOutcome, ApprovalRequest
    from otherone.definitions import (
        AccessPolicy,
        AgentDefinition,
        AgentLimits,
        ApprovalRule,
        ContextTransferPolicy,
        HandoffPolicy,
        MemoryPolicy,
        ModelOverrides,
        ModelPrices,
        ModelProfile,
        RunLimitOverrides,
        RuntimeLimits,
        RuntimePolicy,
        ScriptedFailure,
        ScriptedToolCall,
        ScriptedTurn,
    )
    from otherone.errors import (
        ApprovalConflictError,
        ApprovalNotAllowedError,
        ApprovalNotFoundError,
        ConfigurationError,
        FailureCode,
        IdempotencyConflictError,
        InvalidRequestError,
        OtheroneError,
        OutputValidationError,
        RunFailedError,
        RunNotActiveError,
        RunNotFoundError,
        RunStuckError,
        UnavailableError,
    )
    from otherone.guardrails import GuardrailCheck, GuardrailPolicy, GuardrailResult, guardrail
    from otherone.hooks import HookPolicy, HookRefusal, ModelCallView, ToolCallView, hook
    from otherone.mcp_servers import McpServer
    from otherone.partition_limits import PartitionLimits
    from otherone.parts import FilePart, ImagePart, PartRef, TextPart
    from otherone.runs import (
        AgentCallRequest,
        AgentCallResult,
        AgentFailure,
        AgentOutput,
        AgentRunRequest,
        AgentRunResult,
        ArtifactRef,
        ForkOrigin,
        InputMessage,
        ResultContract,
        RunOutcome,
        RunRecord,
        RunStatus,
        RuntimeContext,
        RunUsage,
        SessionTarget,
    )
    from otherone.store import Store
    from otherone.toml_config import load_config
    from otherone.tools import (
        ToolContext,
        ToolError,
        ToolErrorKind,
        ToolRegistry,
        ToolSpec,
        tool,
    )
    from otherone.worker import DevServer, Settings, build_worker, connect

#: Every name is served by `__getattr__` on first use: name → module that defines it.
_LAZY_EXPORTS = {
    **dict.fromkeys(("RuntimeConfig", "RuntimeSnapshot"), "otherone.config"),
    **dict.fromkeys(
        ("ApprovalDecision", "ApprovalOutcome", "ApprovalRequest"), "otherone.contracts"
    ),
    **dict.fromkeys(
        (
            "AccessPolicy",
            "AgentDefinition",
            "AgentLimits",
            "ApprovalRule",
            "ContextTransferPolicy",
            "HandoffPolicy",
            "MemoryPolicy",
            "ModelOverrides",
            "ModelPrices",
            "ModelProfile",
            "RunLimitOverrides",
            "RuntimeLimits",
            "RuntimePolicy",
            "ScriptedFailure",
            "ScriptedToolCall",
            "ScriptedTurn",
        ),
        "otherone.definitions",
    ),
    "PartitionLimits": "otherone.partition_limits",
    **dict.fromkeys(
        (
            "ApprovalConflictError",
            "ApprovalNotAllowedError",
            "ApprovalNotFoundError",
            "ConfigurationError",
            "FailureCode",
            "IdempotencyConflictError",
            "InvalidRequestError",
            "OtheroneError",
            "OutputValidationError",
            "RunFailedError",
            "RunNotActiveError",
            "RunNotFoundError",
            "RunStuckError",
            "UnavailableError",
        ),
        "otherone.errors",
    ),
    **dict.fromkeys(
        ("GuardrailCheck", "GuardrailPolicy", "GuardrailResult", "guardrail"),
        "otherone.guardrails",
    ),
    **dict.fromkeys(
        ("HookPolicy", "HookRefusal", "ModelCallView", "ToolCallView", "hook"), "otherone.hooks"
    ),
    "McpServer": "otherone.mcp_servers",
    **dict.fromkeys(("FilePart", "ImagePart", "PartRef", "TextPart"), "otherone.parts"),
    **dict.fromkeys(
        (
            "AgentCallRequest",
            "AgentCallResult",
            "AgentFailure",
            "AgentOutput",
            "AgentRunRequest",
            "AgentRunResult",
            "ArtifactRef",
            "ForkOrigin",
            "InputMessage",
            "ResultContract",
            "RunOutcome",
            "RunRecord",
            "RunStatus",
            "RuntimeContext",
            "RunUsage",
            "SessionTarget",
        ),
        "otherone.runs",
    ),
    "load_config": "otherone.toml_config",
    **dict.fromkeys(
        ("ToolContext", "ToolError", "ToolErrorKind", "ToolRegistry", "ToolSpec", "tool"),
        "otherone.tools",
    ),
    **dict.fromkeys(
        ("AgentClient", "RunHandle", "TypedRunHandle", "validated_output"), "otherone.client"
    ),
    "Store": "otherone.store",
    **dict.fromkeys(("DevServer", "Settings", "build_worker", "connect"), "otherone.worker"),
}

__getattr__ = lazy_exports(__name__, _LAZY_EXPORTS)


__all__ = [
    "AccessPolicy",
    "AgentCallRequest",
    "AgentCallResult",
    "AgentClient",
    "AgentDefinition",
    "AgentFailure",
    "AgentLimits",
    "AgentOutput",
    "AgentRunRequest",
    "AgentRunResult",
    "ApprovalConflictError",
    "ApprovalDecision",
    "ApprovalNotAllowedError",
    "ApprovalNotFoundError",
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalRule",
    "ArtifactRef",
    "ConfigurationError",
    "ContextTransferPolicy",
    "DevServer",
    "FailureCode",
    "FilePart",
    "ForkOrigin",
    "GuardrailCheck",
    "GuardrailPolicy",
    "GuardrailResult",
    "HandoffPolicy",
    "HookPolicy",
    "HookRefusal",
    "IdempotencyConflictError",
    "ImagePart",
    "InputMessage",
    "InvalidRequestError",
    "McpServer",
    "MemoryPolicy",
    "ModelCallView",
    "ModelOverrides",
    "ModelPrices",
    "ModelProfile",
    "OtheroneError",
    "OutputValidationError",
    "PartRef",
    "PartitionLimits",
    "ResultContract",
    "RunFailedError",
    "RunHandle",
    "RunLimitOverrides",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
    "RunStuckError",
    "RunUsage",
    "RuntimeConfig",
    "RuntimeContext",
    "RuntimeLimits",
    "RuntimePolicy",
    "RuntimeSnapshot",
    "ScriptedFailure",
    "ScriptedToolCall",
    "ScriptedTurn",
    "SessionTarget",
    "Settings",
    "Store",
    "TextPart",
    "ToolCallView",
    "ToolContext",
    "ToolError",
    "ToolErrorKind",
    "ToolRegistry",
    "ToolSpec",
    "TypedRunHandle",
    "UnavailableError",
    "build_worker",
    "connect",
    "guardrail",
    "hook",
    "load_config",
    "tool",
    "validated_output",
]
