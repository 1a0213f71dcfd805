"""``tether run``: load an agent from a module, swap its provider if asked, stream its answer.

The answer goes to stdout as its text deltas arrive (``handle.events(deltas=True)``);
the side notes (tools, retries, judgements, the summary) go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import anyio
import attrs

from tether import events as ev
from tether.actors import ToolSpec
from tether.cli._common import (
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STOPPED,
    UsageError,
    _clip,
    _compact,
    _money,
    _open_sink,
    _scores,
    _usage_line,
    _write,
    on_ctrl_c,
)
from tether.providers import (
    AnthropicProvider,
    ModelRequest,
    OpenAIProvider,
    Provider,
    ProviderContext,
    Reply,
    ScriptedProvider,
)
from tether.runtime import Agent, JsonlSink, RunHandle, Runtime, Termination


def _cmd_run(args: argparse.Namespace) -> int:
    agent = _with_provider(load_agent(args.target), args)
    # Run ids are unique per Runtime: one file can collect many runs.
    sink = _open_sink(args.trace, "a")
    try:
        return anyio.run(_run, agent, args.input, sink, backend=args.backend)
    finally:
        if sink is not None:
            sink.close()


async def _run(agent: Agent, input: str, sink: JsonlSink | None) -> int:
    """Run ``agent``, print its answer and its summary; the exit code (130 after Ctrl-C)."""
    out, err = sys.stdout, sys.stderr
    async with Runtime(event_sink=sink) as rt:
        handle = rt.start(agent, input)
        async with on_ctrl_c(lambda: handle.cancel("interrupted (Ctrl-C)")) as interrupt:
            await _follow(handle, out, err)
        result = await handle.result()
    if result.termination is Termination.TERMINAL_TOOL and result.output is not None:
        _write(out, result.output)
    _write(err, result.summary())
    _write(err, _usage_line(result.usage))
    _write(err, f"cost: {_money(result.usage.cost_usd)}")
    code = EXIT_CODES.get(result.termination, EXIT_STOPPED)
    if interrupt.pressed:
        code = EXIT_INTERRUPTED
    if code != EXIT_OK:
        _write(err, f"termination: {result.termination.value} (exit {code})")
        if result.error:
            _write(err, f"error: {result.error.rstrip()}")
    return code


async def _follow(handle: RunHandle, out: TextIO, err: TextIO) -> None:
    """Print the answer's text as it streams, and side notes on stderr.

    Text deltas go to stdout as they arrive; a call that streamed none (a
    provider that sends its answer whole) is printed when it finishes. Each
    call's text ends its line, except a response cut off by ``max_tokens``,
    which the next call continues. A retried call's text starts on a new line.
    """
    arguments: dict[str, Any] = {}
    open_line = False  # the last text printed did not end its line
    streamed = False  # the current call's text went out as deltas
    async for event in handle.events(deltas=True):
        if isinstance(event, ev.TextDelta):
            if event.text:
                _write(out, event.text, end="")
                open_line = streamed = True
            continue
        if isinstance(event, ev.ToolCallDelta):
            continue
        if isinstance(event, ev.ModelCallFinished):
            if event.text and not streamed:
                _write(out, event.text, end="")
                open_line = True
            streamed = False
            # A response cut off by max_tokens is continued by the next call.
            if open_line and not (event.stop_reason == "max_tokens" and not event.tool_calls):
                _write(out, "")
                open_line = False
            continue
        if isinstance(event, ev.ProviderRetry | ev.RunFinished):
            if open_line:
                _write(out, "")
                open_line = False
            streamed = False
        _narrate(event, arguments, err)


def _narrate(event: ev.Event, arguments: dict[str, Any], err: TextIO) -> None:
    """The side notes of ``tether run`` on stderr: tools, retries, judgements."""
    if isinstance(event, ev.ToolCallStarted):
        arguments[event.call_id] = event.arguments
    elif isinstance(event, ev.ToolCallFinished):
        call = f"{event.name}({_clip(_compact(arguments.pop(event.call_id, {})), 60)})"
        _write(err, f"· tool {call} → {event.outcome}: {_clip(event.content, 80)}")
    elif isinstance(event, ev.ProviderRetry):
        _write(
            err,
            f"· provider retry after attempt {event.attempt}: {event.error_type}, "
            f"waiting {event.wait_s:.2f} s",
        )
    elif isinstance(event, ev.ProviderFallback):
        _write(err, f"· fallback: {event.error_type}, {event.from_model} → {event.to_model}")
    elif isinstance(event, ev.Judged):
        mark = "✓" if event.passed else "✗"
        feedback = "; ".join(f"{k}: {v}" for k, v in event.feedback.items())
        _write(err, f"· judge {mark} {_scores(event.scores)}{' — ' + feedback if feedback else ''}")


def load_agent(target: str) -> Agent:
    """The agent named by ``MODULE:AGENT`` (a dotted module or a ``.py`` path).

    ``AGENT`` may be dotted (``app.agents:registry.researcher``) and may name a
    function of no arguments that returns the agent. Raises :class:`UsageError`.
    """
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"expected MODULE:AGENT (like 'myapp.agents:researcher' or 'path/to/file.py:agent'), "
            f"got {target!r}"
        )
    module = _import(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    if isinstance(obj, Agent):
        return obj
    if isinstance(obj, ToolSpec):
        raise UsageError(f"{target} is a tool ({obj.name!r}), not a tether.Agent")
    if not callable(obj):
        raise UsageError(f"{target} is of type {type(obj).__name__}, not a tether.Agent")
    if inspect.iscoroutinefunction(obj):
        raise UsageError(f"{target} is an async function; it must return a tether.Agent directly")
    try:
        inspect.signature(obj).bind()
    except TypeError:
        raise UsageError(
            f"{target} takes arguments; name a tether.Agent or a function of no arguments "
            "that returns one"
        ) from None
    except ValueError:  # no signature to read (some builtins): try the call
        pass
    try:
        made = obj()
    except Exception as exc:
        raise UsageError(f"{target}() raised {type(exc).__name__}: {exc}") from None
    if not isinstance(made, Agent):
        raise UsageError(f"{target}() returned {type(made).__name__}, not a tether.Agent")
    return made


def _import(name: str) -> Any:
    is_path = name.endswith(".py") or "/" in name or os.sep in name
    try:
        if is_path:
            return _import_file(Path(name))
        if os.getcwd() not in sys.path and "" not in sys.path:
            # As 'python -m' does: modules of the current directory are importable.
            sys.path.insert(0, os.getcwd())
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                raise UsageError(f"no module named {name!r}") from None
            raise
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"importing {name!r} failed: {type(exc).__name__}: {exc}") from None


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise UsageError(f"no such file: {str(path)!r}")
    path = path.resolve()
    module_name = f"_tether_cli_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Like 'python file.py': the file's own directory is importable, for its siblings.
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _with_provider(agent: Agent, args: argparse.Namespace) -> Agent:
    """``agent`` with the provider the flags (or the environment) ask for."""
    kind: str | None = args.provider or os.environ.get("TETHER_PROVIDER") or None
    model: str | None = args.model or os.environ.get("TETHER_MODEL") or None
    base_url: str | None = args.base_url or os.environ.get("TETHER_BASE_URL") or None
    if kind is None and model is None and base_url is None:
        return agent
    current = agent.provider
    if kind is None:
        if current.name not in ("anthropic", "openai"):
            raise UsageError(
                f"--model and --base-url need --provider anthropic or openai "
                f"(the agent's provider is {current.name!r})"
            )
        kind = current.name
    if kind == "scripted":
        if model is not None or base_url is not None:
            raise UsageError("--provider scripted takes no --model or --base-url")
        return attrs.evolve(agent, provider=ScriptedProvider(_echo))
    if kind not in ("anthropic", "openai"):
        raise UsageError(f"unknown provider {kind!r}: choose anthropic, openai or scripted")
    if model is None:
        if current.name != kind:
            raise UsageError(f"--provider {kind} needs --model (or TETHER_MODEL)")
        model = current.model
    if base_url is None and current.name == kind:
        base_url = getattr(current, "base_url", None)
    provider = _http_provider(kind, model, base_url)
    return attrs.evolve(agent, provider=provider)


def _http_provider(kind: str, model: str, base_url: str | None) -> Provider:
    kwargs: dict[str, Any] = {"model": model}
    if base_url is not None:
        kwargs["base_url"] = base_url
    cls = AnthropicProvider if kind == "anthropic" else OpenAIProvider
    try:
        provider = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"cannot make the {kind} provider: {exc}") from None
    # A local OpenAI-compatible server needs no key; the vendor's own API does.
    official = attrs.fields(cls).base_url.default
    if provider.api_key is None and provider.base_url == str(official).rstrip("/"):
        raise UsageError(f"no API key for {kind}: set {provider.api_key_env}")
    return provider


def _echo(request: ModelRequest, ctx: ProviderContext) -> Reply:
    question = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
    return Reply(text=f"(scripted echo) {question}")
