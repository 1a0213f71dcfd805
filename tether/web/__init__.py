"""The run viewer: a browser view of the runs in a run store or a JSONL trace
(docs/guides/viewer.md). ``tether serve`` serves it; :func:`app` is the ASGI app
to mount in a service; :func:`standalone` the viewer with a Runtime of its own."""

from ._app import TOKENS_ENV as TOKENS_ENV
from ._app import app as app
from ._app import parse_tokens as parse_tokens
from ._app import standalone as standalone

__all__ = ["TOKENS_ENV", "app", "parse_tokens", "standalone"]
