"""The runtime: Runtime, the Run supervisor, state, decisions, ceilings, events, results."""

from tether import events as events

from ._agent import Agent as Agent
from ._context import ContextStrategy as ContextStrategy
from ._context import KeepAll as KeepAll
from ._context import TruncateOldest as TruncateOldest
from ._judging import Candidate as Candidate
from ._judging import Judge as Judge
from ._judging import Judgement as Judgement
from ._judging import RuleJudge as RuleJudge
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
from ._run import RunView as RunView
from ._runtime import BudgetExhausted as BudgetExhausted
from ._runtime import RunHandle as RunHandle
from ._runtime import Runtime as Runtime
from ._runtime import RuntimeClosed as RuntimeClosed
from ._sinks import EventSink as EventSink
from ._sinks import JsonlSink as JsonlSink
from ._sinks import combine as combine

__all__ = [
    "Agent",
    "BudgetExhausted",
    "Candidate",
    "ContextStrategy",
    "Criterion",
    "EventSink",
    "InMemoryLessonStore",
    "JsonlSink",
    "Judge",
    "Judgement",
    "KeepAll",
    "LLMJudge",
    "Lesson",
    "LessonStore",
    "LessonStoreError",
    "Limits",
    "Policy",
    "PolicyPoint",
    "RuleJudge",
    "RunHandle",
    "RunResult",
    "RunView",
    "Runtime",
    "RuntimeClosed",
    "SQLiteLessonStore",
    "Termination",
    "TruncateOldest",
    "Usage",
    "Verdict",
    "combine",
    "events",
]
