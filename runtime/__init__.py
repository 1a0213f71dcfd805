"""The runtime: Runtime, the Run supervisor, state, decisions, ceilings, events, results."""

from tether.actors import Candidate as Candidate
from tether.actors import Judge as Judge
from tether.actors import Judgement as Judgement
from tether.actors import RuleJudge as RuleJudge
from tether.providers import name_errors_by_package

from ._agent import Agent as Agent
from ._context import BoundingStrategy as BoundingStrategy
from ._context import ContextStrategy as ContextStrategy
from ._context import KeepAll as KeepAll
from ._context import TruncateOldest as TruncateOldest
from ._conversations import ConversationConflict as ConversationConflict
from ._conversations import ConversationStore as ConversationStore
from ._conversations import ConversationStoreError as ConversationStoreError
from ._conversations import InMemoryConversationStore as InMemoryConversationStore
from ._conversations import SQLiteConversationStore as SQLiteConversationStore
from ._estimate import estimate_tokens as estimate_tokens
from ._input import InputPart as InputPart
from ._input import RunInput as RunInput
from ._lessons import InMemoryLessonStore as InMemoryLessonStore
from ._lessons import Lesson as Lesson
from ._lessons import LessonStore as LessonStore
from ._lessons import LessonStoreError as LessonStoreError
from ._lessons import SQLiteLessonStore as SQLiteLessonStore
from ._limits import Limits as Limits
from ._limits import Termination as Termination
from ._limits import Usage as Usage
from ._llm_judge import Criterion as Criterion
from ._llm_judge import LLMJudge as LLMJudge
from ._policy import Policy as Policy
from ._policy import PolicyPoint as PolicyPoint
from ._policy import Verdict as Verdict
from ._result import RunResult as RunResult
from ._runstore import Answer as Answer
from ._runstore import Claim as Claim
from ._runstore import Control as Control
from ._runstore import LeaseLost as LeaseLost
from ._runstore import NewRun as NewRun
from ._runstore import RunStore as RunStore
from ._runstore import RunStoreError as RunStoreError
from ._runstore import RunStoreUnavailable as RunStoreUnavailable
from ._runstore import StoredRun as StoredRun
from ._runstore import ToolRecord as ToolRecord
from ._runtime import BudgetExhausted as BudgetExhausted
from ._runtime import RunHandle as RunHandle
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeClosed as RuntimeClosed
from ._sinks import EventSink as EventSink
from ._sinks import JsonlSink as JsonlSink
from ._sinks import combine as combine
from ._sqliteruns import SQLiteRunStore as SQLiteRunStore
from ._state import RunView as RunView
from ._toolsets import ConnectionLost as ConnectionLost
from ._toolsets import RemoteTool as RemoteTool
from ._toolsets import Signals as Signals
from ._toolsets import ToolFilter as ToolFilter
from ._toolsets import Toolset as Toolset
from ._toolsets import ToolsetSession as ToolsetSession

__all__ = [
    "Agent",
    "Answer",
    "BoundingStrategy",
    "BudgetExhausted",
    "Candidate",
    "Claim",
    "ContextStrategy",
    "Control",
    "ConversationConflict",
    "ConversationStore",
    "ConversationStoreError",
    "Criterion",
    "EventSink",
    "InMemoryConversationStore",
    "InMemoryLessonStore",
    "InputPart",
    "JsonlSink",
    "Judge",
    "Judgement",
    "KeepAll",
    "LLMJudge",
    "LeaseLost",
    "Lesson",
    "LessonStore",
    "LessonStoreError",
    "Limits",
    "NewRun",
    "Policy",
    "PolicyPoint",
    "RuleJudge",
    "RunHandle",
    "RunInput",
    "RunResult",
    "RunStore",
    "RunStoreError",
    "RunStoreUnavailable",
    "RunView",
    "Runtime",
    "RuntimeClosed",
    "SQLiteConversationStore",
    "SQLiteLessonStore",
    "SQLiteRunStore",
    "StoredRun",
    "Termination",
    "ToolFilter",
    "ToolRecord",
    "Toolset",
    "ToolsetSession",
    "TruncateOldest",
    "Usage",
    "Verdict",
    "combine",
    "estimate_tokens",
]

name_errors_by_package(__name__, globals())
