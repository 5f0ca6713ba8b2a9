"""Reading a user's YAML file with bounds (a scenario file, an engine's known-bugs file): such a
file is small, and a file that is not (a symlink to /dev/zero, a FIFO, an alias bomb, a list
nested 100 000 deep) is refused with its name and why, before it can take the machine's memory
or the interpreter's stack.

- only a regular file is opened (a FIFO would block the open, a device never ends);
- at most MAX_BYTES are read;
- nesting deeper than MAX_DEPTH is refused while composing (before Python's recursion limit);
- the document's size with every alias expanded is at most MAX_NODES (aliases are shared
  references when loaded, but anything that copies or walks the result pays the expansion).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

# far above any real scenario file: a wrong path to a big file is refused, not read
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 200_000


class YamlFileError(ValueError):
    """A file that is not a bounded YAML document; the message names the file."""


def read_bounded(path: Path, what: str = "a scenario file") -> str:
    """The text of a regular file of at most MAX_BYTES; `what` the file is, for the messages."""
    try:
        # follows a symlink: what it points at is what would be read
        info = path.stat()
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise YamlFileError(f"{path}: not a regular file ({_kind(info.st_mode)}); {what} is a YAML file")
    if info.st_size > MAX_BYTES:
        raise YamlFileError(f"{path}: {info.st_size} bytes, more than {what} may have ({MAX_BYTES})")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise YamlFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise YamlFileError(f"{path}: more than {MAX_BYTES} bytes (it grew while read)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


try:
    from yaml import CSafeLoader

    _FastLoader = CSafeLoader  # a name of this module's own (tests read it), not an import
except ImportError:
    # PyYAML built without libyaml: the pure-Python loader then does all the work
    _FastLoader = None


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no stubs here: SafeLoader is Any
    """PyYAML's safe loader, refusing nesting deeper than MAX_DEPTH as it composes."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlFileError(f"nested more than {MAX_DEPTH} levels deep (line {self.peek_event().start_mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """Nodes in the document with every alias expanded, each shared node counted once per use."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    # capped: the sum of a bomb's levels stays a small int
    sizes[id(node)] = min(size, MAX_NODES + 1)
    return sizes[id(node)]


def _too_deep(text: str) -> int | None:
    """The line of the first node nested deeper than MAX_DEPTH (the root is at depth 1),
    from libyaml's event stream: its composer recurses in C, and a list nested 100 000 deep
    would take the process down before a node tree could be checked."""
    loader = _FastLoader(text)
    try:
        open_collections = 0
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                if open_collections + 1 > MAX_DEPTH:
                    line: int = event.start_mark.line + 1
                    return line
                if isinstance(event, yaml.CollectionStartEvent):
                    open_collections += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                open_collections -= 1
        return None
    finally:
        loader.dispose()


def _construct(loader: Any) -> Any:
    """The document `loader` holds, once its size with aliases expanded is within the bound."""
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_NODES:
            raise YamlFileError(f"more than {MAX_NODES} values with its aliases expanded (an alias bomb?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _parse_fast(text: str) -> Any:
    """libyaml's parser (far faster than PyYAML's, which each command pays for every suite file;
    docs/BENCHMARKS.md has the times):
    the depth is checked on its events, the alias expansion on its node tree, before
    anything is built from it. Raises yaml.YAMLError for what it cannot parse; the caller
    then asks the pure-Python loader, whose messages name the line and the bound."""
    deep = _too_deep(text)
    if deep is not None:
        raise YamlFileError(f"nested more than {MAX_DEPTH} levels deep (line {deep})")
    return _construct(_FastLoader(text))


def parse_bounded(text: str, path: Path) -> Any:
    """The YAML document in `text`, within the bounds; errors name `path`."""
    try:
        if _FastLoader is not None:
            try:
                return _parse_fast(text)
            except yaml.YAMLError:
                pass  # the pure-Python loader below says what is wrong
        return _construct(_BoundedLoader(text))
    except YamlFileError as exc:
        raise YamlFileError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise YamlFileError(f"{path}: not valid YAML: {exc}") from None


def load_bounded(path: Path, what: str = "a scenario file") -> Any:
    path = Path(path)
    return parse_bounded(read_bounded(path, what), path)
