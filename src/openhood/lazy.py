"""Lazy package attributes: a package lists its names and the submodule of each; the first access imports it.

A package's ``__init__`` runs whenever any of its submodules is imported, so a package that
imported its submodules eagerly made every light import (the CLI parser reading a default from
``scheduler.policy``) pay for the heavy ones (the batcher, NumPy). ``lazy_attributes`` builds the
module-level ``__getattr__`` (PEP 562) that imports a name's submodule on first use and stores the
value in the package, so later lookups never reach it again.

The trade-off: names resolve at first use, so a broken submodule fails there rather than at
``import package``; type checkers see the names through the package's ``TYPE_CHECKING`` imports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, table: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``: ``table`` maps each name to its submodule.

    >>> ns = {}
    >>> getattr_ = lazy_attributes("os", {"join": "path"}, ns)
    >>> getattr_("join") is ns["join"]
    True
    """

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__, not importlib.import_module, so that -X importtime lists the submodule
        value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
        namespace[name] = value  # later lookups skip this function
        return value

    return __getattr__
