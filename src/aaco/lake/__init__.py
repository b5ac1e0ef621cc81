"""Sessions beyond one folder: the lake (Hive-partitioned Parquet of many sessions' summary
rows and tables, :mod:`~aaco.lake.export`), SQL over a lake or a sessions root
(:mod:`~aaco.lake.query`), and metrics for Prometheus (:mod:`~aaco.lake.prometheus`)."""
