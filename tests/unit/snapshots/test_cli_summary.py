"""What `floe-job snapshot` reports: the summary of its manifest, and the bounded copy it writes
to `--summary-file` (a container's termination log, which the operator reads into the
StreamingAppSnapshot's status)."""

from __future__ import annotations

import json

from floe_jobs.snapshots import cli
from floe_jobs.snapshots.manifest import PartitionCut, StageCut, StoreCopy

from .test_manifest import word_count


def test_the_summary_totals_stores_and_tails_and_sums_up_each_stages_cut() -> None:
    summary = cli.snapshot_summary(word_count(), "file:///snapshots/wc")
    assert summary["uri"] == "file:///snapshots/wc"
    assert (summary["bytes"], summary["rows"]) == (10 + 5, 2 + 1)
    assert summary["stores"] == {"word-count": {"rows": 2, "bytes": 10}}
    assert summary["tails"] == {"count": {"rows": 1, "bytes": 5}}
    # split: partition 0 has a plan in flight (planned 5 > committed 4), partition 1 none
    assert summary["stages"] == {
        "split": {"topic": "wc-lines", "partitions": 2, "next_offsets": 210, "in_flight": 1},
        "count": {"topic": "wc-words-repartition", "partitions": 1, "next_offsets": 400, "in_flight": 0},
    }


def test_the_summary_file_keeps_the_totals_and_drops_details_to_fit_a_termination_log() -> None:
    many = [StoreCopy(f"store-{i:03}", "partitioned", f"t{i}", "count", i, "00", i * 10, ["f"]) for i in range(200)]
    big = word_count(stores=many, stages=[StageCut("split", None, "wc-lines", [PartitionCut(p, 1, 1, 1)
                                                                                for p in range(3)])])
    summary = cli.snapshot_summary(big, "s3a://b/p")
    assert len(json.dumps(summary)) > cli.SUMMARY_FILE_LIMIT
    text = cli.bounded_text(summary)
    assert len(text.encode()) <= cli.SUMMARY_FILE_LIMIT
    cut = json.loads(text)
    assert (cut["bytes"], cut["rows"], cut["seconds"]) == (summary["bytes"], summary["rows"], summary["seconds"])
    assert "stores" not in cut and "tails" not in cut
    assert cut["stages"] == summary["stages"]
    small = cli.snapshot_summary(word_count(), "s3a://b/p")
    assert json.loads(cli.bounded_text(small)) == small


def test_summary_file_is_an_option_of_snapshot_only() -> None:
    args = cli._parser("snapshot").parse_args(["--to", "file:///s/x", "--summary-file", "/dev/termination-log"])
    assert args.summary_file == "/dev/termination-log"
    assert cli._parser("snapshot").parse_args(["--to", "file:///s/x"]).summary_file is None
