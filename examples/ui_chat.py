"""A chat page in the browser talking to a tether agent over AG-UI or the AI SDK's
UI message stream: ``tether.ui.ag_ui`` and ``tether.ui.vercel_ai`` mounted in a
Starlette app, with a static page each (``examples/ui/``; plain JavaScript, no
build step, nothing loaded from the web).

Install and run (offline: the demo agent plays a scripted model that counts
the words of your message with a tool, which waits for your approval)::

    pip install 'tether[examples,ui]'
    python examples/ui_chat.py                 # http://127.0.0.1:8000/ag-ui/
    python examples/ui_chat.py --backend trio  # on hypercorn and trio

Routes::

    GET  /ag-ui/           the AG-UI chat page       POST /ag-ui/agent      the AG-UI endpoint
    GET  /vercel-ai/       the useChat-style page    POST /vercel-ai/agent  the UI message stream

The endpoints have no authentication here: put them behind the service's own
(see ``examples/_service.py``) before they leave the machine.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import FileResponse
from starlette.routing import Mount, Route

import tether
from tether.ui import ag_ui, vercel_ai

# Run as a script, examples/ is sys.path[0] and this file is no package module.
if __package__:
    from ._service import demo_agent
else:
    from _service import demo_agent

PAGES = Path(__file__).resolve().parent / "ui"

__all__ = ["create_app", "main"]


def create_app(
    agent: tether.Agent | None = None, runtime: tether.Runtime | None = None
) -> Starlette:
    """The two pages and their endpoints over one Runtime, open for the app's lifespan."""
    if agent is None:
        agent = demo_agent("demo", latency_s=0.3, approval=True, chunk_latency_s=0.05)
    rt = runtime or tether.Runtime()

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with rt:
            yield

    def page(name: str) -> Route:
        return Route("/", lambda _: FileResponse(PAGES / name, media_type="text/html"))

    return Starlette(
        routes=[
            Mount(
                "/ag-ui", routes=[page("ag_ui.html"), Mount("/agent", ag_ui.app(agent, runtime=rt))]
            ),
            Mount(
                "/vercel-ai",
                routes=[page("vercel_ai.html"), Mount("/agent", vercel_ai.app(agent, runtime=rt))],
            ),
        ],
        lifespan=lifespan,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args(argv)
    app = create_app()
    print(f"http://{args.host}:{args.port}/ag-ui/ and http://{args.host}:{args.port}/vercel-ai/")
    if args.backend == "asyncio":
        import uvicorn

        uvicorn.run(app, host=args.host, port=args.port)
    else:
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        config.bind = [f"{args.host}:{args.port}"]
        trio.run(serve, app, config)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
