"""runner_core: the durable agent-turn state machine and its embedded defaults."""

from runner_core._engine.wakeups import DescribingDispatcher
from runner_core.agent import Agent, AgentLoader, InMemoryAgentLoader
from runner_core.context import AgentToolContext
from runner_core.conversation import ChatMemory, InMemoryChatMemory, attach_window
from runner_core.deps import DependencyError
from runner_core.errors import (
    AgentConversationBusyException,
    AgentNotFoundError,
    AgentWorkerError,
    ConcurrentModificationError,
    ConfigurationError,
    HistoryRewrittenError,
    IllegalTransitionError,
    InvalidArgumentError,
    InvalidResumeError,
    LeaseLostError,
    PayloadTooLargeError,
    RestoredError,
    SnapshotCorruptedError,
    StoreUnavailableError,
    TurnLeasedError,
    TurnNotFoundError,
)
from runner_core.events import PROVISIONAL, AgentEvent, AgentEventListener, AgentEventType
from runner_core.messages import (
    AiMessage,
    ImagePart,
    Message,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from runner_core.middleware import Middleware
from runner_core.models import (
    AsyncChatModel,
    AsyncStreamingChatModel,
    ChatModel,
    FunctionModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    StreamDone,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from runner_core.moved import alias_moved_modules
from runner_core.planning import (
    AgentPlanningPolicy,
    FailureStrategy,
    PlanTask,
    TaskPlan,
    TaskStatus,
)
from runner_core.policy import (
    AgentBudget,
    AgentExecutionPolicy,
    AgentTurnOptions,
    RetryPolicy,
    ToolErrorStrategy,
)
from runner_core.resume import AgentResumeCommand, ResumeKind
from runner_core.runner import AgentRunner
from runner_core.snapshot import (
    SCHEMA_VERSION,
    AgentTurnSnapshot,
    ChildResult,
    ErrorInfo,
    LeaseInfo,
    Suspension,
    SuspensionType,
    load_snapshot,
)
from runner_core.status import AgentTurnPhase, AgentTurnStatus
from runner_core.store import AgentTurnStore, CancelResult, Commit, SaveResult, TurnControl
from runner_core.store.memory import InMemoryAgentTurnStore
from runner_core.tools import (
    ApprovalDecision,
    AwaitableResultError,
    Tool,
    ToolCallAbortedError,
    ToolError,
    ToolTimeoutError,
    tool,
)
from runner_core.turn import AgentStepResult, AgentTurn, TaskProgress
from runner_core.worker import AgentWorker

#: Modules of earlier releases and where they live now (docs/upgrading.md).
MOVED = {
    "runner_core.memory": "runner_core.conversation",
    "runner_core.memory_store": "runner_core.store.memory",
    "runner_core.wakeups": "runner_core._engine.wakeups",
    "runner_core.tracing": "runner_core._engine.tracing",
}
alias_moved_modules(MOVED)

__all__ = [
    "TurnLeasedError",
    "StoreUnavailableError",
    "PayloadTooLargeError",
    "Commit",
    "ChildResult",
    "CancelResult",
    "PROVISIONAL",
    "SCHEMA_VERSION",
    "Agent",
    "AgentBudget",
    "AgentConversationBusyException",
    "AgentEvent",
    "AgentEventListener",
    "AgentEventType",
    "AgentExecutionPolicy",
    "AgentLoader",
    "AgentNotFoundError",
    "AgentPlanningPolicy",
    "AgentResumeCommand",
    "AgentRunner",
    "AgentStepResult",
    "AgentToolContext",
    "AgentTurn",
    "AgentTurnOptions",
    "AgentTurnPhase",
    "AgentTurnSnapshot",
    "AgentTurnStatus",
    "AgentTurnStore",
    "AgentWorker",
    "AgentWorkerError",
    "AiMessage",
    "ApprovalDecision",
    "AsyncChatModel",
    "AsyncStreamingChatModel",
    "AwaitableResultError",
    "ChatMemory",
    "ChatModel",
    "ConcurrentModificationError",
    "ConfigurationError",
    "DependencyError",
    "DescribingDispatcher",
    "ErrorInfo",
    "FailureStrategy",
    "FunctionModel",
    "HistoryRewrittenError",
    "IllegalTransitionError",
    "ImagePart",
    "InMemoryAgentLoader",
    "InMemoryAgentTurnStore",
    "InMemoryChatMemory",
    "InvalidArgumentError",
    "InvalidResumeError",
    "LeaseInfo",
    "LeaseLostError",
    "Message",
    "Middleware",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "PlanTask",
    "ReasoningDelta",
    "RestoredError",
    "ResumeKind",
    "RetryPolicy",
    "SaveResult",
    "SnapshotCorruptedError",
    "StreamDone",
    "Suspension",
    "SuspensionType",
    "SystemMessage",
    "TaskPlan",
    "TaskProgress",
    "TaskStatus",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolCallAbortedError",
    "ToolCallDelta",
    "ToolError",
    "ToolTimeoutError",
    "ToolErrorStrategy",
    "ToolMessage",
    "ToolSpec",
    "TurnControl",
    "TurnNotFoundError",
    "Usage",
    "UserMessage",
    "attach_window",
    "load_snapshot",
    "tool",
]
