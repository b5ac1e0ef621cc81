"""The machine-state checks over fake /proc + /sys trees: a tuned machine is all ok, and each
departure from it gives the state, value and fix it should."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.machine_trees import fake_machine, proc_stat

from aaco.collectors.machine_state import (
    DEFAULT_CHECKS,
    STATES,
    Check,
    CpuSample,
    check_machine,
    format_cpu_list,
    is_ready,
    parse_cpu_list,
    read_cpu_times,
    sample_cpus,
)

CPU = "sys/devices/system/cpu"


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_a_tuned_machine_is_all_ok(tmp_path: Path) -> None:
    checks = check_machine(fake_machine(tmp_path), cpus=(1,))
    assert [c.name for c in checks] == [f.__name__.removeprefix("check_") for f in DEFAULT_CHECKS]
    bad = [(c.name, c.state, c.value, c.detail) for c in checks if c.state != "ok"]
    assert bad == []
    assert is_ready(checks)
    assert all(c.fix is None for c in checks)


def test_powersave_governor_is_a_warning_with_the_fix(tmp_path: Path) -> None:
    root = fake_machine(tmp_path, **{f"{CPU}/cpu1/cpufreq/scaling_governor": "powersave"})
    c = by_name(check_machine(root, cpus=(1,)))["cpu_governor"]
    assert c.state == "warning"
    assert c.value == "powersave on CPU 1"
    assert c.fix == "sudo cpupower -c 1 frequency-set -g performance"
    # unpinned: every online CPU is checked, and the fix names no CPU
    c = by_name(check_machine(root))["cpu_governor"]
    assert c.value == "performance on CPU 0,2-3; powersave on CPU 1"
    assert c.fix == "sudo cpupower frequency-set -g performance"


def test_missing_cpufreq_is_unknown_with_the_reason(tmp_path: Path) -> None:
    overrides: dict[str, str | None] = {f"{CPU}/cpu{i}/cpufreq": None for i in range(4)}
    root = fake_machine(tmp_path, **overrides, **{f"{CPU}/intel_pstate": None})
    checks = by_name(check_machine(root, cpus=(1,)))
    for name in ("cpu_governor", "cpu_frequency", "turbo"):
        assert checks[name].state == "unknown", name
        assert checks[name].value is None and checks[name].fix is None
    assert "no cpufreq interface" in checks["cpu_governor"].detail
    assert "neither intel_pstate/no_turbo nor cpufreq/boost" in checks["turbo"].detail
    assert is_ready(checks.values())  # unknown is not held against the machine


def test_turbo_on_either_driver(tmp_path: Path) -> None:
    root = fake_machine(tmp_path / "a", **{f"{CPU}/intel_pstate/no_turbo": "0"})
    c = by_name(check_machine(root))["turbo"]
    assert (c.state, c.value) == ("warning", "enabled (intel_pstate no_turbo=0)")
    assert c.fix == "echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo"
    root = fake_machine(
        tmp_path / "b", **{f"{CPU}/intel_pstate": None, f"{CPU}/cpufreq/boost": "1"}
    )
    c = by_name(check_machine(root))["turbo"]
    assert c.state == "warning"
    assert c.fix == "echo 0 | sudo tee /sys/devices/system/cpu/cpufreq/boost"


def test_frequency_range_and_smt(tmp_path: Path) -> None:
    root = fake_machine(
        tmp_path,
        **{
            f"{CPU}/cpu2/cpufreq/scaling_min_freq": "800000",
            f"{CPU}/cpu2/cpufreq/scaling_max_freq": "3500000",
            f"{CPU}/smt/control": "on",
            f"{CPU}/cpu2/topology/thread_siblings_list": "2-3",
        },
    )
    checks = by_name(check_machine(root, cpus=(2,)))
    assert checks["cpu_frequency"].state == "warning"
    assert checks["cpu_frequency"].value == "min=800 MHz, max=3500 MHz on CPU 2"
    assert checks["cpu_frequency"].fix == "sudo cpupower -c 2 frequency-set -d 3500MHz -u 3500MHz"
    assert checks["smt"].state == "warning"
    assert checks["smt"].value == "on (CPU 3 share cores with them)"
    assert checks["smt"].fix == "echo off | sudo tee /sys/devices/system/cpu/smt/control"


def test_aslr_perf_swap_thp(tmp_path: Path) -> None:
    root = fake_machine(
        tmp_path,
        **{
            "proc/sys/kernel/randomize_va_space": "0",
            "proc/sys/kernel/perf_event_max_sample_rate": "100000",
            "proc/meminfo": "SwapTotal: 2097152 kB\nSwapFree: 1048576 kB\n",
            "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never",
        },
    )
    checks = by_name(check_machine(root, cpus=(1,)))
    assert (checks["aslr"].state, checks["aslr"].value) == ("warning", "no randomization")
    assert checks["aslr"].fix == "echo 2 | sudo tee /proc/sys/kernel/randomize_va_space"
    assert checks["perf_event"].fix == (
        "echo 1 | sudo tee /proc/sys/kernel/perf_event_max_sample_rate"
    )
    assert checks["swap"].value == "1024 MiB of 2048 MiB"
    assert checks["swap"].fix == "sudo swapoff -a && sudo swapon -a"
    assert checks["thp"].value == "always"
    assert checks["thp"].fix == (
        "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"
    )
    assert is_ready(checks.values())


def test_isolation_and_irqs_are_judged_against_the_pinned_cpus(tmp_path: Path) -> None:
    root = fake_machine(tmp_path / "a", **{"proc/irq/9/smp_affinity_list": "0-3"})
    checks = by_name(check_machine(root, cpus=(2,)))
    assert checks["irq_affinity"].state == "warning"
    assert checks["irq_affinity"].value == "1 of 2 IRQs may run on CPU 2"
    assert "echo 0-1,3 | sudo tee $f" in (checks["irq_affinity"].fix or "")
    # CPU 0 is not isolated: pin to the isolated ones
    checks = by_name(check_machine(root, cpus=(0,)))
    assert checks["cpu_isolation"].state == "warning"
    assert checks["cpu_isolation"].fix == "aaco run --isolate --cpus 1-3"
    # nothing isolated: the kernel command line to add
    root = fake_machine(tmp_path / "b", **{f"{CPU}/isolated": "", "proc/cmdline": "quiet"})
    c = by_name(check_machine(root, cpus=(1,)))["cpu_isolation"]
    assert c.state == "warning" and "isolcpus=1 nohz_full=1 rcu_nocbs=1" in (c.fix or "")
    # isolated without nohz_full
    root = fake_machine(tmp_path / "c", **{"proc/cmdline": "isolcpus=1-3 rcu_nocbs=1-3"})
    c = by_name(check_machine(root, cpus=(1,)))["cpu_isolation"]
    assert c.state == "warning" and "nohz_full" in c.detail
    # unpinned: IRQs cannot be judged
    assert by_name(check_machine(root))["irq_affinity"].state == "unknown"


def test_busy_cpus_are_an_error_and_name_the_processes(tmp_path: Path) -> None:
    root = fake_machine(tmp_path)
    sample = CpuSample(0.2, {0: 0.05, 1: 0.9, 2: 0.0, 3: 0.0}, ((77, "spinner", 0.9),))
    c = by_name(check_machine(root, cpus=(1,), sample=sample))["load"]
    assert c.state == "error"
    assert "CPU 1 90%" in (c.value or "") and "spinner (pid 77) 90%" in (c.value or "")
    assert not is_ready([c])
    # the same sample for a run pinned to a quiet CPU: ok
    assert by_name(check_machine(root, cpus=(2,), sample=sample))["load"].state == "ok"
    # a high load average alone: a warning
    root = fake_machine(tmp_path / "b", **{"proc/loadavg": "3.50 2.0 1.0 5/200 99"})
    assert by_name(check_machine(root, cpus=(1,)))["load"].state == "warning"


def test_battery_is_an_error_and_no_supply_is_unknown(tmp_path: Path) -> None:
    root = fake_machine(
        tmp_path / "a",
        **{
            "sys/class/power_supply/AC/online": "0",
            "sys/class/power_supply/BAT0/type": "Battery",
            "sys/class/power_supply/BAT0/status": "Discharging",
        },
    )
    c = by_name(check_machine(root))["power_supply"]
    assert (c.state, c.value, c.fix) == ("error", "on battery", "plug in the power cable")
    root = fake_machine(tmp_path / "b", **{"sys/class/power_supply": None})
    c = by_name(check_machine(root))["power_supply"]
    assert c.state == "unknown" and "no power supply visible" in c.detail


def test_a_vm_says_frequency_control_is_out_of_reach(tmp_path: Path) -> None:
    root = fake_machine(tmp_path, **{"proc/cpuinfo": "flags\t\t: fpu sse hypervisor avx"})
    c = by_name(check_machine(root))["virtualization"]
    assert c.state == "warning" and "hypervisor flag" in (c.value or "")
    assert "out of reach" in c.detail and c.fix is None
    (root / "sys/class/dmi/id").mkdir(parents=True)
    (root / "sys/class/dmi/id/sys_vendor").write_text("QEMU\n")
    assert "QEMU" in (by_name(check_machine(root))["virtualization"].value or "")


def test_an_empty_root_is_all_unknown_or_ok_and_never_raises(tmp_path: Path) -> None:
    checks = check_machine(tmp_path, cpus=(0,))
    assert {c.state for c in checks} <= {"unknown", "ok", "warning"}
    assert all(c.state in STATES for c in checks)
    assert by_name(checks)["aslr"].detail == "/proc/sys/kernel/randomize_va_space does not exist"


def test_a_check_that_raises_becomes_unknown(tmp_path: Path) -> None:
    def broken(m: object) -> Check:
        raise ValueError("garbled")

    (c,) = check_machine(tmp_path, checks=[broken])
    assert c.state == "unknown" and "garbled" in c.detail


def test_check_states_are_validated_and_round_trip() -> None:
    with pytest.raises(ValueError, match="state 'bad'"):
        Check("x", "X", "bad", None)
    c = Check("aslr", "ASLR", "warning", "none", "why", "fix it", "/proc/x")
    assert Check.from_json(c.to_json()) == c


def test_cpu_lists() -> None:
    assert parse_cpu_list("0-2,5,8-9") == (0, 1, 2, 5, 8, 9)
    assert parse_cpu_list("domain,managed_irq,2-3") == (2, 3)
    assert parse_cpu_list("") == ()
    assert format_cpu_list([5, 0, 1, 2, 9]) == "0-2,5,9"
    for bad in ("a-b", "3-1", "1,,x2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


def test_sample_reads_busy_shares_and_processes(tmp_path: Path) -> None:
    root = fake_machine(tmp_path)
    proc = root / "proc" / "4242"
    proc.mkdir()
    fields = " ".join(["S"] + ["0"] * 10 + ["10", "0"] + ["0"] * 30)
    (proc / "stat").write_text(f"4242 (my (odd) name) {fields}\n")

    def later(seconds: float) -> None:
        # 100 ticks pass on every CPU: CPU 1 was busy 80 of them, the process 80 ticks too
        (root / "proc/stat").write_text(proc_stat([110, 180, 100, 100], [1090, 1020, 1100, 1100]))
        fields2 = " ".join(["S"] + ["0"] * 10 + ["70", "20"] + ["0"] * 30)
        (proc / "stat").write_text(f"4242 (my (odd) name) {fields2}\n")

    s = sample_cpus(root, 0.5, sleep=later)
    assert s.busy == {0: 0.1, 1: 0.8, 2: 0.0, 3: 0.0}
    assert s.top == ((4242, "my (odd) name", 0.8),)
    assert read_cpu_times(tmp_path / "nowhere") == {}
    # nothing changed between the readings (a copied /proc): busy unknown
    assert sample_cpus(root, 0.0, sleep=lambda _: None).busy[1] is None


@pytest.mark.parametrize("text", ["0-999999999", "8192", "\u00b2", "\u0663", "1-0"])
def test_cpu_lists_out_of_range_or_not_ascii_are_refused_at_once(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpu_list(text)
