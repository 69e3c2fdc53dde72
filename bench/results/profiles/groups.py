"""Where a py-spy profile's samples went, grouped into the cost centres of issue #46.

``python bench/results/profiles/groups.py PROFILE`` reads py-spy's ``--format raw`` output (folded stacks, one
``frame;frame;... count`` a line) or the flame graph SVG inferno made of it (every frame of at least one sample is
in it, so the stacks come back whole), and prints each group's samples and share, then who asked for the JSON, the
deep copies and the HTTP. A sample goes to the group of its innermost frame that names one: a ``copy.deepcopy`` inside
the informer counts as a deep copy, a ``json.loads`` inside the client as JSON. Standard-library helpers that say
nothing by themselves (dataclasses' generated methods, ``re``, ``weakref``, ``uuid``, ...) pass the sample on to
their caller. Compiled code has no Python frame: time in uvloop (sockets, epoll, callbacks, timers) shows as the
frame that runs the loop, time in orjson as kube/client.py's ``encode`` and ``decode`` (``CODEC``).
"""

from __future__ import annotations

import bisect
import html
import re
import sys
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")

JSON = "JSON decode/encode"
HTTP = "TLS/HTTP (aiohttp, ssl, yarl)"
DEEP_COPIES = "deep copies"
EVENT_LOOP = "event loop (uvloop, compiled: I/O, epoll, callbacks)"

_HTTP_FILES = ("aiohttp/", "ssl.py", "yarl/", "multidict/", "aiohappyeyeballs/", "socket.py", "http/", "aiolimiter/")
_INFORMER_FILES = ("multikueue/runtime/informer.py", "multikueue/runtime/watches.py", "multikueue/runtime/shared.py")

LIBRARIES: list[tuple[str, tuple[str, ...]]] = [
    (JSON, ("json/", "orjson", "msgspec")),
    (DEEP_COPIES, ("copy.py",)),
    ("logging (structlog)", ("structlog/", "logging/")),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
    ("patch building (jsonpatch, mergepatch)", ("jsonpatch", "jsonpointer", "multikueue/mergepatch.py")),
    ("jsonpath (adapter fields)", ("jsonpath_ng/", "ply/", "multikueue/jsonpaths.py")),
    (HTTP, _HTTP_FILES),
    ("kube/ client (own code)", ("multikueue/kube/",)),
    ("informer store and handlers", _INFORMER_FILES),
    ("work queue", ("multikueue/runtime/workqueue.py",)),
    ("controller loop (runtime/)", ("multikueue/runtime/",)),
    ("configuration (pydantic)", ("pydantic", "multikueue/config.py")),
    ("imports (start-up)", ("<frozen importlib", "importlib/")),
    ("anyio/asyncio task machinery", ("anyio/", "asyncio/", "sniffio/")),
]
"""(group, file prefixes), tried in order on each frame from the innermost out."""

TRANSPARENT = (
    "<string>", "re/", "weakref.py", "_weakrefset.py", "uuid.py", "contextlib.py", "dataclasses.py", "typing.py",
    "<frozen abc>", "functools.py", "enum.py", "inspect.py", "collections/", "abc.py", "random.py", "datetime.py",
    "base64.py", "hashlib.py", "types.py", "queue.py", "threading.py",
)  # fmt: skip
"""Standard-library helpers whose cost belongs to their caller."""

CODEC = {("multikueue/kube/client.py", "encode"), ("multikueue/kube/client.py", "decode")}
"""Functions whose own time (as the innermost frame) is a compiled JSON codec's."""


def _parse(frame: str) -> tuple[str, str]:
    match = FRAME.match(frame)
    return (match["function"], match["file"]) if match else (frame, "")


def _is_codec(frame: str) -> bool:
    function, file = _parse(frame)
    return (file, function) in CODEC


def _library(file: str) -> str | None:
    for name, prefixes in LIBRARIES:
        if file.startswith(prefixes):
            return name
    if file.startswith("multikueue/"):
        return f"reconcile logic: {file.removesuffix('.py')}"
    return None


def group(stack: tuple[str, ...]) -> str:
    """The group of one sample, from its frames (outermost first)."""
    if _parse(stack[-1]) == ("run", "asyncio/runners.py"):
        return EVENT_LOOP
    if _is_codec(stack[-1]):
        return JSON
    for frame in reversed(stack):
        _, file = _parse(frame)
        if not file or file.startswith(TRANSPARENT):
            continue
        return _library(file) or f"other: {file.split('/')[0]}"
    return "other"


def callers(stacks: dict[tuple[str, ...], int], wanted: str) -> Counter[str]:
    """For the samples of group ``wanted``: the innermost project frame above it (who asked)."""
    out: Counter[str] = Counter()
    for stack, count in stacks.items():
        if group(stack) != wanted:
            continue
        own = [f for f in stack if "(multikueue/" in f and "multikueue/mergepatch.py" not in f]
        if own and _is_codec(own[-1]):
            own.pop()  # the codec's own frame: who called it
        out[own[-1] if own else "(none)"] += count
    return out


SVG_FRAME = re.compile(r'<g><title>(?P<title>[^<]*) \([\d,]+ samples?, [^)]*\)</title><rect [^>]*?y="(?P<y>\d+)"'
                       r'[^>]*?fg:x="(?P<x>\d+)" fg:w="(?P<w>\d+)"')  # fmt: skip


def read(path: Path) -> dict[tuple[str, ...], int]:
    """Folded stacks (outermost frame first) and their samples, from folded text or a flame graph SVG."""
    text = path.read_text()
    if text.lstrip().startswith("<?xml"):
        return _unfold_svg(text)
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks[tuple(frames.split(";"))] += int(count)
    return dict(stacks)


def _rows_from_root(text: str) -> list[list[tuple[int, int, str]]]:
    """The flame graph's rows of frames, (x, width, frame) each, from the root row ("all": the lowest in inferno's
    flame graphs, the highest in py-spy's icicles) outwards."""
    rows: dict[int, list[tuple[int, int, str]]] = {}
    for m in SVG_FRAME.finditer(text):
        rows.setdefault(int(m["y"]), []).append((int(m["x"]), int(m["w"]), html.unescape(m["title"])))
    root = next(y for y, frames in rows.items() if ("all" in (frame for _, _, frame in frames)))
    return [sorted(rows[y]) for y in sorted(rows, key=lambda y: abs(y - root))]


def _unfold_svg(text: str) -> dict[tuple[str, ...], int]:
    """A flame graph's rectangles back into stacks: a frame's parent is the one a row nearer the root whose samples
    span it; its own samples are its width less its children's."""
    stacks: dict[tuple[str, ...], int] = {}
    starts: list[int] = []  # the row nearer the root: where each frame starts, sorted, and its stack
    below: list[tuple[str, ...]] = []
    for row in _rows_from_root(text):
        placed = [() if frame == "all" else (*below[bisect.bisect_right(starts, x) - 1], frame) for x, _, frame in row]
        for (_, width, _), stack in zip(row, placed, strict=True):
            stacks[stack] = width
            if stack:
                stacks[stack[:-1]] -= width
        starts, below = [x for x, _, _ in row], placed
    return {stack: count for stack, count in stacks.items() if stack and count > 0}


def main(path: str) -> None:
    stacks = read(Path(path))
    total = sum(stacks.values())
    groups: Counter[str] = Counter()
    for stack, count in stacks.items():
        groups[group(stack)] += count
    print(f"{total} samples")
    for name, count in sorted(groups.items(), key=lambda item: (-item[1], item[0])):
        print(f"{100 * count / total:5.1f} %  {count:6d}  {name}")
    for wanted in (JSON, DEEP_COPIES, HTTP):
        print(f"\n{wanted}, by the project frame that asked:")
        for frame, count in sorted(callers(stacks, wanted).items(), key=lambda item: (-item[1], item[0]))[:8]:
            print(f"{100 * count / total:5.1f} %  {count:6d}  {frame}")


if __name__ == "__main__":
    main(sys.argv[1])
