"""Key and value serdes: how Python objects become the `blob` columns of a store table.

The byte layouts of the built-in serdes are those of Kafka's Java serdes, so a table shared
with a Kafka Streams app that uses kafka-streams-cassandra-state-store reads the same both
ways:

| serde            | Python type | bytes                                         | Kafka serde   |
|------------------|-------------|-----------------------------------------------|---------------|
| `BYTES`          | bytes       | as is                                         | ByteArraySerde|
| `STR`            | str         | UTF-8                                         | StringSerde   |
| `INT`            | int         | 4-byte big-endian two's complement            | IntegerSerde  |
| `LONG`           | int         | 8-byte big-endian two's complement            | LongSerde     |
| `FLOAT`          | float       | 8-byte big-endian IEEE 754 double             | DoubleSerde   |
| `FLOAT32`        | float       | 4-byte big-endian IEEE 754 single             | FloatSerde    |
| `JSON`           | JSON value  | compact UTF-8 JSON (sorted keys)              | (none)        |

Blob keys sort as unsigned bytes in Cassandra, so ranges over `INT`/`LONG` keys follow numeric
order only for non-negative numbers (the same caveat as Kafka's own stores).

`VersionedSerde` puts a schema version in front of every value and upgrades old values on
read, so a job can change the shape of its state without a crash loop or lost data.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from floe_jobs.stores.errors import SerdeError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Serde(Protocol[T]):
    """Turns values into bytes and back; `parse`/`to_json` serve the HTTP query endpoint."""

    name: str

    def encode(self, value: T, /) -> bytes: ...

    def decode(self, data: bytes, /) -> T: ...

    def parse(self, text: str, /) -> T:
        """Reads a value from its text form (as it appears in a URL)."""
        ...

    def to_json(self, value: T, /) -> object:
        """Turns a value into something `json.dumps` accepts."""
        ...


class BytesSerde:
    """Bytes as they are. Text form: hexadecimal; JSON form: base64."""

    name = "bytes"

    def encode(self, value: bytes, /) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SerdeError(f"bytes serde expects bytes, got {type(value).__name__}")
        return bytes(value)

    def decode(self, data: bytes, /) -> bytes:
        return bytes(data)

    def parse(self, text: str, /) -> bytes:
        try:
            return bytes.fromhex(text)
        except ValueError as exc:
            raise SerdeError(f"bytes keys are given in hexadecimal, got {text!r}") from exc

    def to_json(self, value: bytes, /) -> object:
        return base64.b64encode(value).decode("ascii")


class StrSerde:
    """UTF-8 text (Kafka's StringSerde)."""

    name = "str"

    def encode(self, value: str, /) -> bytes:
        if not isinstance(value, str):
            raise SerdeError(f"str serde expects str, got {type(value).__name__}")
        return value.encode("utf-8")

    def decode(self, data: bytes, /) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SerdeError(f"not UTF-8: {exc}") from exc

    def parse(self, text: str, /) -> str:
        return text

    def to_json(self, value: str, /) -> object:
        return value


class _StructIntSerde:
    name = "int"
    _struct = struct.Struct(">i")
    _bits = 32

    def encode(self, value: int, /) -> bytes:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SerdeError(f"{self.name} serde expects int, got {type(value).__name__}")
        try:
            return self._struct.pack(value)
        except struct.error as exc:
            raise SerdeError(f"{value} does not fit in a signed {self._bits}-bit integer") from exc

    def decode(self, data: bytes, /) -> int:
        if len(data) != self._struct.size:
            raise SerdeError(f"{self.name} serde expects {self._struct.size} bytes, got {len(data)}")
        value: int = self._struct.unpack(data)[0]
        return value

    def parse(self, text: str, /) -> int:
        try:
            return int(text)
        except ValueError as exc:
            raise SerdeError(f"not an integer: {text!r}") from exc

    def to_json(self, value: int, /) -> object:
        return value


class IntSerde(_StructIntSerde):
    """Signed 32-bit big-endian (Kafka's IntegerSerde)."""

    name = "int"
    _struct = struct.Struct(">i")
    _bits = 32


class LongSerde(_StructIntSerde):
    """Signed 64-bit big-endian (Kafka's LongSerde)."""

    name = "long"
    _struct = struct.Struct(">q")
    _bits = 64


class _StructFloatSerde:
    name = "float"
    _struct = struct.Struct(">d")

    def encode(self, value: float, /) -> bytes:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SerdeError(f"{self.name} serde expects float, got {type(value).__name__}")
        return self._struct.pack(float(value))

    def decode(self, data: bytes, /) -> float:
        if len(data) != self._struct.size:
            raise SerdeError(f"{self.name} serde expects {self._struct.size} bytes, got {len(data)}")
        value: float = self._struct.unpack(data)[0]
        return value

    def parse(self, text: str, /) -> float:
        try:
            return float(text)
        except ValueError as exc:
            raise SerdeError(f"not a number: {text!r}") from exc

    def to_json(self, value: float, /) -> object:
        return value


class FloatSerde(_StructFloatSerde):
    """IEEE 754 double, big-endian (Kafka's DoubleSerde): Python floats round-trip exactly."""

    name = "float"
    _struct = struct.Struct(">d")


class Float32Serde(_StructFloatSerde):
    """IEEE 754 single, big-endian (Kafka's FloatSerde): loses precision beyond ~7 digits."""

    name = "float32"
    _struct = struct.Struct(">f")


class JsonSerde:
    """Compact UTF-8 JSON with sorted keys, so equal values encode to equal bytes."""

    name = "json"

    def encode(self, value: Any, /) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise SerdeError(f"not JSON-serializable: {exc}") from exc

    def decode(self, data: bytes, /) -> Any:
        try:
            return json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise SerdeError(f"not JSON: {exc}") from exc

    def parse(self, text: str, /) -> Any:
        try:
            return json.loads(text)
        except ValueError:
            return text

    def to_json(self, value: Any, /) -> object:
        return value


@dataclass(frozen=True)
class FunctionSerde(Generic[T]):
    """A serde from plain functions: the pluggable way for formats Floe does not ship."""

    name: str
    encoder: Callable[[T], bytes]
    decoder: Callable[[bytes], T]
    parser: Callable[[str], T] | None = None
    jsonifier: Callable[[T], object] | None = None

    def encode(self, value: T, /) -> bytes:
        try:
            return self.encoder(value)
        except SerdeError:
            raise
        except Exception as exc:
            raise SerdeError(f"{self.name} encoder failed: {exc!r}") from exc

    def decode(self, data: bytes, /) -> T:
        try:
            return self.decoder(data)
        except SerdeError:
            raise
        except Exception as exc:
            raise SerdeError(f"{self.name} decoder failed: {exc!r}") from exc

    def parse(self, text: str, /) -> T:
        if self.parser is None:
            raise SerdeError(f"serde {self.name} cannot read values from text")
        return self.parser(text)

    def to_json(self, value: T, /) -> object:
        if self.jsonifier is None:
            return value if isinstance(value, str | int | float | bool | list | dict) else repr(value)
        return self.jsonifier(value)


# The header of a versioned value: a marker byte, then the version as an unsigned 16-bit int.
# 0xFE cannot start a UTF-8 text or a JSON document, so unversioned legacy values written
# with those serdes are told apart reliably.
VERSION_MARKER = 0xFE
_VERSION_HEADER = struct.Struct(">BH")

Upgrade = Callable[[Any], Any]


class VersionedSerde:
    """Writes `current_version` in front of every value; upgrades older values when reading.

    `upgrades[v]` turns a decoded version-`v` value into a version-`v+1` value; reading a
    version-1 value with `current_version=3` applies `upgrades[1]` then `upgrades[2]`.
    `readers[v]` is the serde that decodes version-`v` payloads (default: `inner`), for when
    the byte format itself changed (e.g. from str to JSON). `legacy_version`, when set, is the
    version assumed for values without a header (written before the serde was adopted).

    A value written by a newer job (version > current), a missing upgrade step or a failing
    upgrade raise `SerdeError` carrying the schema version; nothing is dropped silently.
    """

    def __init__(
        self,
        inner: Serde[Any],
        *,
        current_version: int,
        upgrades: Mapping[int, Upgrade] | None = None,
        readers: Mapping[int, Serde[Any]] | None = None,
        legacy_version: int | None = None,
    ) -> None:
        if not 0 <= current_version <= 0xFFFF:
            raise ValueError(f"current_version must be in 0..65535, got {current_version}")
        self.inner = inner
        self.current_version = current_version
        self.upgrades = dict(upgrades or {})
        self.readers = dict(readers or {})
        self.legacy_version = legacy_version
        self.name = f"versioned({inner.name}, v{current_version})"
        known = [v for v in (*self.readers, *self.upgrades, legacy_version) if v is not None]
        if known:
            missing = [v for v in range(min(known), current_version) if v not in self.upgrades]
            if missing:
                raise ValueError(f"no upgrade from schema version(s) {missing} to {current_version}")

    def encode(self, value: Any, /) -> bytes:
        return _VERSION_HEADER.pack(VERSION_MARKER, self.current_version) + self.inner.encode(value)

    def version_of(self, data: bytes) -> int | None:
        """The schema version in a stored value's header, or None for a headerless value."""
        if len(data) >= _VERSION_HEADER.size and data[0] == VERSION_MARKER:
            return int(_VERSION_HEADER.unpack_from(data)[1])
        return None

    def decode(self, data: bytes, /) -> Any:
        version = self.version_of(data)
        if version is None:
            if self.legacy_version is None:
                raise SerdeError("value has no schema version header and no legacy_version is set")
            version, payload = self.legacy_version, data
        else:
            payload = data[_VERSION_HEADER.size :]
        if version > self.current_version:
            raise SerdeError(
                f"value was written with schema version {version}, newer than this reader's "
                f"{self.current_version}; deploy the newer job or add a downgrade",
                schema_version=version,
            )
        reader = self.readers.get(version, self.inner)
        try:
            value = reader.decode(payload)
        except SerdeError as exc:
            raise SerdeError(f"payload does not decode: {exc}", schema_version=version) from exc
        for step in range(version, self.current_version):
            upgrade = self.upgrades.get(step)
            if upgrade is None:
                raise SerdeError(
                    f"no upgrade from schema version {step} to {step + 1}", schema_version=version
                )
            try:
                value = upgrade(value)
            except Exception as exc:
                raise SerdeError(
                    f"upgrade from schema version {step} to {step + 1} failed: {exc!r}",
                    schema_version=version,
                ) from exc
        return value

    def parse(self, text: str, /) -> Any:
        return self.inner.parse(text)

    def to_json(self, value: Any, /) -> object:
        return self.inner.to_json(value)


BYTES = BytesSerde()
STR = StrSerde()
INT = IntSerde()
LONG = LongSerde()
FLOAT = FloatSerde()
FLOAT32 = Float32Serde()
JSON = JsonSerde()

_BY_NAME: dict[str, Serde[Any]] = {
    s.name: s for s in (BYTES, STR, INT, LONG, FLOAT, FLOAT32, JSON)
}


def by_name(name: str) -> Serde[Any]:
    """The built-in serde called `name` (bytes, str, int, long, float, float32, json)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown serde {name!r}; known: {', '.join(sorted(_BY_NAME))}") from None
