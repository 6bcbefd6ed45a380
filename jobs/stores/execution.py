"""Statement execution for the stores: bounded retries with backoff, bounded concurrency,
paging, and typed errors.

Transient driver errors (timeouts, unavailable replicas, no host, overload, lost
connections) are retried with exponential backoff up to `RetryPolicy.attempts`, then raised
as `StoreUnavailableError` naming the store, operation, partition and key. Errors retrying
cannot fix (invalid request, unauthorized) raise `StoreQueryError` at once. Nothing fails
silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra import (
    CoordinationFailure,
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
)
from cassandra.cluster import EXEC_PROFILE_DEFAULT, NoHostAvailable, ResponseFuture, ResultSet, Session
from cassandra.connection import ConnectionException
from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage, ServerError
from floe_jobs.stores.errors import StoreQueryError, StoreUnavailableError
from floe_jobs.stores.metrics import StoreMetrics

log = logging.getLogger(__name__)

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimedOut,
    NoHostAvailable,
    ReadTimeout,
    WriteTimeout,
    Unavailable,
    CoordinationFailure,
    ConnectionException,
    OverloadedErrorMessage,
    IsBootstrappingErrorMessage,
    ServerError,
)

Row = Sequence[Any]
Call = tuple[Any, Sequence[Any]]
"""A statement (prepared or text) and its parameters."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently transient Cassandra errors are retried."""

    attempts: int = 4
    base_delay: float = 0.1
    max_delay: float = 2.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")

    def delay(self, attempt: int) -> float:
        """Sleep before attempt `attempt + 1` (attempt counts from 1)."""
        return float(min(self.max_delay, self.base_delay * (2 ** (attempt - 1))))


def profile_or_default(session: Session, name: str) -> object:
    """`name` when the session's cluster has that execution profile, else the default one."""
    if name in session.cluster.profile_manager.profiles:
        return name
    return EXEC_PROFILE_DEFAULT


class Executor:
    """Runs one store's statements: retries, concurrency, paging, error typing, retry metrics."""

    def __init__(
        self,
        session: Session,
        *,
        store: str,
        profile: str,
        retry: RetryPolicy,
        metrics: StoreMetrics,
    ) -> None:
        self.session = session
        self.store = store
        self.profile = profile_or_default(session, profile)
        self.retry = retry
        self.metrics = metrics
        timeout = session.cluster.profile_manager.profiles[self.profile].request_timeout
        self.request_timeout = float(timeout if timeout is not None else session.default_timeout or 10.0)

    # -- errors ---------------------------------------------------------------------------

    def fail(
        self, op: str, exc: BaseException, *, attempts: int, partition: int | None = None, key: Any = None
    ) -> Exception:
        """The typed error for a driver error that ends an operation (and counts it)."""
        self.metrics.error(self.store, op, exc)
        if isinstance(exc, TRANSIENT_ERRORS):
            err: Exception = StoreUnavailableError(
                f"Cassandra unavailable: {type(exc).__name__}: {exc}",
                attempts=attempts, store=self.store, operation=op, partition=partition, key=key,
            )
        else:
            err = StoreQueryError(
                f"Cassandra rejected the statement: {type(exc).__name__}: {exc}",
                store=self.store, operation=op, partition=partition, key=key,
            )
        err.__cause__ = exc
        return err

    # -- one statement --------------------------------------------------------------------

    def execute(
        self, op: str, statement: Any, params: Sequence[Any] | None = None, *,
        partition: int | None = None, key: Any = None,
    ) -> list[Row]:
        """Runs a statement, returning the rows of its first page."""
        rows: list[Row] = self.execute_result(op, statement, params, partition=partition, key=key).current_rows
        return rows

    def execute_result(
        self, op: str, statement: Any, params: Sequence[Any] | None = None, *,
        partition: int | None = None, key: Any = None,
    ) -> ResultSet:
        """Runs a statement, returning the driver's result (column names, first page)."""
        attempt = 1
        while True:
            try:
                return self.session.execute(statement, params, execution_profile=self.profile)
            except TRANSIENT_ERRORS as exc:
                if attempt >= self.retry.attempts:
                    raise self.fail(op, exc, attempts=attempt, partition=partition, key=key) from exc
                self.metrics.bind(self.store, op).retries.inc()
                log.warning(
                    "Retried store statement store=%s operation=%s partition=%s attempt=%d error=%s",
                    self.store, op, partition, attempt, type(exc).__name__,
                )
                time.sleep(self.retry.delay(attempt))
                attempt += 1
            except Exception as exc:
                raise self.fail(op, exc, attempts=attempt, partition=partition, key=key) from exc

    # -- many statements, bounded in flight -----------------------------------------------

    def execute_concurrent(
        self, op: str, calls: Sequence[Call], *, concurrency: int,
        partition: int | None = None, keys: Sequence[Any] | None = None,
    ) -> list[list[Row]]:
        """Runs `calls` with at most `concurrency` in flight; rows of each, in order.

        Transient failures are retried in rounds (after a backoff) up to the retry policy's
        attempts; the first failure that outlives them raises, naming its key.
        """
        results: list[list[Row] | None] = [None] * len(calls)
        pending = list(range(len(calls)))
        attempt = 1
        while pending:
            errors = _Round(
                self.session, self.profile, calls, pending, results, concurrency, self.request_timeout
            ).run()
            if not errors:
                return results  # type: ignore[return-value]
            fatal = [(i, e) for i, e in errors.items() if not isinstance(e, TRANSIENT_ERRORS)]
            if fatal or attempt >= self.retry.attempts:
                index, exc = (fatal or sorted(errors.items()))[0]
                key = keys[index] if keys is not None and index < len(keys) else None
                raise self.fail(op, exc, attempts=attempt, partition=partition, key=key) from exc
            self.metrics.bind(self.store, op).retries.inc(len(errors))
            log.warning(
                "Retried store statements store=%s operation=%s partition=%s failed=%d attempt=%d error=%s",
                self.store, op, partition, len(errors), attempt, type(next(iter(errors.values()))).__name__,
            )
            time.sleep(self.retry.delay(attempt))
            pending = sorted(errors)
            attempt += 1
        return results  # type: ignore[return-value]

    # -- paging ---------------------------------------------------------------------------

    def pages(
        self, op: str, statement: Any, params: Sequence[Any], *, page_size: int,
        partition: int | None = None,
    ) -> Iterator[Row]:
        """Yields the rows of a query page by page; each page fetch is retried on its own.

        Only one page is held in memory at a time.
        """
        bound = statement.bind(params)
        bound.fetch_size = page_size
        paging_state: bytes | None = None
        while True:
            attempt = 1
            while True:
                try:
                    result = self.session.execute(
                        bound, execution_profile=self.profile, paging_state=paging_state
                    )
                    break
                except TRANSIENT_ERRORS as exc:
                    if attempt >= self.retry.attempts:
                        raise self.fail(op, exc, attempts=attempt, partition=partition, key=None) from exc
                    self.metrics.bind(self.store, op).retries.inc()
                    time.sleep(self.retry.delay(attempt))
                    attempt += 1
                except Exception as exc:
                    raise self.fail(op, exc, attempts=attempt, partition=partition, key=None) from exc
            yield from result.current_rows
            paging_state = result.paging_state
            if not paging_state:
                return


class _Round:
    """One pass over the pending calls with at most `concurrency` in flight.

    The first `concurrency` statements go out from the calling thread; each completion (in
    the driver's I/O thread) sends the next one, so the calling thread just waits and no
    thread hands work to another per statement. A future that completes synchronously
    (e.g. no host at all) would make that chain recursive: past a small depth the next
    statement is handed back to the waiting thread instead.

    Statements go out without a per-request client timer (that timer costs about as much
    CPU as the rest of the request path); instead the round has a watchdog: when nothing
    completes for `request_timeout` seconds, every statement still in flight or unsent
    fails with OperationTimedOut (and is retried by the next round, if attempts remain).
    Server-side read/write timeouts still arrive as ReadTimeout/WriteTimeout as usual.
    """

    _MAX_DEPTH = 20

    def __init__(
        self,
        session: Session,
        profile: object,
        calls: Sequence[Call],
        pending: list[int],
        results: list[list[Row] | None],
        concurrency: int,
        request_timeout: float,
    ) -> None:
        self.session = session
        self.profile = profile
        self.calls = calls
        self.pending = pending
        self.results = results
        self.concurrency = max(1, concurrency)
        self.request_timeout = request_timeout
        self.errors: dict[int, BaseException] = {}
        self.total = len(pending)
        self.completed = 0
        self.todo = iter(pending)
        self.in_flight: set[int] = set()
        self.closed = False
        self.last_progress = time.monotonic()
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.handed_back = 0
        self.local = threading.local()

    def run(self) -> dict[int, BaseException]:
        if not self.total:
            return {}
        for _ in range(min(self.concurrency, self.total)):
            self._send_next()
        with self.wake:
            while True:
                while self.handed_back and not self.closed:
                    self.handed_back -= 1
                    self.wake.release()
                    try:
                        self._send_next()
                    finally:
                        self.wake.acquire()
                if self.completed >= self.total:
                    return self.errors
                self.wake.wait(timeout=self.request_timeout)
                if (self.completed < self.total
                        and time.monotonic() - self.last_progress >= self.request_timeout):
                    return self._expire()

    def _expire(self) -> dict[int, BaseException]:
        """Called with the lock held: gives up on what is in flight or unsent."""
        self.closed = True
        timed_out = OperationTimedOut(
            f"no statement completed within {self.request_timeout:.1f}s"
        )
        for index in [*self.in_flight, *self.todo]:
            self.errors[index] = timed_out
        return self.errors

    def _send_next(self) -> None:
        depth = getattr(self.local, "depth", 0)
        if depth > self._MAX_DEPTH:
            with self.wake:
                self.handed_back += 1
                self.wake.notify()
            return
        self.local.depth = depth + 1
        try:
            while True:
                with self.lock:
                    if self.closed:
                        return
                    index = next(self.todo, None)
                    if index is None:
                        return
                    self.in_flight.add(index)
                statement, params = self.calls[index]
                try:
                    future: ResponseFuture = self.session.execute_async(
                        statement, params, timeout=None, execution_profile=self.profile
                    )
                except Exception as exc:
                    self._complete(index, None, exc)
                    continue  # the slot is still free
                future.add_callbacks(self._succeeded, self._failed, callback_args=(index,), errback_args=(index,))
                return
        finally:
            self.local.depth = depth

    def _complete(self, index: int, rows: Any, exc: BaseException | None) -> bool:
        """Records one outcome; False when the round was already given up."""
        with self.wake:
            if self.closed:
                return False
            self.in_flight.discard(index)
            if exc is None:
                self.results[index] = rows if isinstance(rows, list) else list(rows or ())
            else:
                self.errors[index] = exc
            self.completed += 1
            self.last_progress = time.monotonic()
            if self.completed >= self.total:
                self.wake.notify()
            return True

    def _succeeded(self, rows: Any, index: int) -> None:
        if self._complete(index, rows, None):
            self._send_next()

    def _failed(self, exc: BaseException, index: int) -> None:
        if self._complete(index, None, exc):
            self._send_next()
