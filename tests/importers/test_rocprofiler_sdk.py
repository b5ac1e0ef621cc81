"""The one declaration of what rocprofiler-SDK fields mean, as its three readers use it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from aaco.importers._csv import norm, read_header
from aaco.importers._rocprofiler_sdk import (
    KERNEL_FIELDS,
    KERNEL_TRACE_COLUMNS,
    api_domain,
    copy_device,
    copy_kind,
    csv_keys,
    direction_kind,
)
from aaco.importers.rocprofv3 import classify, read_rocprofv3_csv
from aaco.session.schema import KERNELS

FIXTURES = Path(__file__).parent / "fixtures" / "rocprof" / "v3"


def test_kernel_fields_name_kernels_columns() -> None:
    assert set(KERNEL_FIELDS) <= set(KERNELS.column_names)
    assert csv_keys(KERNEL_FIELDS["registers"]) == ("vgprcount", "archvgprcount")


@pytest.mark.parametrize(
    ("generation", "fixture"),
    [
        ("oldest", "gen1_kernel_trace.csv"),
        ("with_stream", "gen2_kernel_trace.csv"),
        ("current", "run/node1/4242_kernel_trace.csv"),
    ],
)
def test_each_generation_header_fills_its_fields(
    generation: str, fixture: str, tmp_path: Path
) -> None:
    """The fixtures carry the declared headers; a row of every generation fills each KERNELS
    column whose field the header has, and only those."""
    columns = KERNEL_TRACE_COLUMNS[generation]
    written = read_header(FIXTURES / fixture)
    assert written is not None and written.names == columns
    row = {name: str(i + 1) for i, name in enumerate(columns)}
    row.update(Agent_Id="1", Kernel_Name="k", Start_Timestamp="100", End_Timestamp="200")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerow(row)
    path = tmp_path / "7_kernel_trace.csv"
    path.write_text(buf.getvalue())
    header = read_header(path)
    assert header is not None and classify(header) == "kernel_trace"
    (kernel,) = read_rocprofv3_csv(path).kernels.to_pylist()
    keys = {norm(c): row[c] for c in columns}
    for column, fields in KERNEL_FIELDS.items():
        present = [k for k in csv_keys(fields) if k in keys]
        if column == "process_id":
            assert kernel[column] == 7  # the file-name prefix: no process column
        elif present:
            assert kernel[column] == int(keys[present[0]]), column
        else:
            assert kernel[column] is None, column


def test_api_domains_and_copy_directions() -> None:
    assert [api_domain(d) for d in ("HIP_RUNTIME_API", "MARKER_CORE_API", "", None)] == [
        "hip",
        "marker",
        "unknown",
        "unknown",
    ]
    assert direction_kind("MEMORY_COPY_HOST_TO_DEVICE") == "HtoD"
    assert direction_kind("sideways") == "unknown"
    assert [copy_kind(False, True), copy_kind(True, False), copy_kind(None, True)] == [
        "HtoD",
        "DtoH",
        "unknown",
    ]
    assert (copy_device("HtoD", 0, 1), copy_device("DtoH", 0, None)) == (1, 0)
