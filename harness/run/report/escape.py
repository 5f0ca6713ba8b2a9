"""Markdown made safe for text the harness does not control (exception messages, ids,
engine output): prose on one line, inline code spans and fenced blocks that no backtick,
pipe or angle bracket inside can break. Every Markdown writer of the report uses these.
"""

from __future__ import annotations

import re


def text(s: object) -> str:
    """Prose: one line, HTML escaped (GitHub shows `&lt;` as `<`); backslashes, backticks
    and pipes too, so it opens no code span (one would end inside a `code` span further on,
    letting its text out) and splits no table cell."""
    s = " ".join(str(s).splitlines())
    for c in "\\`|":
        s = s.replace(c, "\\" + c)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(s: object, cell: bool = False) -> str:
    """An inline code span of s as is (CommonMark: a fence longer than any backtick run
    inside, padded with a space where s starts or ends with a backtick or a space); `cell`:
    inside a table row, where a `|` would end the cell even in a code span."""
    s = " ".join(str(s).splitlines())
    if cell:
        s = s.replace("|", "\\|")
    # spaces only are kept as they are; `` would be no code span at all
    if not s.strip(" "):
        return f"`{s or ' '}`"
    fence = "`" * (max(map(len, re.findall("`+", s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def block(s: str) -> str:
    """A fenced code block of s (a traceback): its fence longer than any backtick run inside."""
    fence = "`" * max(3, max(map(len, re.findall("`+", s)), default=0) + 1)
    return f"{fence}\n{s}\n{fence}"
