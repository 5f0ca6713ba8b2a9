"""A distributed correctness harness for LLM inference engines (see README.md, docs/DESIGN.md)."""

__version__ = "0.1.0"
