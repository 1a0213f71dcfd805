"""What ``import tether`` loads, counted in a fresh interpreter (no timing here).

``import tether`` must not load httpx, httpx-sse, rich, trio or any extra until
they are used (docs/guides/performance.md): a CLI call, a worker's cold start
and a serverless function pay for every module on every start. The HTTP
providers load httpx when one is first named; the CLI loads a command's
module when that command runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Never loaded by ``import tether`` (top-level package names).
NOT_AT_IMPORT = (
    "httpx",
    "httpx_sse",
    "httpcore",
    "rich",
    "click",
    "trio",
    "asyncio",
    "ray",
    "psycopg",
    "psycopg_pool",
    "mcp",
    "opentelemetry",
    "pydantic",
    "email.utils",
    "importlib.metadata",
    "importlib.resources",
    "uuid",
    "tether.runtime._fleetbudget",
    "tether.runtime._llm_judge",
    "tether.runtime._sqliteruns",
    "tether.runtime._runrows",
)


def loaded_after(code: str) -> set[str]:
    """The modules ``sys.modules`` holds after running ``code`` in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.fixture(scope="module")
def after_import() -> set[str]:
    return loaded_after("import tether")


@pytest.mark.parametrize("module", NOT_AT_IMPORT)
def test_import_tether_does_not_load(after_import: set[str], module: str) -> None:
    """``import tether`` leaves the module (and its submodules) unloaded."""
    assert "tether" in after_import
    assert not {m for m in after_import if m == module or m.startswith(module + ".")}


def test_an_http_provider_loads_httpx_when_first_named() -> None:
    """``tether.providers.AnthropicProvider`` imports its module, and httpx, on first use."""
    loaded = loaded_after(
        "import sys, tether.providers as p\n"
        "assert 'httpx' not in sys.modules\n"
        "assert p.AnthropicProvider.__module__ == 'tether.providers._anthropic'"
    )
    assert {"httpx", "httpx_sse", "tether.providers._anthropic"} <= loaded
    assert "tether.providers._gemini" not in loaded


def test_a_model_string_loads_only_its_provider() -> None:
    """``Agent(provider="openai:...")`` imports the OpenAI module, not the others."""
    loaded = loaded_after("import tether\ntether.Agent(name='a', provider='openai:gpt-4.1-mini')")
    assert "tether.providers._openai" in loaded
    assert "tether.providers._anthropic" not in loaded
    assert "tether.providers._gemini" not in loaded


def test_the_cli_loads_a_command_when_it_runs() -> None:
    """``import tether.cli`` (what ``tether --help`` needs) loads no command, no httpx, no rich."""
    loaded = loaded_after("import tether.cli")
    assert not {m for m in loaded if m.startswith("tether.cli._") and m.endswith("_cmd")}
    assert not {"httpx", "rich", "trio"} & loaded


def test_lazy_names_are_listed_and_star_imported() -> None:
    """The lazily imported providers are in ``dir()`` and ``from tether.providers import *``."""
    import tether.providers

    assert {"AnthropicProvider", "GeminiProvider"} <= set(dir(tether.providers))
    namespace: dict[str, object] = {}
    exec("from tether.providers import *", namespace)
    assert namespace["OpenAIResponsesProvider"] is tether.providers.OpenAIResponsesProvider
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        tether.providers.Nope  # noqa: B018
