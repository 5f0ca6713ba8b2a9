"""The harness's own settings, read by every room, so they sit at the bottom of the house:

- variables.py: every HARNESS_* environment variable, declared once (name, kind, default, what it
  does) and read only there; `harness env` lists them. Standard library only: rank-side
  code reads it inside an engine's interpreter.
- project.py: the project config (harness.toml or [tool.harness] in pyproject.toml), found
  upward from the working directory as pytest finds its rootdir.

What to RUN (scenario files, their schema and expansion, a run's request) is harness/inputs/scenarios/,
which stands on the engines and models; these two would make a circle with them there.
Nothing is imported here, for the same reason as variables.py's standard-library rule.
"""
