"""The runtime: Runtime, the Run supervisor, state, decisions, ceilings, events, results.

Everything in ``__all__`` is public. Besides what an application uses
(``Runtime``, ``Agent``, ``Limits``, the stores...), this package is the
**extension tier**: the names an integration (``tether.ray``,
``tether.postgres``, ``tether.otel``, ``tether.mcp``, the CLI, yours) builds
on, so that none of them imports a private module:

- **One runtime interface.** :class:`RuntimeLike` and :class:`RunHandleLike`
  (implemented by ``Runtime``, ``RayRuntime`` and their handles, the stored
  run's :class:`StoredRunHandle` included); :func:`check_start`, the start-time
  checks every runtime makes; :class:`PendingApproval`, :class:`RuntimeClosed`,
  :class:`BudgetExhausted`; the agent's type variables ``DepsT``/``OutputT``.
- **Hosting a Runtime** (placing and resuming runs from another process):
  :class:`RuntimeHooks` (run left, gate paused), ``Runtime.in_flight``,
  ``Runtime.owner``, ``Runtime.add_agent``, ``Runtime.pause_gate``;
  ``RunHandle.reader`` gives a :class:`TrailReader` (a run's events in JSON
  batches); :func:`stored_result` waits for a stored run's result.
- **Events**: every event type, :data:`EVENT_TYPES`, :data:`DELTA_TYPES`,
  :func:`dump_event`/:func:`load_event` (their JSON form), :func:`summarize`
  (also as ``tether.events``); **sinks**: :class:`EventSink`, :func:`combine`,
  :class:`SinkStatus`.
- **Run stores**: the :class:`RunStore` protocol and its records
  (:class:`NewRun`, :class:`Claim`, :class:`StoredRun`, :class:`ToolRecord`,
  :class:`Answer`, :class:`Control`, :data:`JSON`), its errors
  (:class:`LeaseLost`, :class:`RunStoreError`), and the SQL row form the SQL
  stores share (:data:`RUN_COLUMNS`, :data:`TOOL_COLUMNS`,
  :func:`run_of_row`, :func:`tool_record_of_row`, :func:`encode_json`,
  :func:`renewal_epochs`). Listing them: :class:`ListableRunStore`
  (``list_runs``, keyset pages of :class:`RunSummary` in a :class:`RunPage`) and
  the SQL stores' shared pieces (:func:`listing_sql`, :func:`summary_of_row`,
  :func:`summary_of`, :func:`page_of`, :func:`check_listing`).
- **Conversation and lesson stores** in a database: subclass
  :class:`StoredConversations` / :class:`StoredLessons` and give the SQL
  (:func:`conversation_conflict` is the error of a lost race).
- **A budget over a fleet of Runtimes**: :class:`BudgetLedger` (one, wherever
  the fleet keeps it), a :class:`LedgerLink` to reach it (:class:`LocalLedgerLink`
  in one process), ``Runtime.share_budget`` to give a Runtime its
  :class:`SlicedBudget`; the messages :class:`Spent`, :class:`Grant` and the
  records :class:`LedgerStatus`, :class:`SliceStatistics`.
- **Replay and fork** (docs/guides/replay.md): :func:`replay` and its
  :class:`Replay` / :class:`Divergence`, :class:`ReplayProvider` (and
  :class:`ReplayExhausted`), :func:`read_trail` / :func:`store_trail` (one run's
  events from a JSONL file or a run store; :class:`TrailError`);
  ``Runtime.fork``.
- **Remote tools**: :class:`Toolset`, :class:`ToolsetSession`,
  :class:`RemoteTool`, :class:`Signals`, :class:`ConnectionLost`, :class:`ToolFilter`.
"""

from typing import TYPE_CHECKING, Any

from tether.actors import Candidate as Candidate
from tether.actors import Judge as Judge
from tether.actors import Judgement as Judgement
from tether.actors import RuleJudge as RuleJudge
from tether.providers import name_errors_by_package

from ._agent import Agent as Agent
from ._agent import DepsT as DepsT
from ._agent import OutputT as OutputT
from ._conversations import ConversationConflict as ConversationConflict
from ._conversations import ConversationStore as ConversationStore
from ._conversations import ConversationStoreError as ConversationStoreError
from ._conversations import InMemoryConversationStore as InMemoryConversationStore
from ._conversations import SQLiteConversationStore as SQLiteConversationStore
from ._conversations import StoredConversations as StoredConversations
from ._conversations import conversation_conflict as conversation_conflict
from ._estimate import estimate_tokens as estimate_tokens
from ._events import DELTA_TYPES as DELTA_TYPES
from ._events import EVENT_TYPES as EVENT_TYPES
from ._events import ApprovalAnswered as ApprovalAnswered
from ._events import ApprovalRequested as ApprovalRequested
from ._events import CeilingHit as CeilingHit
from ._events import ChildCrashed as ChildCrashed
from ._events import ChildRunFinished as ChildRunFinished
from ._events import ContextBounded as ContextBounded
from ._events import ConversationAppended as ConversationAppended
from ._events import ConversationFailed as ConversationFailed
from ._events import ConversationLoaded as ConversationLoaded
from ._events import Event as Event
from ._events import Judged as Judged
from ._events import LessonsRecalled as LessonsRecalled
from ._events import LessonStored as LessonStored
from ._events import MCPServerRestarted as MCPServerRestarted
from ._events import MCPToolsListed as MCPToolsListed
from ._events import MemoryFailed as MemoryFailed
from ._events import ModelCallFinished as ModelCallFinished
from ._events import ModelCallStarted as ModelCallStarted
from ._events import PolicyChecked as PolicyChecked
from ._events import ProviderFallback as ProviderFallback
from ._events import ProviderRetry as ProviderRetry
from ._events import ProviderWait as ProviderWait
from ._events import ReasoningDelta as ReasoningDelta
from ._events import RunFinished as RunFinished
from ._events import RunForked as RunForked
from ._events import RunResumed as RunResumed
from ._events import RunStarted as RunStarted
from ._events import StageEntered as StageEntered
from ._events import StageExited as StageExited
from ._events import TextDelta as TextDelta
from ._events import ToolCallDelta as ToolCallDelta
from ._events import ToolCallFinished as ToolCallFinished
from ._events import ToolCallStarted as ToolCallStarted
from ._events import ToolOutputDelta as ToolOutputDelta
from ._events import Transition as Transition
from ._events import UsageCharged as UsageCharged
from ._events import dump as dump_event
from ._events import load as load_event
from ._gc import GcTuning as GcTuning
from ._input import InputPart as InputPart
from ._input import RunInput as RunInput
from ._lessons import InMemoryLessonStore as InMemoryLessonStore
from ._lessons import Lesson as Lesson
from ._lessons import LessonStore as LessonStore
from ._lessons import LessonStoreError as LessonStoreError
from ._lessons import SQLiteLessonStore as SQLiteLessonStore
from ._lessons import StoredLessons as StoredLessons
from ._like import RunHandleLike as RunHandleLike
from ._like import RuntimeLike as RuntimeLike
from ._limits import Limits as Limits
from ._limits import Termination as Termination
from ._limits import Usage as Usage
from ._playback import Divergence as Divergence
from ._playback import Replay as Replay
from ._playback import ReplayExhausted as ReplayExhausted
from ._playback import ReplayProvider as ReplayProvider
from ._policy import Policy as Policy
from ._policy import PolicyPoint as PolicyPoint
from ._policy import Verdict as Verdict
from ._reader import ReaderKind as ReaderKind
from ._reader import TrailReader as TrailReader
from ._recording import TrailError as TrailError
from ._recording import read_trail as read_trail
from ._recording import store_trail as store_trail
from ._replay import replay as replay
from ._result import RunResult as RunResult
from ._result import summarize as summarize
from ._runlist import MAX_PAGE as MAX_PAGE
from ._runlist import RUN_STATUSES as RUN_STATUSES
from ._runlist import SORTS as SORTS
from ._runlist import ListableRunStore as ListableRunStore
from ._runlist import Order as Order
from ._runlist import RunPage as RunPage
from ._runlist import RunSummary as RunSummary
from ._runlist import Sort as Sort
from ._runlist import check_listing as check_listing
from ._runlist import listing_sql as listing_sql
from ._runlist import page_in_memory as page_in_memory
from ._runlist import page_of as page_of
from ._runlist import sort_value as sort_value
from ._runlist import summary_of as summary_of
from ._runlist import summary_of_row as summary_of_row
from ._runstore import JSON as JSON
from ._runstore import Answer as Answer
from ._runstore import Claim as Claim
from ._runstore import Control as Control
from ._runstore import LeaseLost as LeaseLost
from ._runstore import NewRun as NewRun
from ._runstore import RunNotFound as RunNotFound
from ._runstore import RunStatus as RunStatus
from ._runstore import RunStore as RunStore
from ._runstore import RunStoreError as RunStoreError
from ._runstore import RunStoreUnavailable as RunStoreUnavailable
from ._runstore import StoredRun as StoredRun
from ._runstore import ToolRecord as ToolRecord
from ._runtime import BudgetExhausted as BudgetExhausted
from ._runtime import BudgetStatus as BudgetStatus
from ._runtime import PendingApproval as PendingApproval
from ._runtime import RunHandle as RunHandle
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeClosed as RuntimeClosed
from ._runtime import RuntimeHooks as RuntimeHooks
from ._runtime import StoredRunHandle as StoredRunHandle
from ._sinks import EventSink as EventSink
from ._sinks import JsonlSink as JsonlSink
from ._sinks import SinkStatus as SinkStatus
from ._sinks import combine as combine
from ._startcheck import StartChecked as StartChecked
from ._startcheck import check_start as check_start
from ._state import RunView as RunView
from ._storedhandle import StoredEventStream as StoredEventStream
from ._storedhandle import stored_result as stored_result
from ._toolsets import ConnectionLost as ConnectionLost
from ._toolsets import RemoteTool as RemoteTool
from ._toolsets import Signals as Signals
from ._toolsets import ToolFilter as ToolFilter
from ._toolsets import Toolset as Toolset
from ._toolsets import ToolsetSession as ToolsetSession
from ._window import BoundingStrategy as BoundingStrategy
from ._window import ContextStrategy as ContextStrategy
from ._window import KeepAll as KeepAll
from ._window import TruncateOldest as TruncateOldest

__all__ = [  # noqa: RUF022  (plain sorted(), which tests/test_api.py checks)
    "Agent",
    "Answer",
    "ApprovalAnswered",
    "ApprovalRequested",
    "BoundingStrategy",
    "BudgetExhausted",
    "BudgetLedger",
    "BudgetStatus",
    "Candidate",
    "CeilingHit",
    "ChildCrashed",
    "ChildRunFinished",
    "Claim",
    "ConnectionLost",
    "ContextBounded",
    "ContextStrategy",
    "Control",
    "ConversationAppended",
    "ConversationConflict",
    "ConversationFailed",
    "ConversationLoaded",
    "ConversationStore",
    "ConversationStoreError",
    "Criterion",
    "DELTA_TYPES",
    "DepsT",
    "Divergence",
    "EVENT_TYPES",
    "Event",
    "EventSink",
    "GcTuning",
    "Grant",
    "InMemoryConversationStore",
    "InMemoryLessonStore",
    "InputPart",
    "JSON",
    "JsonlSink",
    "Judge",
    "Judged",
    "Judgement",
    "KeepAll",
    "LLMJudge",
    "LeaseLost",
    "LedgerLink",
    "LedgerStatus",
    "Lesson",
    "LessonStore",
    "LessonStoreError",
    "LessonStored",
    "LessonsRecalled",
    "Limits",
    "ListableRunStore",
    "LocalLedgerLink",
    "MAX_PAGE",
    "MCPServerRestarted",
    "MCPToolsListed",
    "MemoryFailed",
    "ModelCallFinished",
    "ModelCallStarted",
    "NewRun",
    "Order",
    "OutputT",
    "PendingApproval",
    "Policy",
    "PolicyChecked",
    "PolicyPoint",
    "ProviderFallback",
    "ProviderRetry",
    "ProviderWait",
    "RUN_COLUMNS",
    "RUN_STATUSES",
    "ReaderKind",
    "ReasoningDelta",
    "RemoteTool",
    "Replay",
    "ReplayExhausted",
    "ReplayProvider",
    "RuleJudge",
    "RunFinished",
    "RunForked",
    "RunHandle",
    "RunHandleLike",
    "RunInput",
    "RunNotFound",
    "RunPage",
    "RunResult",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "RunStore",
    "RunStoreError",
    "RunStoreUnavailable",
    "RunSummary",
    "RunView",
    "Runtime",
    "RuntimeClosed",
    "RuntimeHooks",
    "RuntimeLike",
    "SORTS",
    "SQLiteConversationStore",
    "SQLiteLessonStore",
    "SQLiteRunStore",
    "Signals",
    "SinkStatus",
    "SliceStatistics",
    "SlicedBudget",
    "Sort",
    "Spent",
    "StageEntered",
    "StageExited",
    "StartChecked",
    "StoredConversations",
    "StoredEventStream",
    "StoredLessons",
    "StoredRun",
    "StoredRunHandle",
    "TOOL_COLUMNS",
    "Termination",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolFilter",
    "ToolOutputDelta",
    "ToolRecord",
    "Toolset",
    "ToolsetSession",
    "TrailError",
    "TrailReader",
    "Transition",
    "TruncateOldest",
    "Usage",
    "UsageCharged",
    "Verdict",
    "check_listing",
    "check_start",
    "combine",
    "conversation_conflict",
    "dump_event",
    "encode_json",
    "estimate_tokens",
    "listing_sql",
    "load_event",
    "page_in_memory",
    "page_of",
    "read_trail",
    "renewal_epochs",
    "replay",
    "run_of_row",
    "sort_value",
    "store_trail",
    "stored_result",
    "summarize",
    "summary_of",
    "summary_of_row",
    "tool_record_of_row",
]

if TYPE_CHECKING:
    from ._fleetbudget import BudgetLedger as BudgetLedger
    from ._fleetbudget import Grant as Grant
    from ._fleetbudget import LedgerLink as LedgerLink
    from ._fleetbudget import LedgerStatus as LedgerStatus
    from ._fleetbudget import LocalLedgerLink as LocalLedgerLink
    from ._fleetbudget import SlicedBudget as SlicedBudget
    from ._fleetbudget import SliceStatistics as SliceStatistics
    from ._fleetbudget import Spent as Spent
    from ._llm_judge import Criterion as Criterion
    from ._llm_judge import LLMJudge as LLMJudge
    from ._runrows import RUN_COLUMNS as RUN_COLUMNS
    from ._runrows import TOOL_COLUMNS as TOOL_COLUMNS
    from ._runrows import encode_json as encode_json
    from ._runrows import renewal_epochs as renewal_epochs
    from ._runrows import run_of_row as run_of_row
    from ._runrows import tool_record_of_row as tool_record_of_row
    from ._sqliteruns import SQLiteRunStore as SQLiteRunStore

#: Public names imported on first use: a fleet's budget, the LLM judge, the SQLite run
#: store and the SQL row form the SQL stores share (most programs use none of them).
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "BudgetLedger",
            "Grant",
            "LedgerLink",
            "LedgerStatus",
            "LocalLedgerLink",
            "SlicedBudget",
            "SliceStatistics",
            "Spent",
        ),
        "_fleetbudget",
    ),
    "Criterion": "_llm_judge",
    "LLMJudge": "_llm_judge",
    "RUN_COLUMNS": "_runrows",
    "TOOL_COLUMNS": "_runrows",
    "encode_json": "_runrows",
    "renewal_epochs": "_runrows",
    "run_of_row": "_runrows",
    "tool_record_of_row": "_runrows",
    "SQLiteRunStore": "_sqliteruns",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


name_errors_by_package(__name__, globals())
