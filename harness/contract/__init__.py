"""What every part of the harness shares; the bottom room of the package, it imports
nothing of the harness above it (docs/DESIGN.md, "The rooms of the package").

The contract between the harness and an engine's ranks: what an engine's own processes
import (and nothing heavier): the run brief they are given (`runbrief`), the outputs format
they write (`outputs`), the processes an engine plugin asks the launcher for
(`launchplan`), every axis (`axes`). Those modules stay standard library, torch and
safetensors only, so they run inside an engine's own Python environment; this package's
own module imports nothing, so reading one of them does not load the rest.

Beside it, the plain facts every room reads: the harness's own settings (`settings/`),
JSON files read back with their shape checked (`jsonfile`), the verdicts (`verdict`), exit
codes, which harness made a result (`provenance`), where things are (`roots`), the run
directory (`rundir`), entry-point discovery (`plugins`), and a failure as a scenario file
expects it or an engine's known bug describes it (`signature`, `expectations`,
`known_bugs`): the engines and the scenario files both read those, so they sit below both.
"""
