"""Agents served to frontends: AG-UI (:mod:`tether.ui.ag_ui`) and the AI SDK's UI
message stream (:mod:`tether.ui.vercel_ai`), each as a plain ASGI app over a
Runtime the service owns (docs/guides/ag-ui.md, docs/guides/vercel-ai.md).

``tether.ui.ag_ui`` needs the ``ui`` extra (``ag-ui-protocol``);
``tether.ui.vercel_ai`` needs nothing beyond tether. Neither is imported by
``import tether``.
"""

from ._asgi import with_runtime as with_runtime

__all__ = ["with_runtime"]
