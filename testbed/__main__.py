"""`python -m testbed ...` (the guard matters: vLLM spawns subprocesses)."""

from __future__ import annotations

import sys

from testbed.cli import main

if __name__ == "__main__":
    sys.exit(main())
