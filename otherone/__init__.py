"""Otherone on Temporal: a durable multi-agent runtime for LLM agents.

Everything a user declares, starts or receives is importable from here. The domain types are
imported at once; the process wiring (`AgentClient`, `build_worker`, `connect`, `DevServer`,
`Settings`, `Store`) is imported on first use, because the workflow sandbox imports this package
too and must not load I/O libraries (and the CLI starts faster).

Subpackages: `otherone.workflows` (the deterministic run loop), `otherone.activities` (model,
tool and store steps), `otherone.store` (SQL store), `otherone.worker` (worker and dev server
wiring), `otherone.client` (`AgentClient` and the `otherone` CLI).
"""

from typing import TYPE_CHECKING

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
    UnavailableError,
)
from otherone.lazy_exports import lazy_exports
from otherone.mcp_servers import McpServer
from otherone.runs import (
    AgentCallRequest,
    AgentCallResult,
    AgentFailure,
    AgentOutput,
    AgentRunRequest,
    AgentRunResult,
    ArtifactRef,
    InputMessage,
    ResultContract,
    RunOutcome,
    RunRecord,
    RunStatus,
    RuntimeContext,
    RunUsage,
    SessionTarget,
)
from otherone.toml_config import load_config
from otherone.tools import ToolContext, ToolError, ToolErrorKind, ToolRegistry, ToolSpec, tool

if TYPE_CHECKING:
    from otherone.client import AgentClient, RunHandle, TypedRunHandle, validated_output
    from otherone.store import Store
    from otherone.worker import DevServer, Settings, build_worker, connect

#: Names served lazily by `__getattr__`: name → module that defines it.
_LAZY_EXPORTS = {
    "AgentClient": "otherone.client",
    "RunHandle": "otherone.client",
    "TypedRunHandle": "otherone.client",
    "validated_output": "otherone.client",
    "Store": "otherone.store",
    "DevServer": "otherone.worker",
    "Settings": "otherone.worker",
    "build_worker": "otherone.worker",
    "connect": "otherone.worker",
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
    "HandoffPolicy",
    "IdempotencyConflictError",
    "InputMessage",
    "InvalidRequestError",
    "McpServer",
    "MemoryPolicy",
    "ModelOverrides",
    "ModelProfile",
    "OtheroneError",
    "OutputValidationError",
    "ResultContract",
    "RunFailedError",
    "RunHandle",
    "RunLimitOverrides",
    "RunNotActiveError",
    "RunNotFoundError",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
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
    "ToolContext",
    "ToolError",
    "ToolErrorKind",
    "ToolRegistry",
    "ToolSpec",
    "TypedRunHandle",
    "UnavailableError",
    "build_worker",
    "connect",
    "load_config",
    "tool",
    "validated_output",
]
