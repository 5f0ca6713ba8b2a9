"""A distributed correctness harness for LLM inference engines (see README.md, docs/DESIGN.md)."""

from harness.contract import torchvision_guard as _torchvision_guard

__version__ = "0.1.0"

# A torchvision whose C ops cannot load (PyPI's CUDA build beside a CPU torch) imports its
# Python parts, which transformers' processors use, without any file of it edited
_torchvision_guard.install()
