"""Lazy package exports: names resolve to their modules on first use (PEP 562)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: Mapping[str, Any]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose ``exports`` map each name to its module.

    Example:
        >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"}, {})
        >>> getattr_("sqrt")(9.0), dir_()
        (3.0, ['sqrt'])
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
