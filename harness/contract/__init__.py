"""The contract between the harness and an engine's ranks.

What an engine's own processes import (and nothing heavier): the run spec they are
given (`runspec`), the outputs format they write (`outputs`) and the processes an engine
plugin asks the launcher for (`launchplan`). Standard library, torch and safetensors
only, so it runs inside an engine's own Python environment.
"""
