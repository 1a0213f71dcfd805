"""The ``tether`` command line: ``demo``, ``ray-demo``, ``run``, ``trace``."""

from ._main import main as main

__all__ = ["main"]
