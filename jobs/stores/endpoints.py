"""A small HTTP query endpoint over store views, for a job to mount on its aiohttp server.

    GET /stores/<name>/keys/<key>                 -> {"store", "key", "value", "partition"} | 404
    GET /stores/<name>?prefix=…&limit=…           -> {"store", "items": [{"key", "value", "partition"}],
                                                      "limit", "truncated"}
        optional: from=…&to=… (inclusive key range, partitioned stores), reverse=true

Keys in the URL are read with the key serde's `parse` (str as is, int/long as decimal,
bytes as hexadecimal); keys and values go out through the serdes' `to_json` (bytes as
base64). Store calls block on Cassandra, so they run in worker threads, off the event loop.
Errors come back as JSON `{"error": …}` with 400 (bad input or unsupported on this store
type), 404 (unknown store or key) or 503 (Cassandra unavailable).

Every request must carry `Authorization: Bearer <token>`, the app's query token (under the
operator: the Secret `<app>-query`, key `token`, which the pods read and clients may read only
through RBAC on that Secret; docs/security.md), else 401. The endpoint pages out whole stores,
so an endpoint given no token refuses every request rather than serving anyone; only an explicit
`open_access` (local runs) serves without one.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from aiohttp import web
from floe_jobs.stores.errors import (
    SerdeError,
    StoreConfigError,
    StoreError,
    StoreUnavailableError,
    UnsupportedOperationError,
)
from floe_jobs.stores.serdes import Serde

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


class QueryableView(Protocol):
    """What the endpoint needs of a view (`PartitionedView` and `GlobalView` fit)."""

    name: str

    @property
    def key_serde(self) -> Serde[Any]: ...

    @property
    def value_serde(self) -> Serde[Any]: ...

    def locate(self, key: Any) -> tuple[int | None, Any] | None: ...

    def all(self, *, reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]: ...

    def prefix_scan(self, prefix: Any, *, prefix_serde: Serde[Any] | None = None,
                    reverse: bool = False) -> Iterator[tuple[int | None, Any, Any]]: ...


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _status_of(exc: StoreError) -> int:
    if isinstance(exc, StoreUnavailableError):
        return 503
    return 400 if isinstance(exc, UnsupportedOperationError | StoreConfigError) else 500


class QueryHandler:
    """The route handlers; `views` maps a store name to its view."""

    def __init__(self, views: Mapping[str, QueryableView]) -> None:
        self.views = dict(views)

    def _view(self, request: web.Request) -> tuple[str, QueryableView] | web.Response:
        name = request.match_info["name"]
        view = self.views.get(name)
        if view is None:
            return _error(404, f"unknown store {name!r}; known: {', '.join(sorted(self.views)) or 'none'}")
        return name, view

    async def get_key(self, request: web.Request) -> web.Response:
        found_view = self._view(request)
        if isinstance(found_view, web.Response):
            return found_view
        name, view = found_view
        text = request.match_info["key"]
        try:
            key = view.key_serde.parse(text)
        except SerdeError as exc:
            return _error(400, f"store {name}: key {text!r} does not parse: {exc}")
        try:
            found = await asyncio.to_thread(view.locate, key)
        except StoreError as exc:
            log.warning("Failed store query store=%s key=%s error=%s", name, text, exc)
            return _error(_status_of(exc), str(exc))
        if found is None:
            return _error(404, f"store {name}: no value for key {text!r}")
        partition, value = found
        return web.json_response({
            "store": name,
            "key": view.key_serde.to_json(key),
            "value": view.value_serde.to_json(value),
            "partition": partition,
        })

    async def list_entries(self, request: web.Request) -> web.Response:
        found_view = self._view(request)
        if isinstance(found_view, web.Response):
            return found_view
        name, view = found_view
        query = request.query
        try:
            limit = int(query.get("limit", DEFAULT_LIMIT))
        except ValueError:
            return _error(400, f"limit must be an integer, got {query.get('limit')!r}")
        if not 1 <= limit <= MAX_LIMIT:
            return _error(400, f"limit must be within 1..{MAX_LIMIT}, got {limit}")
        reverse = query.get("reverse", "false").lower() in {"1", "true", "yes"}
        prefix_text = query.get("prefix")
        from_text, to_text = query.get("from"), query.get("to")

        def run() -> list[tuple[int | None, Any, Any]]:
            items: Iterator[tuple[int | None, Any, Any]]
            if prefix_text is not None:
                items = view.prefix_scan(view.key_serde.parse(prefix_text), reverse=reverse)
            elif from_text is not None or to_text is not None:
                ranged: Callable[..., Iterator[tuple[int | None, Any, Any]]] | None = getattr(view, "range", None)
                if ranged is None:
                    raise UnsupportedOperationError(
                        "from/to ranges are not supported by global stores", store=view.name, operation="range"
                    )
                items = ranged(
                    None if from_text is None else view.key_serde.parse(from_text),
                    None if to_text is None else view.key_serde.parse(to_text),
                    reverse=reverse,
                )
            else:
                items = view.all(reverse=reverse)
            return list(itertools.islice(items, limit + 1))

        try:
            rows = await asyncio.to_thread(run)
        except SerdeError as exc:
            return _error(400, f"store {name}: bad query parameter: {exc}")
        except StoreError as exc:
            log.warning("Failed store query store=%s error=%s", name, exc)
            return _error(_status_of(exc), str(exc))
        return web.json_response({
            "store": name,
            "items": [
                {"key": view.key_serde.to_json(k), "value": view.value_serde.to_json(v), "partition": p}
                for p, k, v in rows[:limit]
            ],
            "limit": limit,
            "truncated": len(rows) > limit,
        })


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _unauthorized(message: str) -> web.Response:
    response = _error(401, message)
    response.headers["WWW-Authenticate"] = 'Bearer realm="floe-store-queries"'
    return response


def bearer_guard(token: str | None, *, open_access: bool = False) -> Callable[[Handler], Handler]:
    """Wrap a route handler so that it answers only a request bearing `token` (compared in
    constant time). No token and not `open_access`: every request is refused."""

    def wrap(handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if open_access:
                return await handler(request)
            if not token:
                return _unauthorized("this query endpoint has no token configured (FLOE_METRICS_QUERY_TOKEN)")
            scheme, _, given = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given:
                return _unauthorized("send Authorization: Bearer <token>, the key token of the Secret <app>-query")
            if not hmac.compare_digest(given.strip().encode(), token.encode()):
                return _unauthorized("the bearer token is not this app's query token")
            return await handler(request)

        return guarded

    return wrap


def add_routes(
    app: web.Application,
    views: Mapping[str, QueryableView],
    *,
    prefix: str = "",
    token: str | None = None,
    open_access: bool = False,
) -> QueryHandler:
    """Mounts the query routes on `app` (under `prefix`, e.g. "/query"), behind `bearer_guard`."""
    handler = QueryHandler(views)
    guard = bearer_guard(token, open_access=open_access)
    app.router.add_get(prefix + "/stores/{name}/keys/{key:.+}", guard(handler.get_key))
    app.router.add_get(prefix + "/stores/{name}", guard(handler.list_entries))
    return handler


def make_app(
    views: Mapping[str, QueryableView], *, token: str | None = None, open_access: bool = False
) -> web.Application:
    """A standalone aiohttp application serving only the query routes, to holders of `token`."""
    app = web.Application()
    add_routes(app, views, token=token, open_access=open_access)
    return app
