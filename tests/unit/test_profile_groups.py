"""bench/results/profiles/groups.py: a sample goes to its innermost frame's group, and a flame graph SVG (either
orientation) gives back the folded stacks it was drawn from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _groups() -> ModuleType:
    spec = importlib.util.spec_from_file_location("profile_groups", ROOT / "bench/results/profiles/groups.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


groups = _groups()

LOOP = "run (asyncio/runners.py:118)"
WATCH = "_watch (multikueue/runtime/informer.py:257)"


def test_the_innermost_frame_that_names_a_group_takes_the_sample() -> None:
    deepcopy = (LOOP, WATCH, "deepcopy (copy.py:128)")
    assert groups.group(deepcopy) == groups.DEEP_COPIES
    assert groups.group((LOOP, WATCH)) == "informer store and handlers"
    assert groups.group((LOOP,)) == groups.EVENT_LOOP


def test_a_standard_library_helper_passes_its_sample_to_its_caller() -> None:
    assert groups.group((LOOP, WATCH, "__hash__ (<string>:3)", "uuid4 (uuid.py:723)")) == (
        "informer store and handlers"
    )


def test_the_compiled_codec_counts_as_json_and_its_caller_is_who_asked() -> None:
    stack = (LOOP, "watch (multikueue/kube/listwatch.py:46)", "decode (multikueue/kube/client.py:74)")
    assert groups.group(stack) == groups.JSON
    assert groups.callers({stack: 3}, groups.JSON) == {"watch (multikueue/kube/listwatch.py:46)": 3}


def _svg(rows: list[tuple[str, int, int, int]]) -> str:
    frames = "".join(
        f'<g><title>{title} ({w:,} samples, 1%)</title><rect x="0%" y="{y}" width="1%" height="15" fill="red" '
        f'fg:x="{x}" fg:w="{w}"/><text x="0%" y="{y + 10}"></text></g>'
        for title, y, x, w in rows
    )
    return f'<?xml version="1.0" standalone="no"?><svg><g id="frames" total_samples="1200">{frames}</g></svg>'


def test_a_flame_graph_in_either_orientation_gives_back_its_stacks(tmp_path: Path) -> None:
    folded = "a (m.py:1);b (m.py:2) 900\na (m.py:1) 100\nd (m.py:4);c (m.py:3) 150\nd (m.py:4) 50\n"
    # all (1200) = a (1000: b's 900 and its own 100) + d (200: c's 150 and its own 50); b and c each start where
    # their parent does, so each row's first frame is not the parent of every frame above it.
    frames = [("all", 0, 0, 1200), ("a (m.py:1)", 1, 0, 1000), ("d (m.py:4)", 1, 1000, 200),
              ("b (m.py:2)", 2, 0, 900), ("c (m.py:3)", 2, 1000, 150)]  # fmt: skip
    flame = _svg([(title, 100 - 16 * depth, x, w) for title, depth, x, w in frames])  # root at the bottom
    icicle = _svg([(title, 20 + 16 * depth, x, w) for title, depth, x, w in frames])  # root at the top
    paths = {}
    for name, text in (("folded.txt", folded), ("flame.svg", flame), ("icicle.svg", icicle)):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    expected = {
        ("a (m.py:1)", "b (m.py:2)"): 900, ("a (m.py:1)",): 100, ("d (m.py:4)", "c (m.py:3)"): 150, ("d (m.py:4)",): 50,
    }  # fmt: skip
    assert {name: groups.read(path) for name, path in paths.items()} == dict.fromkeys(paths, expected)
