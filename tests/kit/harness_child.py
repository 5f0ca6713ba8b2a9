"""A harness command forked from the test kit's server (tests/kit/harness_server.py):

    python -m tests.kit.harness_child ARGS    is    python -m harness ARGS

Before it starts any thread, it forks its rank pool's zygote from itself (it has imported
what the reference engine's ranks import), for the ranks whose environment would have
imported the same; then it is `python -m harness`, argv[0] and all.
"""

import runpy
import sys

from harness.engines.launch.pool import fork_zygote_here
from tests.kit.harness_server import imports_as_rank


def main() -> None:
    fork_zygote_here(imports_as_rank)
    sys.argv = ["harness", *sys.argv[1:]]
    runpy.run_module("harness", run_name="__main__", alter_sys=False)


if __name__ == "__main__":
    main()
