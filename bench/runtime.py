"""The dispatcher's own interpreter for benchmarks: a virtualenv with the project's runtime dependencies only.

The development virtualenv also holds the test and lint tools, and some of them change what the controller
imports (structlog loads ``rich`` and ``pygments`` for pretty tracebacks when they are installed: ~4 MiB). Memory
is measured as deployed: the image installs ``dependencies`` and nothing else. The virtualenv is cached by the
dependency list and the Python version in ~/.cache/multikueue/bench; the project itself comes from the checkout
(``python -m multikueue`` run from its root), so it is never stale.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "multikueue" / "bench"


def dependencies(checkout: Path) -> list[str]:
    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    return sorted(project["dependencies"])


def python(checkout: Path) -> str:
    """The runtime virtualenv's interpreter for ``checkout`` (built on first use: ~30 s, with pip's cache)."""
    wanted = dependencies(checkout)
    digest = hashlib.sha256("\n".join([sys.version, *wanted]).encode()).hexdigest()[:12]
    venv = CACHE / f"runtime-{digest}"
    interpreter = venv / "bin" / "python"
    if (venv / ".installed").exists():
        return str(interpreter)
    print(f"==> bench: a runtime virtualenv with the dispatcher's dependencies only ({venv})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", *wanted], check=True)
    (venv / ".installed").touch()
    return str(interpreter)
