"""``python -m tether``: the command line, in :mod:`tether.cli._main`."""

from tether.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
