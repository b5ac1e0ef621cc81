"""The one registry mechanism: built-ins by name, third parties by entry point (a real
distribution's metadata on sys.path), run-time registration, and the unknown-name error."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco.collectors.base import COLLECTORS, Collector
from aaco.errors import UsageError
from aaco.plugins import Registry, load_ref
from aaco.runners.base import RUNNERS, Runner
from aaco.tracers.base import TRACERS, Tracer


class Base:
    pass


class One(Base):
    pass


class NotABase:
    pass


def test_builtins_load_lazily_and_in_order() -> None:
    reg: Registry[Base] = Registry("widget", Base, {"one": f"{__name__}:One"})
    assert reg.names() == ["one"]
    assert reg.get("one") is One
    assert "one" in reg and "two" not in reg


def test_unknown_name_lists_the_valid_ones() -> None:
    reg: Registry[Base] = Registry("widget", Base, {"one": f"{__name__}:One", "b": "x:Y"})
    with pytest.raises(UsageError) as info:
        reg.get("three")
    assert str(info.value) == "unknown widget 'three'; valid: one, b"
    opt: Registry[Base] = Registry("widget", Base, {"one": "m:C"}, option="--widget")
    with pytest.raises(UsageError, match=r"^unknown --widget 'x'; valid: one$"):
        opt.get("x")


def test_a_class_of_the_wrong_kind_is_refused() -> None:
    reg: Registry[Base] = Registry("widget", Base, {"bad": f"{__name__}:NotABase"})
    with pytest.raises(TypeError, match="is not a Base"):
        reg.get("bad")


def test_registered_is_undone_on_exit() -> None:
    reg: Registry[Base] = Registry("widget", Base, {"one": f"{__name__}:One"})

    class Two(Base):
        pass

    with reg.registered("two", Two):
        assert reg.get("two") is Two
    assert reg.names() == ["one"]
    with reg.registered("one", Two):
        assert reg.get("one") is Two
    assert reg.get("one") is One


def test_entry_points_of_an_installed_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "aaco_widgets-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: aaco-widgets\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[aaco.widgets]\nthird = {__name__}:One\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[Base] = Registry("widget", Base, {"one": f"{__name__}:One"})
    assert reg.group == "aaco.widgets"
    assert reg.names() == ["one", "third"]
    assert reg.get("third") is One


def test_load_ref() -> None:
    assert load_ref("aaco.plugins:Registry.get") is Registry.get
    with pytest.raises(ValueError, match="not a module:attribute"):
        load_ref("aaco.plugins")


def test_every_builtin_plug_in_loads_and_is_of_its_kind() -> None:
    for registry, base in ((RUNNERS, Runner), (COLLECTORS, Collector), (TRACERS, Tracer)):
        for name in registry.names():
            cls = registry.get(name)
            assert issubclass(cls, base)
            assert cls.name == name
