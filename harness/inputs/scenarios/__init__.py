"""Configuration of what to run: the user's scenario files read, checked and expanded in
one place, flowing one way (read -> schema -> binding -> scenarios) into
the rest of the harness.

- schema.py: what a scenario file may say, checked without any engine;
- binding.py: a suite's axes, values and fault names against its engine's declarations;
- loading.py: reading the files, each alone (a broken one is set aside with its problem);
- scenario.py: a suite's matrix expanded into scenarios with stable ids, and selection.

A file is read within bounds (size, nesting, aliases) by harness/contract/yamlfile.py, which
the engines' known-bugs files share. The harness's own settings (every HARNESS_* variable, the project config) are
harness/contract/settings/: read by the launcher and the engines too, they sit at the bottom.
What a run is asked to do (RunConfig) is harness/run/request.py, beside its users.
"""
