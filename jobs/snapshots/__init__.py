"""Snapshots of a running app's state and positions, and their restore into a new app.

A snapshot is a consistent cut (docs/snapshots.md): per partition of each stage, its offsets row
and the rows of the stores it writes, as of one batch boundary, copied while the app runs
without pausing it. It is written with Spark as Parquet under a URI, the manifest last.

- `manifest`: the manifest's model, its checksum and the checks and positions a restore derives
  from it (pure);
- `cut`: reading one partition's cut from Cassandra, validated against its offsets row;
- `take`: a whole snapshot (`floe-job snapshot`);
- `restore`: loading one into a new app (`floe-job restore`);
- `cli`: the two subcommands.
"""
