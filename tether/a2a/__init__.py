"""A2A (Agent2Agent): serve a tether agent, call a remote one (extra ``a2a``).

Install the extra (``pip install 'tether[a2a]'``, on the official ``a2a-sdk``)::

    from tether.a2a import A2AAgent, serve

    app = serve(agent, runtime=rt, url="https://agents.example.com/a2a")  # an ASGI app
    helper = A2AAgent("https://other.example.com")  # a tool: Agent(tools=[helper])

:func:`serve` answers A2A's JSON-RPC methods (1.0 and 0.3 names) and serves
the agent card; a task is a run, ``input-required`` a call held for approval.
:func:`A2AAgent` is a tool that delegates a task to a remote A2A agent: its
streamed text as ``ToolOutputDelta`` events, its usage (``metadata`` key
:data:`USAGE_KEY`) charged to the caller, cancellation propagated, failures as
typed tool errors. See docs/guides/a2a.md for what maps to what.
"""

from __future__ import annotations

try:
    import a2a.types  # noqa: F401
    import starlette  # noqa: F401  (the server's app)
except ImportError as exc:  # tests/test_extras.py hides them to check this
    raise ImportError(
        "tether.a2a needs the A2A SDK and Starlette: install the extra with "
        "pip install 'tether[a2a]' (a2a-sdk, starlette)"
    ) from exc

from ._client import A2AAgent as A2AAgent
from ._server import CARD_PATH as CARD_PATH
from ._server import DELTA_KEY as DELTA_KEY
from ._server import serve as serve
from ._tasks import APPROVALS_KEY as APPROVALS_KEY
from ._tasks import TERMINATION_KEY as TERMINATION_KEY
from ._tasks import USAGE_KEY as USAGE_KEY

__all__ = [
    "APPROVALS_KEY",
    "CARD_PATH",
    "DELTA_KEY",
    "TERMINATION_KEY",
    "USAGE_KEY",
    "A2AAgent",
    "serve",
]
