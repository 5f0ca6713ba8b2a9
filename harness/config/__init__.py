"""Configuration: what the user asked for, read and checked in one place.

- env.py: every HARNESS_* environment variable (the only module that reads them).

Nothing is imported here: rank-side code imports config.env inside an engine's
interpreter, where the rest of this package (pydantic, the engines) must not load.
"""
