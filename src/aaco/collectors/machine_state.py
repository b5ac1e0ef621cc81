"""How ready this machine is for stable measurement: what ``pyperf system show`` checks and a
few more, read from ``/proc`` and ``/sys`` (never written), each check a :class:`Check` with
the command that fixes it.

Every reader takes ``root`` (``/`` on a real machine), so the tests run the checks over a
fake ``/proc`` + ``/sys`` tree. Nothing here changes a system setting: the fixes are commands
for the user to run (``pyperf system tune`` would apply them; AACO leaves that to the user,
since each needs root and some outlive the run).

>>> checks = check_machine(cpus=(1,))                           # doctest: +SKIP
>>> [(c.name, c.state) for c in checks if c.state != "ok"]     # doctest: +SKIP
[('cpu_governor', 'unknown'), ('virtualization', 'warning'), ...]

States: ``ok``; ``warning`` (a source of noise: the fix makes runs steadier); ``error`` (this
run will be disturbed: the CPUs to measure on are busy with other work, or the machine runs
on battery); ``unknown`` (the file that says is absent or unreadable: ``detail`` says which).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CHECKS",
    "STATES",
    "Check",
    "CpuSample",
    "Machine",
    "check_machine",
    "format_cpu_list",
    "is_ready",
    "parse_cpu_list",
    "read_cpu_times",
    "sample_cpus",
]

OK, WARNING, ERROR, UNKNOWN = "ok", "warning", "error", "unknown"
STATES = (OK, WARNING, ERROR, UNKNOWN)

#: a CPU to measure on that other work kept busier than this during the sample: an error
BUSY_ERROR = 0.5
#: ... busier than this: a warning
BUSY_WARNING = 0.1
#: a 1-minute load average above this many runnable tasks per CPU: a warning
LOAD_WARNING = 0.5

_CPU = "sys/devices/system/cpu"
#: the flags ``isolcpus=`` may carry before its CPU list
_ISOLCPUS_FLAGS = ("domain", "nohz", "managed_irq")


# -- CPU lists ---------------------------------------------------------------------------------


#: the kernel's largest CONFIG_NR_CPUS: no CPU number reaches it
MAX_CPUS = 8192


def _ascii_number(text: str) -> bool:
    """Digits 0-9 only (``str.isdigit`` also takes ``²`` and other scripts' digits)."""
    return bool(text) and text.isascii() and text.isdigit()


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """A kernel CPU list (``0-3,5,8-9``; the format of ``/sys/.../online``, ``isolcpus=``
    and ``--cpus``) as sorted CPU numbers; flags such as ``isolcpus=domain,2-3``'s are
    skipped. A ValueError for anything else.

    >>> parse_cpu_list("0-2,5")
    (0, 1, 2, 5)
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part or part in _ISOLCPUS_FLAGS:
            continue
        lo, sep, hi = part.partition("-")
        if not _ascii_number(lo) or (sep and not _ascii_number(hi)):
            raise ValueError(f"not a CPU list: {text.strip()!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"not a CPU list: {text.strip()!r} ({part} runs backwards)")
        if last >= MAX_CPUS:
            # checked before the range is expanded: 0-999999999 is not a set to build
            raise ValueError(f"CPU {last} is out of range (Linux numbers CPUs below {MAX_CPUS})")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPU numbers in the kernel's list format (``0-3,5``); ``""`` for none."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


# -- the records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One check of the machine: ``name`` (a stable key), ``title`` (for people), ``state``
    (one of :data:`STATES`), ``value`` (what was seen), ``detail`` (why it matters, or why
    the state is unknown), ``fix`` (the command that fixes it, where one makes sense) and
    ``source`` (the files read)."""

    name: str
    title: str
    state: str
    value: str | None
    detail: str = ""
    fix: str | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"check {self.name}: state {self.state!r} is not one of {STATES}")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "state": self.state,
            "value": self.value,
            "detail": self.detail,
            "fix": self.fix,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Check:
        return cls(
            name=str(d["name"]),
            title=str(d.get("title") or d["name"]),
            state=str(d["state"]),
            value=d.get("value"),
            detail=str(d.get("detail") or ""),
            fix=d.get("fix"),
            source=str(d.get("source") or ""),
        )


@dataclass(frozen=True)
class CpuSample:
    """How busy each CPU was over a short interval, and the busiest other processes.

    ``busy``: CPU number -> share of the interval not idle (0-1), None when no time passed
    between the two readings (a copied ``/proc``). ``top``: (pid, command, share of one
    CPU) of the busiest processes other than the sampling one, busiest first.
    """

    interval_s: float
    busy: dict[int, float | None]
    top: tuple[tuple[int, str, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "busy": {str(c): (None if b is None else round(b, 4)) for c, b in self.busy.items()},
            "top": [{"pid": p, "command": c, "cpu_share": round(s, 4)} for p, c, s in self.top],
        }


# -- readers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """What the checks read: the file tree under ``root``, the CPUs a run is pinned to
    (``cpus``; None: not pinned) and a CPU sample taken just before (``sample``)."""

    root: Path = Path("/")
    cpus: tuple[int, ...] | None = None
    sample: CpuSample | None = None
    _cache: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> str | None:
        """The stripped text of ``root/rel``; None when absent or unreadable."""
        if rel not in self._cache:
            try:
                self._cache[rel] = self.path(rel).read_text(errors="replace").strip()
            except OSError:
                self._cache[rel] = None
        return self._cache[rel]

    def why_missing(self, rel: str) -> str:
        """Why :meth:`read` gave None: absent, or present but unreadable."""
        p = self.path(rel)
        return f"/{rel} is not readable" if p.exists() else f"/{rel} does not exist"

    def online_cpus(self) -> tuple[int, ...]:
        """The online CPUs (``/sys/devices/system/cpu/online``, else the ``cpuN`` folders,
        else ``os.cpu_count()``)."""
        text = self.read(f"{_CPU}/online")
        if text:
            try:
                return parse_cpu_list(text)
            except ValueError:
                pass
        try:
            found = sorted(
                int(p.name[3:])
                for p in self.path(_CPU).iterdir()
                if p.name[3:].isdigit() and p.name.startswith("cpu")
            )
        except OSError:
            found = []
        return tuple(found) or tuple(range(os.cpu_count() or 1))

    def target_cpus(self) -> tuple[int, ...]:
        """The CPUs the checks are about: the pinned ones, else every online CPU."""
        return self.cpus if self.cpus else self.online_cpus()

    def isolated_cpus(self) -> tuple[int, ...]:
        """CPUs the kernel keeps other tasks off (``isolcpus=``): ``/sys/.../isolated``,
        else the command line's ``isolcpus=``."""
        text = self.read(f"{_CPU}/isolated")
        if text is None:
            text = self.cmdline_param("isolcpus") or ""
        try:
            return parse_cpu_list(text)
        except ValueError:
            return ()

    def cmdline_param(self, name: str) -> str | None:
        """The value of ``name=`` on the kernel command line (``/proc/cmdline``)."""
        match = re.search(rf"(?:^|\s){re.escape(name)}=(\S+)", self.read("proc/cmdline") or "")
        return match.group(1) if match else None

    def siblings(self, cpu: int) -> tuple[int, ...]:
        """The logical CPUs sharing ``cpu``'s core (itself included; SMT siblings)."""
        text = self.read(f"{_CPU}/cpu{cpu}/topology/thread_siblings_list")
        try:
            return parse_cpu_list(text) if text else (cpu,)
        except ValueError:
            return (cpu,)


def read_cpu_times(root: Path = Path("/")) -> dict[int, tuple[int, int]]:
    """Per CPU, (busy, total) clock ticks since boot from ``/proc/stat``; busy is all but
    idle and iowait (guest time is already inside user and nice)."""
    out: dict[int, tuple[int, int]] = {}
    try:
        text = (root / "proc/stat").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        ticks = [int(x) for x in rest.split()[:8]]
        total = sum(ticks)
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        out[int(name[3:])] = (total - idle, total)
    return out


def _process_times(root: Path, skip: set[int]) -> dict[int, tuple[str, int]]:
    """pid -> (command, user + system clock ticks) of every process in ``root/proc``."""
    out: dict[int, tuple[str, int]] = {}
    try:
        entries = list((root / "proc").iterdir())
    except OSError:
        return out
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # the process ended
        head, _, tail = text.rpartition(")")
        fields = tail.split()
        if len(fields) < 13 or "(" not in head:
            continue
        # after "(comm)": state is field 3, utime 14 and stime 15 of proc(5)
        out[int(entry.name)] = (head.partition("(")[2], int(fields[11]) + int(fields[12]))
    return out


def sample_cpus(
    root: Path = Path("/"),
    interval_s: float = 0.2,
    *,
    sleep: Callable[[float], None] = time.sleep,
    exclude: Iterable[int] = (),
    top: int = 3,
) -> CpuSample:
    """How busy each CPU and the busiest processes were over ``interval_s`` (two readings
    of ``/proc/stat`` and ``/proc/PID/stat``); ``exclude`` are pids left out of ``top``
    (this process is always). ``sleep`` is injectable for tests."""
    skip = {os.getpid(), *exclude}
    cpus0, procs0 = read_cpu_times(root), _process_times(root, skip)
    sleep(interval_s)
    cpus1, procs1 = read_cpu_times(root), _process_times(root, skip)
    busy: dict[int, float | None] = {}
    total_ticks: list[int] = []
    for cpu, (b1, t1) in sorted(cpus1.items()):
        b0, t0 = cpus0.get(cpu, (b1, t1))
        total_ticks.append(t1 - t0)
        busy[cpu] = (b1 - b0) / (t1 - t0) if t1 > t0 else None
    # a process's ticks over the CPU ticks of one CPU in the same interval: its share
    per_cpu = (sum(total_ticks) / len(total_ticks)) if total_ticks else 0.0
    shares = []
    if per_cpu > 0:
        for pid, (comm, ticks) in procs1.items():
            if pid in procs0 and procs0[pid][0] == comm and ticks > procs0[pid][1]:
                shares.append((pid, comm, (ticks - procs0[pid][1]) / per_cpu))
    shares.sort(key=lambda s: -s[2])
    return CpuSample(interval_s, busy, tuple(s for s in shares[:top] if s[2] >= 0.05))


# -- the checks ---------------------------------------------------------------------------------


def _each_cpu(m: Machine, leaf: str) -> dict[int, str]:
    """``cpuN/cpufreq/<leaf>`` of each target CPU that has one."""
    found: dict[int, str] = {}
    for cpu in m.target_cpus():
        text = m.read(f"{_CPU}/cpu{cpu}/cpufreq/{leaf}")
        if text:
            found[cpu] = text
    return found


def _by_value(values: Mapping[int, str]) -> str:
    """``performance on CPU 0-3; powersave on CPU 4``."""
    groups: dict[str, list[int]] = {}
    for cpu, v in values.items():
        groups.setdefault(v, []).append(cpu)
    return "; ".join(f"{v} on CPU {format_cpu_list(c)}" for v, c in groups.items())


def _cpu_option(m: Machine) -> str:
    return f" -c {format_cpu_list(m.cpus)}" if m.cpus else ""


_NO_CPUFREQ = (
    "no cpufreq interface (a VM, a container or no cpufreq driver): the frequency is out of "
    "reach from here"
)


def check_cpu_governor(m: Machine) -> Check:
    """Every target CPU's cpufreq governor is ``performance``."""
    title, source = "CPU scaling governor", f"/{_CPU}/cpuN/cpufreq/scaling_governor"
    found = _each_cpu(m, "scaling_governor")
    if not found:
        return Check("cpu_governor", title, UNKNOWN, None, _NO_CPUFREQ, source=source)
    if all(v == "performance" for v in found.values()):
        return Check("cpu_governor", title, OK, _by_value(found), source=source)
    return Check(
        "cpu_governor",
        title,
        WARNING,
        _by_value(found),
        "a governor other than performance lowers the clock when the load drops and raises it "
        "with a delay: the first iterations after an idle moment run slower",
        f"sudo cpupower{_cpu_option(m)} frequency-set -g performance",
        source,
    )


def check_turbo(m: Machine) -> Check:
    """Turbo Boost / Core Performance Boost is off."""
    title = "Turbo boost"
    detail = (
        "with turbo on, the clock depends on temperature and on how many cores are busy: the "
        "same run is faster on a cool, idle machine"
    )
    no_turbo = m.read(f"{_CPU}/intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        source = f"/{_CPU}/intel_pstate/no_turbo"
        if no_turbo == "1":
            return Check("turbo", title, OK, "disabled (intel_pstate no_turbo=1)", source=source)
        return Check(
            "turbo",
            title,
            WARNING,
            "enabled (intel_pstate no_turbo=0)",
            detail,
            f"echo 1 | sudo tee {source}",
            source,
        )
    boost = m.read(f"{_CPU}/cpufreq/boost")
    if boost in ("0", "1"):
        source = f"/{_CPU}/cpufreq/boost"
        if boost == "0":
            return Check("turbo", title, OK, "disabled (cpufreq boost=0)", source=source)
        return Check(
            "turbo",
            title,
            WARNING,
            "enabled (cpufreq boost=1)",
            detail,
            f"echo 0 | sudo tee {source}",
            source,
        )
    return Check(
        "turbo",
        title,
        UNKNOWN,
        None,
        "neither intel_pstate/no_turbo nor cpufreq/boost exists (a VM, or a frequency driver "
        "without a boost switch)",
        source=f"/{_CPU}/intel_pstate/no_turbo, /{_CPU}/cpufreq/boost",
    )


def check_smt(m: Machine) -> Check:
    """Simultaneous multithreading (Hyper-Threading) is off, or absent."""
    title, rel = "SMT (Hyper-Threading)", f"{_CPU}/smt/control"
    control = m.read(rel)
    if control is None:
        return Check("smt", title, UNKNOWN, None, m.why_missing(rel), source=f"/{rel}")
    if control in ("off", "forceoff", "notsupported", "notimplemented"):
        value = "no SMT on this CPU" if control.startswith("not") else control
        return Check("smt", title, OK, value, source=f"/{rel}")
    shared = sorted({s for c in m.target_cpus() for s in m.siblings(c)} - set(m.target_cpus()))
    value = control + (f" (CPU {format_cpu_list(shared)} share cores with them)" if shared else "")
    return Check(
        "smt",
        "SMT (Hyper-Threading)",
        WARNING,
        value,
        "a sibling hardware thread shares the core's execution units and caches: work on it "
        "slows the measured CPU (or pin to one CPU per core and leave the siblings idle)",
        f"echo off | sudo tee /{rel}",
        f"/{rel}",
    )


_ASLR = {"0": "no randomization", "1": "conservative randomization", "2": "full randomization"}


def check_aslr(m: Machine) -> Check:
    """Address space layout randomization is full (2), as pyperf advises."""
    title, rel = "ASLR", "proc/sys/kernel/randomize_va_space"
    value = m.read(rel)
    if value not in _ASLR:
        return Check("aslr", title, UNKNOWN, value, m.why_missing(rel), source=f"/{rel}")
    if value == "2":
        return Check("aslr", title, OK, _ASLR[value], source=f"/{rel}")
    return Check(
        "aslr",
        title,
        WARNING,
        _ASLR[value],
        "without randomization every run gets one memory layout, and a layout that happens to "
        "be slow (or fast) looks like a property of the model; with it, runs pooled by --repeat "
        "average over layouts (pyperf's advice too)",
        f"echo 2 | sudo tee /{rel}",
        f"/{rel}",
    )


def check_cpu_isolation(m: Machine) -> Check:
    """The pinned CPUs are isolated from the scheduler (``isolcpus``), with no timer tick
    (``nohz_full``) and no RCU callbacks (``rcu_nocbs``)."""
    title = "CPU isolation"
    source = f"/{_CPU}/isolated, /proc/cmdline"
    isolated = set(m.isolated_cpus())
    params: dict[str, set[int]] = {}
    for name in ("nohz_full", "rcu_nocbs"):
        try:
            params[name] = set(parse_cpu_list(m.cmdline_param(name) or ""))
        except ValueError:
            params[name] = set()
    value = ", ".join(
        f"{k}={format_cpu_list(v) or '-'}" for k, v in (("isolated", isolated), *params.items())
    )
    online = m.online_cpus()
    if len(online) < 2:
        return Check("cpu_isolation", title, OK, value, "one CPU: nothing to isolate", None, source)
    want = format_cpu_list(m.cpus) if m.cpus else format_cpu_list(online[1:])
    grub = (
        f"add 'isolcpus={want} nohz_full={want} rcu_nocbs={want}' to GRUB_CMDLINE_LINUX in "
        "/etc/default/grub, then sudo update-grub and reboot"
    )
    if not isolated:
        return Check(
            "cpu_isolation",
            title,
            WARNING,
            value,
            "no CPU is isolated: the scheduler may put any task on the measured CPUs",
            grub,
            source,
        )
    if m.cpus and not set(m.cpus) <= isolated:
        return Check(
            "cpu_isolation",
            title,
            WARNING,
            value,
            f"CPU {format_cpu_list(set(m.cpus) - isolated)} to measure on is not isolated",
            f"aaco run --isolate --cpus {format_cpu_list(isolated)}",
            source,
        )
    target = set(m.cpus) if m.cpus else isolated
    missing = [k for k, v in params.items() if not target <= v]
    if missing:
        return Check(
            "cpu_isolation",
            title,
            WARNING,
            value,
            f"isolated, but {' and '.join(missing)} does not cover them: the timer tick or "
            "RCU callbacks still interrupt them",
            grub,
            source,
        )
    return Check("cpu_isolation", title, OK, value, source=source)


def check_irq_affinity(m: Machine) -> Check:
    """No interrupt is routed to the pinned CPUs."""
    title, source = "IRQ affinity", "/proc/irq/*/smp_affinity_list"
    try:
        irqs = sorted((p for p in m.path("proc/irq").iterdir() if p.name.isdigit()), key=_num)
    except OSError:
        return Check("irq_affinity", title, UNKNOWN, None, m.why_missing("proc/irq"), source=source)
    if not m.cpus:
        return Check(
            "irq_affinity",
            title,
            UNKNOWN,
            f"{len(irqs)} IRQs",
            "no CPUs pinned: give the CPUs to measure on (--cpus) to check IRQs against them",
            source=source,
        )
    pinned = set(m.cpus)
    hitting: list[str] = []
    readable = 0
    for irq in irqs:
        text = m.read(f"proc/irq/{irq.name}/smp_affinity_list")
        if text is None:
            continue
        readable += 1
        try:
            if pinned & set(parse_cpu_list(text)):
                hitting.append(irq.name)
        except ValueError:
            continue
    if not readable:
        return Check(
            "irq_affinity",
            title,
            UNKNOWN,
            f"{len(irqs)} IRQs",
            "no /proc/irq/N/smp_affinity_list could be read",
            source=source,
        )
    if not hitting:
        value = f"no IRQ routed to CPU {format_cpu_list(pinned)}"
        return Check("irq_affinity", title, OK, value, source=source)
    others = format_cpu_list(set(m.online_cpus()) - pinned)
    fix = (
        "sudo systemctl stop irqbalance; for f in /proc/irq/[0-9]*/smp_affinity_list; do "
        f"echo {others} | sudo tee $f; done"
        if others
        else None
    )
    return Check(
        "irq_affinity",
        title,
        WARNING,
        f"{len(hitting)} of {readable} IRQs may run on CPU {format_cpu_list(pinned)}",
        "an interrupt handled on a measured CPU stops the model for its duration"
        + ("" if others else "; every CPU is pinned, so none is left to route them to"),
        fix,
        source,
    )


def _num(p: Path) -> int:
    return int(p.name)


def check_perf_event(m: Machine) -> Check:
    """The perf profiler's sample rate is at its minimum (1/s), as pyperf sets it."""
    title, rel = "perf event sample rate", "proc/sys/kernel/perf_event_max_sample_rate"
    text = m.read(rel)
    if text is None or not text.isdigit():
        return Check("perf_event", title, UNKNOWN, text, m.why_missing(rel), source=f"/{rel}")
    rate = int(text)
    if rate <= 1:
        return Check("perf_event", title, OK, f"{rate} per second", source=f"/{rel}")
    return Check(
        "perf_event",
        title,
        WARNING,
        f"{rate} per second",
        "a perf session running beside the measurement may interrupt it this often",
        f"echo 1 | sudo tee /{rel}",
        f"/{rel}",
    )


def check_cpu_frequency(m: Machine) -> Check:
    """The pinned CPUs' minimum and maximum frequencies are the same (a fixed clock)."""
    title, source = "CPU frequency min/max", f"/{_CPU}/cpuN/cpufreq/scaling_{{min,max}}_freq"
    mins, maxs = _each_cpu(m, "scaling_min_freq"), _each_cpu(m, "scaling_max_freq")
    cpus = sorted(set(mins) & set(maxs))
    if not cpus:
        return Check("cpu_frequency", title, UNKNOWN, None, _NO_CPUFREQ, source=source)
    try:
        ranges = {c: (int(mins[c]) // 1000, int(maxs[c]) // 1000) for c in cpus}
    except ValueError:
        return Check("cpu_frequency", title, UNKNOWN, None, "unreadable frequencies", None, source)
    value = _by_value(
        {
            c: f"min=max={hi} MHz" if lo == hi else f"min={lo} MHz, max={hi} MHz"
            for c, (lo, hi) in ranges.items()
        }
    )
    if all(lo == hi for lo, hi in ranges.values()):
        return Check("cpu_frequency", title, OK, value, source=source)
    top = max(hi for _, hi in ranges.values())
    return Check(
        "cpu_frequency",
        title,
        WARNING,
        value,
        "the clock moves between min and max with the load",
        f"sudo cpupower{_cpu_option(m)} frequency-set -d {top}MHz -u {top}MHz",
        source,
    )


def check_load(m: Machine) -> Check:
    """Other work on the machine: the load average and, from the CPU sample, how busy the
    CPUs to measure on were and which processes kept them busy."""
    title, source = "Load and busy processes", "/proc/loadavg, /proc/stat, /proc/PID/stat"
    loadavg = m.read("proc/loadavg")
    online = m.online_cpus()
    parts: list[str] = []
    state = OK
    load1: float | None = None
    if loadavg:
        try:
            load1 = float(loadavg.split()[0])
            parts.append(f"load {load1:.2f} (1 min) on {len(online)} CPUs")
        except (ValueError, IndexError):
            load1 = None
    if load1 is not None and load1 > LOAD_WARNING * len(online):
        state = WARNING
    busiest: float | None = None
    if m.sample is not None:
        target = m.target_cpus()
        seen = {c: b for c, b in m.sample.busy.items() if c in target and b is not None}
        if seen:
            busiest = max(seen.values())
            parts.append(
                "busy over "
                f"{m.sample.interval_s:.1f} s: "
                + ", ".join(f"CPU {c} {b:.0%}" for c, b in sorted(seen.items()))
            )
        if m.sample.top:
            parts.append(
                "busiest: " + ", ".join(f"{c} (pid {p}) {s:.0%}" for p, c, s in m.sample.top)
            )
    if busiest is not None and busiest > BUSY_ERROR:
        state = ERROR
    elif busiest is not None and busiest > BUSY_WARNING:
        state = WARNING
    if not parts:
        return Check("load", title, UNKNOWN, None, m.why_missing("proc/loadavg"), source=source)
    detail = {
        OK: "",
        WARNING: "other work shares the machine: its bursts show up as slow iterations",
        ERROR: "other processes held the CPUs to measure on: this run will be disturbed; "
        "stop them or pick other CPUs (--cpus)",
    }[state]
    return Check("load", title, state, "; ".join(parts), detail, None, source)


def check_power_supply(m: Machine) -> Check:
    """The machine runs on mains power (when a power supply is visible at all)."""
    title, rel = "Power supply", "sys/class/power_supply"
    try:
        supplies = sorted(m.path(rel).iterdir())
    except OSError:
        supplies = []
    mains: list[str] = []
    batteries: list[str] = []
    for s in supplies:
        kind = m.read(f"{rel}/{s.name}/type")
        if kind == "Mains":
            mains.append(m.read(f"{rel}/{s.name}/online") or "")
        elif kind == "Battery":
            batteries.append(m.read(f"{rel}/{s.name}/status") or "")
    if not mains and not batteries:
        return Check(
            "power_supply",
            title,
            UNKNOWN,
            None,
            "no power supply visible (a desktop, a server or a VM)",
            source=f"/{rel}",
        )
    on_battery = ("1" not in mains if mains else False) or "Discharging" in batteries
    if on_battery:
        return Check(
            "power_supply",
            title,
            ERROR,
            "on battery",
            "on battery the firmware caps the clock and power plans change it: runs are not "
            "comparable with runs on mains power",
            "plug in the power cable",
            f"/{rel}",
        )
    return Check("power_supply", title, OK, "on mains power", source=f"/{rel}")


_VM_VENDORS = ("qemu", "kvm", "vmware", "virtualbox", "xen", "amazon ec2", "google", "microsoft")


def check_virtualization(m: Machine) -> Check:
    """A bare-metal machine: in a VM the frequency, turbo, SMT and IRQ placement are the
    host's."""
    title = "Virtualization"
    source = "/proc/cpuinfo, /sys/hypervisor/type, /sys/class/dmi/id/sys_vendor"
    found: list[str] = []
    hv = m.read("sys/hypervisor/type")
    if hv:
        found.append(f"hypervisor {hv}")
    dmi = (m.read("sys/class/dmi/id/sys_vendor"), m.read("sys/class/dmi/id/product_name"))
    vendor = " ".join(d for d in dmi if d)
    if vendor and any(v in vendor.lower() for v in _VM_VENDORS):
        found.append(vendor)
    cpuinfo = m.read("proc/cpuinfo")
    if cpuinfo and re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.MULTILINE):
        found.append("hypervisor flag in /proc/cpuinfo")
    if found:
        return Check(
            "virtualization",
            title,
            WARNING,
            "a virtual machine (" + "; ".join(found) + ")",
            "the CPU frequency, turbo, SMT and IRQ routing belong to the host and are out of "
            "reach from here; other guests on the host add noise no setting here removes",
            None,
            source,
        )
    if cpuinfo is None and vendor == "" and hv is None:
        why = m.why_missing("proc/cpuinfo")
        return Check("virtualization", title, UNKNOWN, None, why, source=source)
    return Check("virtualization", title, OK, "bare metal", source=source)


def _meminfo_kib(m: Machine) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (m.read("proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0].isdigit():
            out[key.strip()] = int(value[0])
    return out


def check_swap(m: Machine) -> Check:
    """No memory is swapped out."""
    title, source = "Swap in use", "/proc/meminfo"
    info = _meminfo_kib(m)
    if "SwapTotal" not in info:
        return Check("swap", title, UNKNOWN, None, m.why_missing("proc/meminfo"), source=source)
    total, free = info["SwapTotal"], info.get("SwapFree", info["SwapTotal"])
    if total == 0:
        return Check("swap", title, OK, "no swap", source=source)
    used = total - free
    value = f"{used / 1024:.0f} MiB of {total / 1024:.0f} MiB"
    if used <= 0:
        return Check("swap", title, OK, value, source=source)
    return Check(
        "swap",
        title,
        WARNING,
        value,
        "swapped-out pages are read back from disk when touched: a slow iteration each time",
        "sudo swapoff -a && sudo swapon -a",
        source,
    )


def check_thp(m: Machine) -> Check:
    """Transparent hugepages are not ``always`` (khugepaged compacts memory in the
    background, and page faults may stall on compaction)."""
    title, rel = "Transparent hugepages", "sys/kernel/mm/transparent_hugepage/enabled"
    text = m.read(rel)
    match = re.search(r"\[(\w+)\]", text or "")
    if match is None:
        return Check("thp", title, UNKNOWN, text, m.why_missing(rel), source=f"/{rel}")
    mode = match.group(1)
    if mode != "always":
        return Check("thp", title, OK, mode, source=f"/{rel}")
    return Check(
        "thp",
        title,
        WARNING,
        mode,
        "khugepaged collapses pages while the run measures, and a page fault may stall on "
        "compaction: occasional slow iterations",
        f"echo madvise | sudo tee /{rel}",
        f"/{rel}",
    )


#: the checks :func:`check_machine` runs, in order; edit the list to add or drop one
DEFAULT_CHECKS: list[Callable[[Machine], Check]] = [
    check_cpu_governor,
    check_turbo,
    check_cpu_frequency,
    check_smt,
    check_cpu_isolation,
    check_irq_affinity,
    check_aslr,
    check_perf_event,
    check_load,
    check_power_supply,
    check_virtualization,
    check_swap,
    check_thp,
]


def check_machine(
    root: Path = Path("/"),
    cpus: Sequence[int] | None = None,
    sample: CpuSample | None = None,
    checks: Sequence[Callable[[Machine], Check]] | None = None,
) -> list[Check]:
    """Run ``checks`` (default :data:`DEFAULT_CHECKS`) over the machine under ``root``, for
    a run pinned to ``cpus`` (None: not pinned) with the CPU ``sample`` taken before it.

    A check that cannot make sense of what it read is ``unknown``, never an exception.
    """
    machine = Machine(root, tuple(sorted(cpus)) if cpus else None, sample)
    out: list[Check] = []
    for check in DEFAULT_CHECKS if checks is None else checks:
        try:
            out.append(check(machine))
        except (ValueError, OSError, IndexError) as exc:
            name = check.__name__.removeprefix("check_")
            out.append(Check(name, name, UNKNOWN, None, f"could not read: {exc}"))
    return out


def is_ready(checks: Iterable[Check]) -> bool:
    """Whether a machine is ready for stable measurement: no check is an error (warnings
    are advice; unknown is not held against it)."""
    return all(c.state != ERROR for c in checks)
