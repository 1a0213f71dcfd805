"""``python -m tether``: the command line, in :mod:`tether._cli`."""

from tether._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
