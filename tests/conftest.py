"""Each test process (and each xdist worker) leases from device slots of its own.

`harness run` leases from slots shared by the whole machine; tests that start runs
side by side under xdist would then wait for each other's leases and turn their own
deadlines into flakes. The tests about leasing make their own lock directories.
"""

import os
import shutil
import tempfile

from harness.run.plan.devices import LOCK_DIR_ENV


def pytest_configure(config):
    lock_dir = tempfile.mkdtemp(prefix="harness-test-devices-")
    os.environ[LOCK_DIR_ENV] = lock_dir
    config.add_cleanup(lambda: shutil.rmtree(lock_dir, ignore_errors=True))
