"""Runnable examples of embedding tether in services (importable for the tests)."""
