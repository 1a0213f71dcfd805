"""The actor base and the run's child actors: model, tools, judge.

The public names (``__all__``) are what tools, judges and supervision
settings need. The actors' request and reply messages (``ModelCall``,
``RunTools``, ``JudgeCandidate`` and their replies), the mailbox plumbing and
the child actors themselves are importable from here for the runtime, but are
not part of the public API.
"""

from tether.providers import name_errors_by_package

from ._actor import ActorFailed as ActorFailed
from ._actor import ActorRef as ActorRef
from ._actor import RestartPolicy as RestartPolicy
from ._actor import spawn_mailbox as spawn_mailbox
from ._actor import supervise as supervise
from ._channel import ReplyChannel as ReplyChannel
from ._context import ChildRunner as ChildRunner
from ._context import DepsT as DepsT
from ._context import OutputSink as OutputSink
from ._context import RunContext as RunContext
from ._context import ToolContext as ToolContext
from ._context import ToolOutput as ToolOutput
from ._context import current_tool_context as current_tool_context
from ._gate import ProviderGate as ProviderGate
from ._judge import JudgeActor as JudgeActor
from ._judge import JudgeCandidate as JudgeCandidate
from ._judge import JudgeDone as JudgeDone
from ._judge import JudgeReply as JudgeReply
from ._judging import Candidate as Candidate
from ._judging import Judge as Judge
from ._judging import Judgement as Judgement
from ._judging import RuleJudge as RuleJudge
from ._model import AttemptStarted as AttemptStarted
from ._model import GateWaited as GateWaited
from ._model import ModelActor as ModelActor
from ._model import ModelCall as ModelCall
from ._model import ModelFailed as ModelFailed
from ._model import ModelReply as ModelReply
from ._model import RetryScheduled as RetryScheduled
from ._output import OUTPUT_TOOL as OUTPUT_TOOL
from ._output import OutputSchema as OutputSchema
from ._output import dump_output as dump_output
from ._spawn import cancel_scope as cancel_scope
from ._spawn import spawn as spawn
from ._threads import ToolThreads as ToolThreads
from ._tool_errors import ActorCrashed as ActorCrashed
from ._tool_errors import ActorError as ActorError
from ._tool_errors import FatalToolError as FatalToolError
from ._tool_errors import ToolArgumentsInvalid as ToolArgumentsInvalid
from ._tool_errors import ToolError as ToolError
from ._tool_errors import TransientToolError as TransientToolError
from ._tools import RunTools as RunTools
from ._tools import ToolActor as ToolActor
from ._tools import ToolDone as ToolDone
from ._tools import ToolInvocation as ToolInvocation
from ._tools import ToolReply as ToolReply
from ._tools import ToolSettings as ToolSettings
from ._tools import default_classifier as default_classifier
from ._toolspec import ToolSpec as ToolSpec
from ._toolspec import tool as tool

__all__ = [
    "ActorCrashed",
    "ActorError",
    "Candidate",
    "ChildRunner",
    "FatalToolError",
    "Judge",
    "Judgement",
    "OutputSink",
    "RestartPolicy",
    "RuleJudge",
    "RunContext",
    "ToolArgumentsInvalid",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolSettings",
    "ToolSpec",
    "TransientToolError",
    "current_tool_context",
    "default_classifier",
    "tool",
]

name_errors_by_package(__name__, globals())
