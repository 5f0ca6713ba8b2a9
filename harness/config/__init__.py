"""Configuration: what the user asked for, read and checked in one place, flowing one way
(schema -> binding -> loading -> scenarios -> a run's request) into the rest of the harness.

- schema.py: what a scenario file may say, checked without any engine;
- binding.py: a suite's axes, values and fault names against its engine's declarations;
- loading.py: reading the files, each alone (a broken one is set aside with its problem),
  through yamlfile.py (a bounded YAML reader: size, nesting, aliases);
- scenario.py: a suite's matrix expanded into scenarios with stable ids, and selection;
- request.py: what a run was asked to do, typed (never an argparse Namespace);
- env.py: every HARNESS_* environment variable (the only module that reads them);
- project.py: the project config (harness.toml or [tool.harness]), found upward from the working directory.

harness/roots.py turns the project config into the places the harness reads and writes.
Nothing is imported here: rank-side code imports config.env inside an engine's
interpreter, where the rest of this package (pydantic, the engines) must not load.
"""
