"""Java classes and static methods the driver has named once, kept for the process's life.

PySpark reaches the JVM through Py4J, and Py4J asks the JVM again every time Python names a
class or one of its static methods: `jvm.PythonSQLUtils.toDataFrame(...)` is a round trip to
resolve `PythonSQLUtils` through the view's imports, one to learn that `toDataFrame` is a method,
and only then the call. PySpark does this for every `F.col`, every Arrow crossing and every
session lookup, many times in every batch (docs/runtime.md, "Fewer round trips to the JVM").

`keep()` makes Py4J remember what a name resolved to: a class or package found through a view
or a package, and a static method or nested class found on a class. A name the JVM has resolved
to a loaded class keeps meaning that class for the JVM's life, and a method stub holds only the
class's name, so a kept answer is the answer Py4J would get again. What is not kept: static
fields, whose values can change; names that failed, which a jar or a `java_import` added later
may make resolvable; the views' own `__dir__`.
"""

from __future__ import annotations

from typing import Any

_KEPT = "_floe_kept"


def keep() -> None:
    """From now on, Py4J resolves each class, package and static method name once per object
    that names it (idempotent; the process's views, packages and classes all share it)."""
    from py4j import java_gateway as jg

    if getattr(jg.JVMView.__getattr__, _KEPT, False):
        return
    jg.JVMView.__getattr__ = _remembering(jg.JVMView.__getattr__, (jg.JavaClass, jg.JavaPackage))
    jg.JavaPackage.__getattr__ = _remembering(jg.JavaPackage.__getattr__, (jg.JavaClass, jg.JavaPackage))
    jg.JavaClass.__getattr__ = _remembering(jg.JavaClass.__getattr__, (jg.JavaMember, jg.JavaClass))


def _remembering(lookup: Any, kept_types: tuple[type, ...]) -> Any:
    """`lookup` (a Py4J `__getattr__`), storing an answer of `kept_types` on the object that was
    asked, where Python finds it next time without calling `__getattr__` at all."""

    def remembered(self: Any, name: str) -> Any:
        found = lookup(self, name)
        if type(found) in kept_types:
            self.__dict__[name] = found
        return found

    setattr(remembered, _KEPT, True)
    return remembered
