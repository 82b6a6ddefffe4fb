"""Storage: where tables come from and where runs go.

- :mod:`~crowdflow.storage.io`: readers (CSV/TSV, Parquet files and folders, SQL) into canonical columns;
- :mod:`~crowdflow.storage.datasets`: partitioned inputs listed where they live and read file by file;
- :mod:`~crowdflow.storage.warehouse`: SQL sources and output loads (DuckDB, PostgreSQL);
- :mod:`~crowdflow.storage.run_store`, :mod:`~crowdflow.storage.runs`, :mod:`~crowdflow.storage.manifest`: the
  run folder, its manifest, and completed runs read back;
- :mod:`~crowdflow.storage.fingerprints`: content fingerprints (cache keys);
- :mod:`~crowdflow.storage.secrets`: credentials kept out of everything a run records.

Storage depends on :mod:`crowdflow.contracts`, never the reverse.
"""
