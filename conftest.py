# Scenario files collect as pytest items (`pytest scenarios/ -m pr -n 2`): see harness/pytest_plugin.py.
pytest_plugins = ["harness.pytest_plugin"]
