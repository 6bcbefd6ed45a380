"""The replica context: which topics each stage reads, and which stages read each topic (the
offsets table keeps a position per reader, the group member subscribes to every topic)."""

from __future__ import annotations

from floe_jobs import api, config
from floe_jobs.replica import ReplicaContext
from floe_jobs.stopping import Stops

ENV = {
    "FLOE_APP_ID": "word-count",
    "FLOE_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9092",
    "FLOE_KAFKA_TOPICS": "lines,more-lines",
    "FLOE_CASSANDRA_KEYSPACE": "floe",
    "FLOE_JOB_ENTRYPOINT": "examples/word-count/word_count.py",
}


def _context() -> ReplicaContext:
    job = api.Job()
    for name, source in [("split", None), ("audit", None), ("count", "split")]:
        job.stages.append(api.Stage(name=name, fn=lambda batch: None, source=source))
    return ReplicaContext.of(config.load(environ=ENV), job, member_name="replica-0")


def test_a_stage_reads_the_input_topics_or_its_sources_repartition_topic() -> None:
    ctx = _context()
    split, _audit, count = ctx.job.stages
    assert ctx.stage_topics(split) == ["lines", "more-lines"]
    assert ctx.stage_topics(count) == ["word-count-split-repartition"]


def test_each_topic_is_read_by_the_stages_in_job_order() -> None:
    assert _context().readers() == {
        "lines": ["split", "audit"],
        "more-lines": ["split", "audit"],
        "word-count-split-repartition": ["count"],
    }


def test_the_member_subscribes_to_every_topic_once() -> None:
    assert _context().all_topics() == ["lines", "more-lines", "word-count-split-repartition"]


def test_the_owner_is_the_member_name_and_a_token_of_the_process() -> None:
    first, second = _context(), _context()
    assert first.member == "replica-0" and first.app == "word-count"
    assert first.owner.startswith("replica-0/") and first.owner != second.owner


def test_the_lanes_stop_on_a_signal_or_when_a_lane_gives_up() -> None:
    signalled, halted = Stops(), Stops()
    assert not signalled.should_stop()
    signalled.stop_requested.set()
    halted.halt.set()
    assert signalled.should_stop() and halted.should_stop()
