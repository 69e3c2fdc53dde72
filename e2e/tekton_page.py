"""docs/tekton.md, the Tekton team's quick start, read as the commands it shows: the kind scenario runs its marked
blocks verbatim, and a unit test checks the rest against the suite's own set-up and the CLI, so the page cannot drift
from what is tested."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tekton.md"
BLOCK = re.compile(r"(?:<!-- run by the kind scenario: (\w+) -->\n)?```sh\n(.*?)```", re.S)


@dataclass(frozen=True)
class Block:
    mark: str | None  # the kind scenario's name for it; None: not run by a test, checked by tests/unit
    text: str

    def commands(self) -> list[list[str]]:
        """Each command's words: continuation lines joined, pipes and ``for``/``done`` lines split apart."""
        joined = self.text.replace("\\\n", " ")
        found = []
        for line in joined.splitlines():
            for part in line.split("|"):
                words = shlex.split(part)
                if words and words[0] not in ("for", "done"):
                    found.append(words)
        return found


def blocks(text: str | None = None) -> list[Block]:
    page = PAGE.read_text() if text is None else text
    return [Block(mark or None, body) for mark, body in BLOCK.findall(page)]


def marked(mark: str) -> Block:
    found = [b for b in blocks() if b.mark == mark]
    if len(found) != 1:
        raise LookupError(f"{PAGE.name} has {len(found)} blocks marked {mark!r}, expected one")
    return found[0]


def run(mark: str, kubectl: str, kubeconfig: Path, timeout: float = 900) -> str:
    """The marked block, as a user pastes it into bash at the repository's root: ``kubectl`` is the given program,
    the contexts come from ``kubeconfig``. Any failing command fails the block."""
    tools = ROOT / "build" / "tekton-page-bin"
    tools.mkdir(parents=True, exist_ok=True)
    link = tools / "kubectl"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(kubectl if os.path.isabs(kubectl) else _which(kubectl))
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", marked(mark).text], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"{PAGE.name}'s {mark} block failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def _which(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise FileNotFoundError(f"{program} is not on PATH")
    return found
