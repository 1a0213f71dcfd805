"""The event classes of a run, and ``dump``/``load`` for JSON (DESIGN §12)."""

from tether.runtime._events import EVENT_TYPES as EVENT_TYPES
from tether.runtime._events import ApprovalAnswered as ApprovalAnswered
from tether.runtime._events import ApprovalRequested as ApprovalRequested
from tether.runtime._events import CeilingHit as CeilingHit
from tether.runtime._events import ChildCrashed as ChildCrashed
from tether.runtime._events import ChildRunFinished as ChildRunFinished
from tether.runtime._events import Event as Event
from tether.runtime._events import Judged as Judged
from tether.runtime._events import LessonsRecalled as LessonsRecalled
from tether.runtime._events import LessonStored as LessonStored
from tether.runtime._events import MemoryFailed as MemoryFailed
from tether.runtime._events import ModelCallFinished as ModelCallFinished
from tether.runtime._events import ModelCallStarted as ModelCallStarted
from tether.runtime._events import PolicyChecked as PolicyChecked
from tether.runtime._events import ProviderRetry as ProviderRetry
from tether.runtime._events import ProviderWait as ProviderWait
from tether.runtime._events import RunFinished as RunFinished
from tether.runtime._events import RunStarted as RunStarted
from tether.runtime._events import StageEntered as StageEntered
from tether.runtime._events import StageExited as StageExited
from tether.runtime._events import ToolCallFinished as ToolCallFinished
from tether.runtime._events import ToolCallStarted as ToolCallStarted
from tether.runtime._events import Transition as Transition
from tether.runtime._events import UsageCharged as UsageCharged
from tether.runtime._events import dump as dump
from tether.runtime._events import load as load
