"""``aaco query``: SQL (DuckDB) over a lake, or directly over a sessions root.

Over a lake, each table of :data:`aaco.lake.layout.LAKE_TABLES` is a view over its
Hive-partitioned files; the partition keys ``vendor``, ``arch`` and ``date`` are columns of
``sessions`` only (in every table they would make ``JOIN sessions USING (session_id) WHERE
vendor = ...`` ambiguous), so a filter on them is written against ``sessions``. Over a
sessions root, the same names are views over the bundles' own Parquet files (no copy), each
with its ``session_id``, and ``sessions`` is the bundles' summary rows
(:func:`aaco.lake.rows.fleet_row`, with ``date``); only the tables the SQL names are built,
so a query of one table does not read every bundle's summary.

Example::

    con = connect(Path("lake"))
    con.sql("SELECT model, quantile_cont(latency_ms, 0.99) FROM iterations "
            "JOIN sessions USING (session_id) WHERE vendor = 'amd' GROUP BY ALL").arrow()
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from aaco.errors import InputError, UsageError
from aaco.lake.layout import LAKE_FILE, LAKE_TABLES, PARTITION_KEYS, open_lake
from aaco.lake.rows import BUNDLE_ERRORS, FLEET_SCHEMA, folder_fleet_rows
from aaco.runners.harness import one_line
from aaco.session.bundle import Session, iter_sessions
from aaco.session.schema import TABLES

if TYPE_CHECKING:
    import duckdb

__all__ = ["FORMATS", "connect", "is_lake", "run_query"]

FORMATS = ("table", "json", "csv", "parquet")
_HIVE_TYPES = "{'vendor': VARCHAR, 'arch': VARCHAR, 'date': DATE}"


def is_lake(path: Path) -> bool:
    """``path`` is a lake (it has ``_lake.json``) rather than a sessions root."""
    return (path / LAKE_FILE).is_file()


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError:  # pragma: no cover - a core dependency
        raise UsageError("aaco query needs DuckDB: pip install duckdb") from None
    return duckdb


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _named(sql: str | None) -> set[str]:
    """The lake tables ``sql`` names (all when ``sql`` is None or names none): only their
    views are made, so a query reads nothing of the tables it does not name."""
    if sql is None:
        return set(LAKE_TABLES)
    names = {t for t in LAKE_TABLES if re.search(rf"\b{t}\b", sql, re.IGNORECASE)}
    return names or set(LAKE_TABLES)


def _empty(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> None:
    con.register(f"_empty_{name}", schema.empty_table())
    con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "_empty_{name}"')


def _lake_views(con: duckdb.DuckDBPyConnection, lake: Path, names: set[str]) -> None:
    open_lake(lake, create=False)
    for name, t in LAKE_TABLES.items():
        if name not in names:
            continue  # a damaged file of another table must not fail this query
        # the partition keys are columns of sessions only: in every table they would make
        # `JOIN sessions USING (session_id) WHERE vendor = ...` ambiguous
        sessions = name == "sessions"
        parts = [pa.field(k, pa.date32() if k == "date" else pa.string()) for k in PARTITION_KEYS]
        if not any(t.folder(lake).rglob("*.parquet")):
            _empty(con, name, pa.schema([*t.schema, *(parts if sessions else [])]))
            continue
        # every file of a table has its schema (the lake's version fixes it; open_lake
        # refuses another version), so no union_by_name, which reads every file's footer
        # before the query starts (0.2 s of a 1 000-session lake)
        keep = "*" if sessions else f"* EXCLUDE ({', '.join(PARTITION_KEYS)})"
        con.execute(
            f'CREATE VIEW "{name}" AS SELECT {keep} FROM read_parquet({_quote(t.glob(lake))}, '
            f"hive_partitioning = true, hive_types = {_HIVE_TYPES})"
        )


def _folder_views(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    names: set[str],
    warnings: list[str],
    skip: Collection[str] = (),
) -> None:
    bundles = list(iter_sessions(root))
    for name in sorted(names):
        t = LAKE_TABLES[name]
        if name == "sessions":
            rows, notes = folder_fleet_rows(root)
            warnings += notes
            schema = pa.schema([*FLEET_SCHEMA, pa.field("date", pa.date32())])
            con.register("_sessions_rows", pa.Table.from_pylist(rows, schema=schema))
            con.execute('CREATE VIEW "sessions" AS SELECT * FROM "_sessions_rows"')
            continue
        if t.source is None:  # serving_points: built by the export only
            _serving_points_view(con, bundles, warnings)
            continue
        rel = TABLES[t.source].path
        files = [str(b / rel) for b in bundles if (b / rel).is_file()]
        files = [f for f in files if f not in skip]
        if not files:
            _empty(con, name, t.schema)
            continue
        depth = rel.count("/") + 1
        pattern = r"([^/]+)" + r"/[^/]+" * depth + "$"
        listing = ", ".join(_quote(f) for f in files)
        con.execute(
            f'CREATE VIEW "{name}" AS SELECT regexp_extract(filename, {_quote(pattern)}, 1) '
            f"AS session_id, * EXCLUDE (filename) FROM read_parquet([{listing}], "
            "filename = true, union_by_name = true)"
        )


def _unreadable_files(root: Path, names: set[str]) -> dict[str, str]:
    """file -> why, of the named tables' files under ``root`` that are not readable Parquet
    (looked for only after a query failed: the footers of every bundle cost time)."""
    import pyarrow.parquet as pq

    bad: dict[str, str] = {}
    for b in iter_sessions(root):
        for name in names:
            source = LAKE_TABLES[name].source
            if source is None or not (b / TABLES[source].path).is_file():
                continue
            f = b / TABLES[source].path
            try:
                pq.ParquetFile(f)
            except (OSError, ValueError) as exc:
                bad[str(f)] = one_line(exc)
    return bad


def _serving_points_view(
    con: duckdb.DuckDBPyConnection, bundles: list[Path], warnings: list[str]
) -> None:
    from aaco.lake.export import serving_points_table

    tables = []
    for b in bundles:
        try:
            points = serving_points_table(Session.load(b))
        except BUNDLE_ERRORS as exc:
            warnings.append(f"{b}: serving points left out ({one_line(exc)})")
            continue
        if points is not None:
            tables.append(points)
    schema = LAKE_TABLES["serving_points"].schema
    con.register("_serving_points", pa.concat_tables(tables) if tables else schema.empty_table())
    con.execute('CREATE VIEW "serving_points" AS SELECT * FROM "_serving_points"')


def _connect(
    source: Path, sql: str | None, warnings: list[str], skip: Collection[str] = ()
) -> duckdb.DuckDBPyConnection:
    """:func:`connect`, DuckDB's errors raised as they are."""
    duckdb = _duckdb()
    if not source.is_dir():
        raise InputError(f"{source}: no such lake or sessions root")
    con = duckdb.connect(":memory:")
    try:
        if is_lake(source):
            _lake_views(con, source, _named(sql))
        else:
            _folder_views(con, source, _named(sql), warnings, skip)
    except BaseException:
        con.close()
        raise
    return con  # type: ignore[no-any-return]


def connect(
    source: Path, sql: str | None = None, warnings: list[str] | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the tables ``sql`` names (all when it names
    none) as views over ``source``, a lake or a sessions root; ``warnings`` gets a line
    for each bundle a folder's views leave out."""
    duckdb = _duckdb()
    try:
        return _connect(source, sql, [] if warnings is None else warnings)
    except duckdb.Error as exc:
        raise InputError(f"{source}: cannot read its tables ({one_line(exc)})") from None


def _execute(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    result = con.sql(sql)
    if result is None:
        return pa.table({})
    # to_arrow_table() is DuckDB 1.4's name; arrow() returned the table before it
    fetch = getattr(result, "to_arrow_table", None) or result.arrow
    table: pa.Table = fetch()
    return table


def _attempt(source: Path, sql: str, warnings: list[str], skip: Collection[str]) -> pa.Table:
    con = _connect(source, sql, warnings, skip)
    try:
        return _execute(con, sql)
    finally:
        con.close()


def run_query(source: Path, sql: str, warnings: list[str] | None = None) -> pa.Table:
    """The result of ``sql`` over ``source`` as an Arrow table; a SQL error is a
    UsageError naming DuckDB's message. Over a sessions root, a bundle whose files cannot
    be read is left out and named in ``warnings``, not the end of the query."""
    duckdb = _duckdb()
    warned: list[str] = [] if warnings is None else warnings
    try:
        return _attempt(source, sql, warned, ())
    except duckdb.Error as exc:
        error = exc
    if not is_lake(source):
        # only now look for damaged files: reading every footer first would cost each
        # query on a large root
        bad = _unreadable_files(source, _named(sql))
        if bad:
            warned += [f"{f}: left out ({why})" for f, why in sorted(bad.items())]
            try:
                return _attempt(source, sql, [], set(bad))
            except duckdb.Error as exc:
                error = exc
    raise UsageError(f"query failed: {one_line(error)}") from None
