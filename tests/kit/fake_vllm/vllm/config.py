"""vllm.config.CompilationMode, as far as the repro script uses it."""

import enum


class CompilationMode(enum.IntEnum):
    NONE = 0
    VLLM_COMPILE = 3
