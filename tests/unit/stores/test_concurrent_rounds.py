"""The concurrent round's own logic (bounded in flight, watchdog, no recursion), driven by a
stand-in session whose futures the test completes by hand. Real-Cassandra behaviour of the
same code is covered in tests/integration/stores."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cassandra import OperationTimedOut
from floe_jobs.stores.execution import _Round


class Future:
    def __init__(self, outcome: Any = None, done: bool = False) -> None:
        self.outcome = outcome
        self.done = done
        self.callbacks: tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...], tuple[Any, ...]] | None = None

    def add_callbacks(self, callback: Callable[..., Any], errback: Callable[..., Any], *,
                      callback_args: tuple[Any, ...], errback_args: tuple[Any, ...]) -> None:
        self.callbacks = (callback, errback, callback_args, errback_args)
        if self.done:
            self.fire()

    def fire(self) -> None:
        assert self.callbacks is not None
        callback, errback, cargs, eargs = self.callbacks
        if isinstance(self.outcome, BaseException):
            errback(self.outcome, *eargs)
        else:
            callback(self.outcome, *cargs)


class Session:
    def __init__(self, make: Callable[[Any], Future]) -> None:
        self.make = make
        self.sent: list[Any] = []
        self.futures: list[Future] = []
        self.lock = threading.Lock()

    def execute_async(self, statement: Any, params: Any, *, timeout: Any, execution_profile: Any) -> Future:
        with self.lock:
            self.sent.append(params)
            future = self.make(params)
            self.futures.append(future)
            return future


def test_never_more_than_concurrency_in_flight_and_results_in_order() -> None:
    session = Session(lambda params: Future([(params[0] * 10,)]))
    n = 50
    results: list[Any] = [None] * n
    calls = [("stmt", (i,)) for i in range(n)]
    round_ = _Round(session, "p", calls, list(range(n)), results, 4, 5.0)  # type: ignore[arg-type]
    thread = threading.Thread(target=round_.run)
    thread.start()
    fired = 0
    while fired < n:
        while len(session.futures) <= fired:
            pass
        assert len(session.futures) - fired <= 4
        session.futures[fired].fire()
        fired += 1
    thread.join(5)
    assert results == [[(i * 10,)] for i in range(n)]


def test_synchronous_failures_do_not_recurse() -> None:
    session = Session(lambda params: Future(RuntimeError("no host"), done=True))
    n = 5000
    errors = _Round(session, "p", [("s", (i,)) for i in range(n)], list(range(n)), [None] * n,  # type: ignore[arg-type]
                    8, 5.0).run()
    assert len(errors) == n and len(session.sent) == n


def test_watchdog_gives_up_when_nothing_completes() -> None:
    session = Session(lambda params: Future())  # never completes
    n = 10
    errors = _Round(session, "p", [("s", (i,)) for i in range(n)], list(range(n)), [None] * n,  # type: ignore[arg-type]
                    3, 0.05).run()
    assert sorted(errors) == list(range(n))
    assert all(isinstance(e, OperationTimedOut) for e in errors.values())
    assert len(session.sent) == 3  # the unsent ones were never sent
    session.futures[0].outcome = [("late",)]
    session.futures[0].fire()  # a late answer after giving up is ignored
    assert len(session.sent) == 3
