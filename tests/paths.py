"""Where the repository and the tests' data lie, found once: no test counts folders up from its own location."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELBENCH = REPO / "tests" / "fixtures" / "kernelbench"  # a checkout in KernelBench's layout, with planted defects
