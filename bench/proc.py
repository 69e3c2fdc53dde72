"""CPU time and memory of a process, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (every thread's: a Go program's too)."""
    return cpu_seconds_from_stat(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def cpu_seconds_from_stat(stat: str, ticks_per_second: int) -> float:
    """utime + stime of a /proc/<pid>/stat line, in seconds. The command name (field 2, in parentheses) may hold
    spaces and parentheses itself, so the fields are counted from its last closing parenthesis."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def per_thousand(seconds: float, runs: int) -> float:
    """CPU seconds per 1,000 runs: what a dispatcher costs, comparable across runs of different N."""
    if runs <= 0:
        raise ValueError(f"runs: {runs}, must be positive")
    return 1000 * seconds / runs


def memory(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) in bytes."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":", 1) for line in lines if ":" in line)
    return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (every core, every process) since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
