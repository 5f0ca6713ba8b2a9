"""Maintenance tools run from the repository root (`python -m tools.<name>`), not part
of the installed harness: train_models rebuilds the shipped trained weights."""
