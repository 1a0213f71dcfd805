"""A run's event classes, ``dump``/``load`` for JSON, ``summarize`` (docs/concepts/events.md)."""

from tether.runtime import DELTA_TYPES as DELTA_TYPES
from tether.runtime import EVENT_TYPES as EVENT_TYPES
from tether.runtime import ApprovalAnswered as ApprovalAnswered
from tether.runtime import ApprovalRequested as ApprovalRequested
from tether.runtime import CeilingHit as CeilingHit
from tether.runtime import ChildCrashed as ChildCrashed
from tether.runtime import ChildRunFinished as ChildRunFinished
from tether.runtime import ContextBounded as ContextBounded
from tether.runtime import ConversationAppended as ConversationAppended
from tether.runtime import ConversationFailed as ConversationFailed
from tether.runtime import ConversationLoaded as ConversationLoaded
from tether.runtime import Event as Event
from tether.runtime import Judged as Judged
from tether.runtime import LessonsRecalled as LessonsRecalled
from tether.runtime import LessonStored as LessonStored
from tether.runtime import MCPServerRestarted as MCPServerRestarted
from tether.runtime import MCPToolsListed as MCPToolsListed
from tether.runtime import MemoryFailed as MemoryFailed
from tether.runtime import ModelCallFinished as ModelCallFinished
from tether.runtime import ModelCallStarted as ModelCallStarted
from tether.runtime import PolicyChecked as PolicyChecked
from tether.runtime import ProviderFallback as ProviderFallback
from tether.runtime import ProviderRetry as ProviderRetry
from tether.runtime import ProviderWait as ProviderWait
from tether.runtime import ReasoningDelta as ReasoningDelta
from tether.runtime import RunFinished as RunFinished
from tether.runtime import RunForked as RunForked
from tether.runtime import RunResumed as RunResumed
from tether.runtime import RunStarted as RunStarted
from tether.runtime import StageEntered as StageEntered
from tether.runtime import StageExited as StageExited
from tether.runtime import TextDelta as TextDelta
from tether.runtime import ToolCallDelta as ToolCallDelta
from tether.runtime import ToolCallFinished as ToolCallFinished
from tether.runtime import ToolCallStarted as ToolCallStarted
from tether.runtime import ToolOutputDelta as ToolOutputDelta
from tether.runtime import Transition as Transition
from tether.runtime import UsageCharged as UsageCharged
from tether.runtime import dump_event as dump
from tether.runtime import load_event as load
from tether.runtime import summarize as summarize

__all__ = [  # noqa: RUF022  (plain sorted())
    "ApprovalAnswered",
    "ApprovalRequested",
    "CeilingHit",
    "ChildCrashed",
    "ChildRunFinished",
    "ContextBounded",
    "ConversationAppended",
    "ConversationFailed",
    "ConversationLoaded",
    "DELTA_TYPES",
    "EVENT_TYPES",
    "Event",
    "Judged",
    "LessonStored",
    "LessonsRecalled",
    "MCPServerRestarted",
    "MCPToolsListed",
    "MemoryFailed",
    "ModelCallFinished",
    "ModelCallStarted",
    "PolicyChecked",
    "ProviderFallback",
    "ProviderRetry",
    "ProviderWait",
    "ReasoningDelta",
    "RunFinished",
    "RunForked",
    "RunResumed",
    "RunStarted",
    "StageEntered",
    "StageExited",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolOutputDelta",
    "Transition",
    "UsageCharged",
    "dump",
    "load",
    "summarize",
]
