"""Reading a hung rank's faulthandler stack dump out of its log."""

from __future__ import annotations

import re

_THREAD_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')


def parse_stack_dump(text: str) -> tuple[str, str | None]:
    """Find the last faulthandler all-threads dump in `text`.

    Returns (dump text, innermost frame of the main thread as "file:line in func").
    faulthandler lists threads newest first, so the main thread is the last block.
    """
    lines = text.splitlines()
    # the dump starts at the first header of the last contiguous run of thread blocks
    headers = [i for i, ln in enumerate(lines) if _THREAD_HEADER.match(ln)]
    if not headers:
        return "", None
    start = headers[-1]
    for i in reversed(headers[:-1]):
        # contiguous: only frame lines / blank lines / "<no Python frame>" / "..." between
        between = lines[i + 1 : start]
        if all(not b.strip() or b.startswith("  ") for b in between):
            start = i
        else:
            break
    end = headers[-1] + 1
    while end < len(lines) and (lines[end].startswith("  ")):
        end += 1
    dump = "\n".join(lines[start:end])
    stuck = None
    for ln in lines[headers[-1] + 1 : end]:
        m = _FRAME.match(ln)
        if m:
            stuck = f"{m['file']}:{m['line']} in {m['func']}"
            break
    return dump, stuck
