"""Configuration: what the user asked for, read and checked in one place, flowing one way
(schema -> binding -> loading -> scenarios -> a run's request) into the rest of the harness.

- schema.py: what a scenario file may say, checked without any engine;
- binding.py: a suite's axes, values and fault names against its engine's declarations;
- loading.py: reading the files, each alone (a broken one is set aside with its problem);
- scenario.py: a suite's matrix expanded into scenarios with stable ids, and selection;
- request.py: what a run was asked to do, typed (never an argparse Namespace);
- env.py: every HARNESS_* environment variable (the only module that reads them).

The project config (harness.toml / [tool.harness]) is read by harness/roots.py, beside
the paths it decides. Nothing is imported here: rank-side code imports config.env inside
an engine's interpreter, where the rest of this package (pydantic, the engines) must not load.
"""
