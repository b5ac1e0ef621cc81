"""Fake /proc + /sys trees for the machine-state checks (aaco.collectors.machine_state) and
``aaco doctor --root``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["fake_machine", "proc_stat"]

CPU = "sys/devices/system/cpu"


def proc_stat(busy: list[int], idle: list[int]) -> str:
    """A /proc/stat whose CPU N spent busy[N] ticks in user time and idle[N] idle."""
    lines = [f"cpu  {sum(busy)} 0 0 {sum(idle)} 0 0 0 0 0 0"]
    pairs = enumerate(zip(busy, idle, strict=True))
    lines += [f"cpu{i} {b} 0 0 {d} 0 0 0 0 0 0" for i, (b, d) in pairs]
    return "\n".join([*lines, "intr 0", "ctxt 0"]) + "\n"


def fake_machine(root: Path, **override: str | None) -> Path:
    """A tuned 4-CPU bare-metal machine under ``root``: CPUs 1-3 isolated, performance
    governor at a fixed 3 GHz, turbo off, no SMT, IRQs on CPU 0, ASLR full, perf sample rate
    1, on mains power, no swap, THP madvise. ``override`` maps a path relative to ``root``
    to new content, or None to remove the file."""
    files: dict[str, str] = {
        "proc/stat": proc_stat([100] * 4, [1000] * 4),
        "proc/loadavg": "0.05 0.03 0.01 1/100 4242",
        "proc/cmdline": "root=/dev/sda1 isolcpus=1-3 nohz_full=1-3 rcu_nocbs=1-3 quiet",
        "proc/sys/kernel/randomize_va_space": "2",
        "proc/sys/kernel/perf_event_max_sample_rate": "1",
        "proc/meminfo": "MemTotal: 16000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
        "proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu sse sse2 avx\n",
        "proc/irq/1/smp_affinity_list": "0",
        "proc/irq/9/smp_affinity_list": "0",
        f"{CPU}/online": "0-3",
        f"{CPU}/isolated": "1-3",
        f"{CPU}/smt/control": "notsupported",
        f"{CPU}/intel_pstate/no_turbo": "1",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never",
        "sys/class/power_supply/AC/type": "Mains",
        "sys/class/power_supply/AC/online": "1",
    }
    for cpu in range(4):
        files[f"{CPU}/cpu{cpu}/cpufreq/scaling_governor"] = "performance"
        files[f"{CPU}/cpu{cpu}/cpufreq/scaling_min_freq"] = "3000000"
        files[f"{CPU}/cpu{cpu}/cpufreq/scaling_max_freq"] = "3000000"
        files[f"{CPU}/cpu{cpu}/topology/thread_siblings_list"] = str(cpu)
    for rel, text in override.items():
        if text is None:
            files = {k: v for k, v in files.items() if not k.startswith(rel)}
        else:
            files[rel] = text
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    return root
