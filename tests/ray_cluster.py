"""One local Ray cluster per test session, for the tests that need one (``tests/test_ray.py``,
the Ray half of ``tests/test_runtime_like.py``); mark those tests ``ray`` (the slow tier).

Hosts read their API keys from their own environment: the cluster is started
with :data:`HOST_KEY` as ``OPENAI_API_KEY`` for its workers only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

#: The key every host has in its environment (and the caller does not).
HOST_KEY = "sk-test-from-the-hosts-environment-0123456789"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray cluster for the session (logical CPUs: a host asks for one)."""
    ray = pytest.importorskip("ray", reason="the 'ray' extra is not installed")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(
            num_cpus=8,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"OPENAI_API_KEY": HOST_KEY}},
        )
    yield
    ray.shutdown()
