"""Runnable examples of using tether (a package, so the tests can import and drive them)."""
