"""The diagnosis stage's notes about its ceilings (src/aaco/diagnose.py)."""

from __future__ import annotations

import pyarrow as pa

from aaco.diagnose import _int8_note
from aaco.session.calibration import Ceilings
from aaco.session.schema import ROOFLINE


def _rows(*dtypes: str) -> pa.Table:
    return ROOFLINE.from_rows(
        [{"level": "node", "name": f"n{i}", "dtype": d, "flops": 1000.0, "time_ns": 1.0}
         for i, d in enumerate(dtypes)]
    )  # fmt: skip


def test_a_calibration_without_the_int8_roof_says_so_when_quantized_operators_ran() -> None:
    old = Ceilings("cpu", "calibrated", {"float32": 1e11}, 1e10, backend="cpu")
    note = _int8_note(old, _rows("uint8", "float", "int8"))
    assert note is not None and note.startswith("2 int8/uint8 operators have no compute roof")
    assert "aaco calibrate" in note
    # nothing quantized, or the roof is there, or not a calibration: no note
    assert _int8_note(old, _rows("float")) is None
    new = Ceilings("cpu", "calibrated", {"float32": 1e11, "int8": 2e11}, 1e10, backend="cpu")
    assert _int8_note(new, _rows("uint8")) is None
    gpu = Ceilings("H100", "published", {"float16_matrix": 9e14}, 3e12)
    assert _int8_note(gpu, _rows("int8")) is None
    assert _int8_note(None, _rows("int8")) is None
