"""A module a launch plan asks the zygote to import at a rank's request
(LaunchPlan.preload_on_request): it names the process that imported it in $IMPORT_LOG_DIR."""

import os
from pathlib import Path

if os.environ.get("IMPORT_LOG_DIR"):
    (Path(os.environ["IMPORT_LOG_DIR"]) / f"imported-by-{os.getpid()}").write_text("")
