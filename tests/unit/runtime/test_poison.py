"""Poison records, the pure part: bisecting a failing batch, the replay of a narrowed plan, and
how an error is named."""

from __future__ import annotations

from collections.abc import Sequence

from floe_jobs import poison
from floe_jobs.planning import OffsetRow, PartitionPlan

T = "lines"


def items(partition: int, start: int, end: int) -> list[poison.Item]:
    return [(T, partition, o) for o in range(start, end)]


class Trials:
    """A trial that fails while any of `bad` is among the records (or while a whole `together`
    group is), counting the trials run."""

    def __init__(self, bad: set[poison.Item], together: Sequence[set[poison.Item]] = ()) -> None:
        self.bad = bad
        self.together = list(together)
        self.runs: list[int] = []

    def __call__(self, chosen: Sequence[poison.Item]) -> str | None:
        self.runs.append(len(chosen))
        got = set(chosen)
        hit = sorted(got & self.bad)
        if hit:
            return f"bad {hit[0]}"
        if any(group <= got for group in self.together):
            return "together"
        return None


def test_isolate_finds_the_one_poison_record_in_about_two_log2_n_trials() -> None:
    batch = items(0, 0, 1000) + items(1, 0, 1000)
    trial = Trials({(T, 1, 417)})
    found = poison.isolate(batch, trial)
    assert found.poison == [((T, 1, 417), "bad ('lines', 1, 417)")]
    assert found.unresolved == []
    assert found.reproduced
    # the whole batch, then two halves per level of an 11-level bisection
    assert found.trials == len(trial.runs) <= 1 + 2 * 11
    assert found.first_failure(T, 1) == (417, "bad ('lines', 1, 417)")
    assert found.first_failure(T, 0) is None


def test_isolate_finds_every_poison_record_in_batch_order() -> None:
    bad = {(T, 0, 3), (T, 0, 4), (T, 2, 99), (T, 1, 0)}
    found = poison.isolate(items(0, 0, 100) + items(1, 0, 100) + items(2, 0, 100), Trials(bad))
    assert [item for item, _ in found.poison] == sorted(bad)
    assert found.first_failure(T, 0) == (3, "bad ('lines', 0, 3)")


def test_a_batch_that_passes_its_trial_blames_no_record() -> None:
    found = poison.isolate(items(0, 0, 50), Trials(set()))
    assert not found.reproduced and not found.found
    assert found.trials == 1


def test_an_empty_batch_runs_no_trial() -> None:
    found = poison.isolate([], Trials(set()))
    assert not found.found and found.trials == 0


def test_records_that_fail_only_together_are_unresolved_not_blamed() -> None:
    # 10 and 90 fail together only: the first split separates them, and neither half fails
    found = poison.isolate(items(0, 0, 100), Trials(set(), together=[{(T, 0, 10), (T, 0, 90)}]))
    assert found.poison == []
    assert found.unresolved == [(items(0, 0, 100), "together")]
    assert found.first_failure(T, 0) == (0, "together")


def test_the_trial_budget_leaves_the_groups_still_failing_unresolved() -> None:
    every = set(items(0, 0, 64))
    found = poison.isolate(items(0, 0, 64), Trials(every), max_trials=9)
    assert found.trials <= 9
    assert found.unresolved
    covered = [i for i, _ in found.poison] + [i for g, _ in found.unresolved for i in g]
    assert sorted(covered) == items(0, 0, 64)


def test_describe_keeps_the_error_line_of_a_python_worker_traceback() -> None:
    text = (
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "job.py", line 12, in split\n'
        "    raise ValueError(f'cannot split {line!r}')\n"
        "ValueError: cannot split 'POISON 1'\n"
    )
    assert poison.describe(RuntimeError(text)) == "ValueError: cannot split 'POISON 1'"


def test_describe_names_the_exception_type_of_a_plain_message_and_clips_it() -> None:
    described = poison.describe(KeyError("x" * 1000))
    assert described.startswith("KeyError: 'xxx")
    assert len(described) == poison.ERROR_CHARS


def test_dead_letter_headers_are_those_of_decode_json_and_the_stage() -> None:
    headers = dict(poison.dead_letter_headers("split", T, 2, 40, "ValueError: x"))
    assert headers == {
        "floe.error": b"ValueError: x",
        "floe.topic": b"lines",
        "floe.partition": b"2",
        "floe.offset": b"40",
        "floe.stage": b"split",
    }


def plan(partition: int, seq: int, start: int, end: int, *, replay: bool) -> PartitionPlan:
    return PartitionPlan(T, partition, seq, start, end, replay=replay, stamp=seq * 10)


def test_a_new_plan_is_clean_until_its_batch_has_an_effect() -> None:
    kept = poison.Narrowed()
    kept.claimed("split", [plan(0, 5, 0, 100, replay=False)], taken_from_another=set())
    assert kept.is_clean("split", plan(0, 5, 0, 100, replay=True))
    kept.dirty("split", [plan(0, 5, 0, 100, replay=True)])
    assert not kept.is_clean("split", plan(0, 5, 0, 100, replay=True))


def test_a_replay_of_another_process_plan_is_never_clean() -> None:
    kept = poison.Narrowed()
    kept.claimed("split", [plan(0, 5, 0, 100, replay=False)], taken_from_another=set())
    # another process took the plan over in between: it may have written state
    kept.claimed("split", [plan(0, 5, 0, 100, replay=True)], taken_from_another={(T, 0)})
    assert not kept.is_clean("split", plan(0, 5, 0, 100, replay=True))
    # a replay of a plan this process held last keeps what it knew
    kept.claimed("split", [plan(1, 7, 0, 10, replay=False)], taken_from_another=set())
    kept.claimed("split", [plan(1, 7, 0, 10, replay=True)], taken_from_another=set())
    assert kept.is_clean("split", plan(1, 7, 0, 10, replay=True))


def test_the_replay_of_a_narrowed_plan_keeps_its_sequence_and_range_but_the_stop() -> None:
    kept = poison.Narrowed()
    kept.skip[("split", T, 0)] = (5, {10: "bad", 500: "outside the plan"})
    kept.cut[("split", T, 1)] = (9, 40, "bad 40")
    kept.clean[("split", T, 1)] = 9
    plans = [plan(0, 5, 0, 100, replay=True), plan(1, 9, 20, 80, replay=True), plan(2, 3, 0, 10, replay=True)]
    out, leave_out, stops = kept.apply("split", plans)
    # a dead-lettering replay reads its whole range under its sequence, leaving the records out
    assert out[0] == plans[0]
    assert leave_out == {(T, 0): {10}}
    # a stopping one ends where the partition stops, under the same sequence and stamp
    assert (out[1].seq, out[1].start, out[1].end, out[1].stamp) == (9, 20, 40, 90)
    assert stops == {(T, 1): "bad 40"}
    assert out[2] == plans[2]
    # another stage's batch over the same partitions is left alone
    assert kept.apply("count", plans) == (plans, {}, {})
    kept.committed("split", out)
    assert kept.skip == {} and kept.cut == {}


def test_what_was_kept_for_another_plan_is_dropped() -> None:
    kept = poison.Narrowed()
    kept.skip[("split", T, 0)] = (5, {10: "bad"})
    kept.cut[("split", T, 1)] = (9, 40, "bad")
    # the plans were committed elsewhere: this lane now plans new batches
    out, leave_out, stops = kept.apply("split", [plan(0, 6, 100, 200, replay=False), plan(1, 9, 20, 80, replay=False)])
    assert (leave_out, stops) == ({}, {})
    assert [p.end for p in out] == [200, 80]
    assert kept.skip == {} and kept.cut == {}


def test_a_stop_at_the_first_record_cuts_the_replay_to_nothing() -> None:
    kept = poison.Narrowed()
    kept.cut[("split", T, 1)] = (9, 20, "bad")
    kept.clean[("split", T, 1)] = 9
    out, _, stops = kept.apply("split", [plan(1, 9, 20, 80, replay=True)])
    assert (out[0].start, out[0].end) == (20, 20)
    assert stops == {(T, 1): "bad"}


def test_a_cut_is_dropped_once_another_process_took_the_plan() -> None:
    kept = poison.Narrowed()
    kept.claimed("split", [plan(1, 9, 20, 80, replay=False)], taken_from_another=set())
    kept.cut[("split", T, 1)] = (9, 40, "bad")
    # between the narrowing and the replay another process claimed the plan: it may have written
    # state for records past 40, which a commit cut at 40 would leave to be applied again later
    kept.taken("split", [(T, 1)])
    out, _, stops = kept.apply("split", [plan(1, 9, 20, 80, replay=True)])
    assert (out[0].end, stops) == (80, {})
    assert kept.cut == {}


def test_a_row_is_stopped_while_its_committed_position_is_the_stop() -> None:
    assert OffsetRow(T, 0, next_offset=40, stopped_at=40, stopped_error="bad").stopped
    # a commit past it (another process with a fixed image) moved on
    assert not OffsetRow(T, 0, next_offset=41, stopped_at=40).stopped
    assert not OffsetRow(T, 0, next_offset=40).stopped


def test_stop_message_names_topic_partition_offset_and_error() -> None:
    message = poison.stop_message(T, 2, 40, "ValueError: x")
    assert message == "topic lines partition 2 stopped at offset 40: ValueError: x"


def test_a_batch_of_which_no_part_passes_is_a_fault_of_the_stage_not_of_its_records() -> None:
    """A store table dropped under a stage fails every trial, whatever records it holds: nothing
    is blamed, so no good record is stopped or dead-lettered."""
    items = [("t", 0, o) for o in range(40)]
    found = poison.isolate(items, lambda group: "InvalidRequest: unconfigured table")
    assert found.every_record_fails
    one_bad = poison.isolate(items, lambda group: "ValueError: bad" if ("t", 0, 7) in group else None)
    assert not one_bad.every_record_fails and [i for i, _ in one_bad.poison] == [("t", 0, 7)]
    alone = poison.isolate(items[:1], lambda group: "ValueError: bad")
    assert not alone.every_record_fails and [i for i, _ in alone.poison] == [("t", 0, 0)]
