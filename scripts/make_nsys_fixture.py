"""Build the Nsight Systems SQLite fixtures of tests/importers/fixtures/nsys/ from NVIDIA's schema.

No real ``nsys export`` small and licensed for redistribution was found, and the GPU machines
lent to this project record no report (nsys leaves a .qdstrm there), so these databases are
*constructed*: the tables, column names, types and constraints are those of NVIDIA's "SQLite
Schema Reference" (Nsight Systems User Guide) for two export schema versions, the ENUM_* rows
are the values exports carry (CUPTI's enums), and the rows are a small, hand-written CUDA
timeline whose every value the tests check.

* ``nsys_2026_4.sqlite``: export schema 3.28.1 (nsys 2026.4): SYNCHRONIZATION and CUDA_EVENT
  carry ``eventSyncId``, KERNEL the cluster/QMD columns, MEMCPY ``copyCount``.
* ``nsys_2024_6.sqlite``: export schema 3.16.1 (nsys 2024.6.2): no ``eventSyncId`` (event
  syncs are linked to their event record by ``eventId`` and order), CUDA_EVENT in its layout
  before ``eventSyncId``.

The timeline (one process, pid 4242, main thread 4243, a second thread 4250; device 0, and
device 1 as the peer of one copy): an H2D copy, a memset, an elementwise kernel on stream 7,
``cudaEventRecord`` on stream 7, ``cudaStreamWaitEvent`` on stream 13, an sgemm on stream 13,
two more event records, ``cudaEventSynchronize``, ``cudaStreamSynchronize``,
``cudaDeviceSynchronize``, a Triton kernel launched through ``cuLaunchKernel`` from the second
thread, a sync on an event never recorded, a peer copy, a D2H copy, one CUDA backtrace record
(which repeats a call), NVTX push/pop and start/end ranges and a mark.

Usage::

    python scripts/make_nsys_fixture.py            # writes tests/importers/fixtures/nsys/
    python scripts/make_nsys_fixture.py OUT_DIR
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "tests" / "importers" / "fixtures" / "nsys"

PID, MAIN_TID, SIDE_TID = 4242, 4243, 4250
#: serialized GlobalId: [hardware/VM id: bits 48+][pid: bits 24-47][tid: bits 0-23]
_VM = 1 << 48
GLOBAL_PID = _VM | (PID << 24)
MAIN_GTID = GLOBAL_PID | MAIN_TID
SIDE_GTID = GLOBAL_PID | SIDE_TID
INVALID = 0xFFFFFFFF  # CUPTI_SYNCHRONIZATION_INVALID_VALUE

# -- DDL: column, type and constraint as the schema reference lists them --------------------

_COMMON = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "ENUM_CUDA_MEMCPY_OPER": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_CUDA_MEM_KIND": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_CUPTI_SYNC_TYPE": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_NSYS_EVENT_TYPE": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_NSYS_EVENT_CLASS": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
        "correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, "
        "bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, "
        "doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, "
        "jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"
    ),
}

_GPU = (
    "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
    "isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, "
    "clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, "
    "chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT, ctrlDevPath TEXT, revision INTEGER, "
    "nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER, maxRegistersPerBlock INTEGER, "
    "maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER, "
    "maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER, "
    "maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, "
    "maxBlockDimX INTEGER, maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER, "
    "maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER, computeMinor INTEGER, "
    "smMajor INTEGER, smMinor INTEGER"
)
_KERNEL = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
    "correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL, "
    "shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
    "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, "
    "gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, "
    "blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
    "dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, "
    "localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, "
    "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER"
)
_MEMCPY = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
    "correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, "
    "copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, "
    "srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, "
    "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER"
)
_SYNC = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
    "correlationId INTEGER, globalPid INTEGER"
)

#: schema version -> (product version, table -> column definitions)
LAYOUTS: dict[str, tuple[str, dict[str, str]]] = {
    "3.16.1": (
        "2024.6.2.225",
        {
            **_COMMON,
            "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
            "TARGET_INFO_GPU": _GPU,
            "CUPTI_ACTIVITY_KIND_KERNEL": _KERNEL,
            "CUPTI_ACTIVITY_KIND_MEMCPY": _MEMCPY,
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
                f"{_SYNC}, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL"
            ),
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT": (
                "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
                "eventId INTEGER NOT NULL"
            ),
        },
    ),
    "3.28.1": (
        "2026.4.1.100",
        {
            **_COMMON,
            "TARGET_INFO_SESSION_START_TIME": (
                "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER, "
                "sessionStartCntVctNs INTEGER"
            ),
            "TARGET_INFO_GPU": f"{_GPU}, numaNodeId INTEGER",
            "CUPTI_ACTIVITY_KIND_KERNEL": (
                f"{_KERNEL}, qmdBulkReleaseDone INTEGER, qmdPreexitDone INTEGER, "
                "qmdLastCtaDone INTEGER, graphId INTEGER, clusterX INTEGER, clusterY INTEGER, "
                "clusterZ INTEGER, clusterSchedulingPolicy INTEGER, "
                "maxPotentialClusterSize INTEGER, maxActiveClusters INTEGER, "
                "sharedMemoryRequestedPercentage INTEGER, "
                "tensorSizeMinusOneElements TEXT NOT NULL"
            ),
            "CUPTI_ACTIVITY_KIND_MEMCPY": f"{_MEMCPY}, copyCount INTEGER",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
                f"{_SYNC}, deprecatedSyncType INTEGER, syncType INTEGER NOT NULL, "
                "eventId INTEGER NOT NULL, eventSyncId INTEGER"
            ),
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT": (
                "timestamp INTEGER, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
                "globalPid INTEGER, eventId INTEGER NOT NULL, eventSyncId INTEGER"
            ),
        },
    ),
}

# -- enum rows (as exports write them) ------------------------------------------------------

ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
        (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"),
        (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
        (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"),
        (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
        (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
        (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
        (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
    "ENUM_NSYS_EVENT_TYPE": [
        (34, "NvtxMark", "NvtxMark"),
        (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"),
    ],
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (67, "TRACE_PROCESS_EVENT_CUDABACKTRACE", "CUDA backtrace"),
    ],
}

# -- the timeline -----------------------------------------------------------------------------

ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char *, 1>)"
)
STRINGS: dict[int, str] = {
    1: "cudaLaunchKernel_v7000",
    2: "cudaMemcpyAsync_v3020",
    3: "cudaMemsetAsync_v3020",
    4: "cudaEventRecord_v3020",
    5: "cudaStreamWaitEvent_v3020",
    6: "cudaEventSynchronize_v3020",
    7: "cudaStreamSynchronize_v3020",
    8: "cudaDeviceSynchronize_v3020",
    9: "cuLaunchKernel",
    10: ELEMENTWISE,
    11: "vectorized_elementwise_kernel",
    12: (
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE"
        "NS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
    ),
    13: "ampere_sgemm_128x64_nn",
    14: "triton_poi_fused_add_0",
    15: "cudaMemcpyPeerAsync_v4000",
    20: "data_load",
}

# (start, end, eventClass, globalTid, correlationId, nameId)
RUNTIME = [
    (1_000, 3_000, 0, MAIN_GTID, 100, 2),  # H2D copy
    (3_500, 3_800, 0, MAIN_GTID, 101, 3),  # memset
    (5_000, 6_000, 0, MAIN_GTID, 102, 1),  # elementwise kernel, stream 7
    (4_990, 6_010, 67, MAIN_GTID, 102, 1),  # backtrace record of the same call: not a call
    (10_000, 10_500, 0, MAIN_GTID, 103, 4),  # record event 1 on stream 7
    (11_000, 11_200, 0, MAIN_GTID, 104, 5),  # stream 13 waits for event 1
    (12_000, 13_000, 0, MAIN_GTID, 105, 1),  # sgemm, stream 13
    (20_500, 20_700, 0, MAIN_GTID, 106, 4),  # record event 2 on stream 13
    (20_800, 20_900, 0, MAIN_GTID, 107, 4),  # record event 1 again, on stream 13
    (21_000, 25_000, 0, MAIN_GTID, 108, 6),  # host waits for event 1 (corr 107's record)
    (26_000, 27_000, 0, MAIN_GTID, 109, 7),  # stream 7 sync
    (28_000, 30_000, 0, MAIN_GTID, 110, 8),  # device sync
    (31_000, 31_500, 1, SIDE_GTID, 111, 9),  # Triton kernel through the driver API
    (34_000, 34_100, 0, MAIN_GTID, 112, 6),  # sync on event 3, never recorded
    (35_000, 35_500, 0, MAIN_GTID, 113, 15),  # peer copy 0 -> 1
    (38_000, 38_500, 0, MAIN_GTID, 114, 2),  # D2H copy
]

# kernels: (start, end, stream, corr, demangled, short, mangled, regs, grid, block, static, dyn)
KERNELS = [
    (6_500, 9_500, 7, 102, 10, 11, 12, 16, (128, 1, 1), (256, 1, 1), 0, 0),
    (14_000, 20_000, 13, 105, 13, 13, 13, 122, (8, 16, 1), (128, 1, 1), 16_384, 4_096),
    (32_000, 33_000, 7, 111, 14, 14, 14, 32, (64, 1, 1), (128, 1, 1), 0, 0),
]

# memcpy: (start, end, stream, corr, bytes, copyKind, srcKind, dstKind, srcDev, dstDev)
MEMCPYS = [
    (2_000, 4_000, 7, 100, 4_096, 1, 0, 2, 0, 0),
    (36_000, 37_000, 7, 113, 8_192, 10, 2, 2, 0, 1),
    (39_000, 40_000, 7, 114, 4_096, 2, 2, 0, 0, 0),
]
# memset: (start, end, stream, corr, bytes, memKind)
MEMSETS = [(4_100, 4_200, 7, 101, 1_024, 2)]

# cudaEventRecord records: (stream, corr, eventId, eventSyncId)
EVENTS = [(7, 103, 1, 900), (13, 106, 2, 901), (13, 107, 1, 902)]
# sync records: (start, end, stream, corr, syncType, eventId, eventSyncId)
SYNCS = [
    (11_000, 11_200, 13, 104, 2, 1, 900),  # Stream Wait Event -> record 103 on stream 7
    (21_000, 25_000, INVALID, 108, 1, 1, 902),  # Event Sync -> record 107 on stream 13
    (26_000, 27_000, 7, 109, 3, INVALID, None),  # Stream Sync
    (28_000, 30_000, INVALID, 110, 4, INVALID, None),  # Context Sync
    (34_000, 34_100, INVALID, 112, 1, 3, None),  # Event Sync on an event never recorded
]

# NVTX: (start, end, eventType, text, textId, globalTid, endGlobalTid)
NVTX = [
    (500, 41_000, 59, "forward", None, MAIN_GTID, None),
    (900, 4_500, 60, None, 20, MAIN_GTID, SIDE_GTID),
    (2_500, None, 34, "checkpoint", None, MAIN_GTID, None),
]

GPUS = [
    {"vmId": _VM, "id": dev, "name": "NVIDIA H100 80GB HBM3", "busLocation": bus,
     "isDiscrete": 1, "totalMemory": 85_520_809_984, "smCount": 132, "cuDevice": dev,
     "uuid": f"GPU-0000000{dev}-1111-2222-3333-444444444444", "chipName": "GH100",
     "computeMajor": 9, "computeMinor": 0, "threadsPerWarp": 32}
    for dev, bus in ((0, "0000:18:00.0"), (1, "0000:2a:00.0"))
]  # fmt: skip


def _insert(con: sqlite3.Connection, table: str, row: Mapping[str, Any]) -> None:
    """Insert by column name; the layout's other columns keep their NULL."""
    cols = ", ".join(f'"{c}"' for c in row)
    marks = ", ".join("?" * len(row))
    con.execute(f'INSERT INTO "{table}" ({cols}) VALUES ({marks})', list(row.values()))


def _columns(ddl: str) -> set[str]:
    return {part.split()[0] for part in ddl.split(",") if part.strip()}


def build(path: Path, schema: str = "3.28.1") -> Path:
    """Write the fixture database of export ``schema`` (a key of :data:`LAYOUTS`) to ``path``."""
    product, tables = LAYOUTS[schema]
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        for table, ddl in tables.items():
            con.execute(f'CREATE TABLE "{table}" ({ddl})')
        has = {t: _columns(ddl) for t, ddl in tables.items()}
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted(STRINGS.items()))
        for table, rows in ENUMS.items():
            con.executemany(f'INSERT INTO "{table}" VALUES (?, ?, ?)', rows)
        con.executemany(
            "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
            [("EXPORT_PRODUCT_VERSION", product), ("EXPORT_SCHEMA_VERSION", schema)],
        )
        _insert(con, "TARGET_INFO_SESSION_START_TIME",
                {"utcEpochNs": 1_717_000_000_000_000_000, "utcTime": "2024-05-29T16:26:40Z",
                 "localTime": "2024-05-29T16:26:40Z"})  # fmt: skip
        for gpu in GPUS:
            _insert(con, "TARGET_INFO_GPU", gpu)
        for start, end, klass, gtid, corr, name in RUNTIME:
            _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME",
                    {"start": start, "end": end, "eventClass": klass, "globalTid": gtid,
                     "correlationId": corr, "nameId": name, "returnValue": 0})  # fmt: skip
        for grid_id, k in enumerate(KERNELS, start=1):
            start, end, stream, corr, dem, short, mangled, regs, grid, block, st, dyn = k
            row: dict[str, Any] = {
                "start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream,
                "correlationId": corr, "globalPid": GLOBAL_PID, "demangledName": dem,
                "shortName": short, "mangledName": mangled, "launchType": 0, "cacheConfig": 0,
                "registersPerThread": regs, "gridX": grid[0], "gridY": grid[1],
                "gridZ": grid[2], "blockX": block[0], "blockY": block[1], "blockZ": block[2],
                "staticSharedMemory": st, "dynamicSharedMemory": dyn,
                "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": grid_id,
                "sharedMemoryExecuted": st + dyn,
            }  # fmt: skip
            if "tensorSizeMinusOneElements" in has["CUPTI_ACTIVITY_KIND_KERNEL"]:
                row["tensorSizeMinusOneElements"] = ""
            _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", row)
        for start, end, stream, corr, nbytes, kind, src, dst, sdev, ddev in MEMCPYS:
            row = {"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream,
                   "correlationId": corr, "globalPid": GLOBAL_PID, "bytes": nbytes,
                   "copyKind": kind, "srcKind": src, "dstKind": dst, "srcDeviceId": sdev,
                   "dstDeviceId": ddev, "srcContextId": 1, "dstContextId": 1 + ddev}  # fmt: skip
            if "copyCount" in has["CUPTI_ACTIVITY_KIND_MEMCPY"]:
                row["copyCount"] = 1
            _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", row)
        for start, end, stream, corr, nbytes, mem in MEMSETS:
            _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET",
                    {"start": start, "end": end, "deviceId": 0, "contextId": 1,
                     "streamId": stream, "correlationId": corr, "globalPid": GLOBAL_PID,
                     "value": 0, "bytes": nbytes, "memKind": mem})  # fmt: skip
        with_sync_id = "eventSyncId" in has["CUPTI_ACTIVITY_KIND_CUDA_EVENT"]
        for stream, corr, event, sync_id in EVENTS:
            row = {"deviceId": 0, "contextId": 1, "streamId": stream, "correlationId": corr,
                   "globalPid": GLOBAL_PID, "eventId": event}  # fmt: skip
            if with_sync_id:
                row |= {"eventSyncId": sync_id, "timestamp": 0}
            _insert(con, "CUPTI_ACTIVITY_KIND_CUDA_EVENT", row)
        for start, end, stream, corr, sync_type, event, sync_id in SYNCS:
            row = {"start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": stream,
                   "correlationId": corr, "globalPid": GLOBAL_PID, "syncType": sync_type,
                   "eventId": event}  # fmt: skip
            if with_sync_id:
                row["eventSyncId"] = sync_id
            _insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", row)
        for start, end, etype, text, text_id, gtid, end_gtid in NVTX:
            _insert(con, "NVTX_EVENTS",
                    {"start": start, "end": end, "eventType": etype, "text": text,
                     "textId": text_id, "globalTid": gtid, "endGlobalTid": end_gtid,
                     "domainId": 0})  # fmt: skip
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()
    return path


#: fixture file name -> export schema version
FIXTURES = {"nsys_2026_4.sqlite": "3.28.1", "nsys_2024_6.sqlite": "3.16.1"}


def main(argv: Sequence[str]) -> None:
    out = Path(argv[0]) if argv else OUT
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in FIXTURES.items():
        print(build(out / name, schema))


if __name__ == "__main__":
    main(sys.argv[1:])
