"""tether: an async actor-model runtime for LLM agents, on asyncio and trio."""

from typing import TYPE_CHECKING, Any

from tether import events as events
from tether._sync import run_sync as run_sync
from tether.actors import FatalToolError as FatalToolError
from tether.actors import RunContext as RunContext
from tether.actors import ToolError as ToolError
from tether.actors import ToolSpec as ToolSpec
from tether.actors import TransientToolError as TransientToolError
from tether.actors import tool as tool
from tether.providers import Image as Image
from tether.providers import Message as Message
from tether.providers import ModelSettings as ModelSettings
from tether.providers import Reasoning as Reasoning
from tether.providers import TetherError as TetherError
from tether.providers import dump_messages as dump_messages
from tether.providers import load_messages as load_messages
from tether.runtime import Agent as Agent
from tether.runtime import Candidate as Candidate
from tether.runtime import ConversationStore as ConversationStore
from tether.runtime import Divergence as Divergence
from tether.runtime import GcTuning as GcTuning
from tether.runtime import InMemoryConversationStore as InMemoryConversationStore
from tether.runtime import InMemoryLessonStore as InMemoryLessonStore
from tether.runtime import JsonlSink as JsonlSink
from tether.runtime import Judge as Judge
from tether.runtime import Judgement as Judgement
from tether.runtime import KeepAll as KeepAll
from tether.runtime import LeaseLost as LeaseLost
from tether.runtime import Lesson as Lesson
from tether.runtime import LessonStore as LessonStore
from tether.runtime import Limits as Limits
from tether.runtime import Policy as Policy
from tether.runtime import PolicyPoint as PolicyPoint
from tether.runtime import Replay as Replay
from tether.runtime import ReplayProvider as ReplayProvider
from tether.runtime import RuleJudge as RuleJudge
from tether.runtime import RunHandle as RunHandle
from tether.runtime import RunHandleLike as RunHandleLike
from tether.runtime import RunNotFound as RunNotFound
from tether.runtime import RunResult as RunResult
from tether.runtime import RunStore as RunStore
from tether.runtime import RunStoreError as RunStoreError
from tether.runtime import RunStoreUnavailable as RunStoreUnavailable
from tether.runtime import Runtime as Runtime
from tether.runtime import RuntimeLike as RuntimeLike
from tether.runtime import SQLiteConversationStore as SQLiteConversationStore
from tether.runtime import SQLiteLessonStore as SQLiteLessonStore
from tether.runtime import Termination as Termination
from tether.runtime import TruncateOldest as TruncateOldest
from tether.runtime import Usage as Usage
from tether.runtime import Verdict as Verdict
from tether.runtime import replay as replay

if TYPE_CHECKING:
    from tether.runtime import Criterion as Criterion
    from tether.runtime import LLMJudge as LLMJudge
    from tether.runtime import SQLiteRunStore as SQLiteRunStore

#: Names of tether.runtime imported on first use (see its ``__getattr__``).
_LAZY = frozenset({"Criterion", "LLMJudge", "SQLiteRunStore"})

#: The installed distribution's version (``importlib.metadata.version("tether")``),
#: read on first use: the package metadata is not searched at import.
__version__: str

__all__ = [
    "Agent",
    "Candidate",
    "ConversationStore",
    "Criterion",
    "Divergence",
    "FatalToolError",
    "GcTuning",
    "Image",
    "InMemoryConversationStore",
    "InMemoryLessonStore",
    "JsonlSink",
    "Judge",
    "Judgement",
    "KeepAll",
    "LLMJudge",
    "LeaseLost",
    "Lesson",
    "LessonStore",
    "Limits",
    "Message",
    "ModelSettings",
    "Policy",
    "PolicyPoint",
    "Reasoning",
    "Replay",
    "ReplayProvider",
    "RuleJudge",
    "RunContext",
    "RunHandle",
    "RunHandleLike",
    "RunNotFound",
    "RunResult",
    "RunStore",
    "RunStoreError",
    "RunStoreUnavailable",
    "Runtime",
    "RuntimeLike",
    "SQLiteConversationStore",
    "SQLiteLessonStore",
    "SQLiteRunStore",
    "Termination",
    "TetherError",
    "ToolError",
    "ToolSpec",
    "TransientToolError",
    "TruncateOldest",
    "Usage",
    "Verdict",
    "dump_messages",
    "events",
    "load_messages",
    "replay",
    "run_sync",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import tether.runtime

        value = getattr(tether.runtime, name)
        globals()[name] = value  # found directly from now on
        return value
    if name == "__version__":
        from importlib.metadata import version

        value = version("tether")
        globals()["__version__"] = value  # read once
        return value
    raise AttributeError(f"module 'tether' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY | {"__version__"})
