"""One small name registry shared by spaces, trainables, schedulers and searchers."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from tune_runner.errors import UserError, unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects; entries may be "module:attr" strings imported on first use.

    Heavy optional dependencies (RLlib, Optuna) stay unimported until a name that needs
    them is looked up.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T | str] = {}

    def register(self, name: str, obj: T | str | None = None) -> Callable[[T], T] | None:
        """`@registry.register("name")` on a class or function, or `register("name", "mod:attr")`."""
        if obj is not None:
            self._entries[name] = obj
            return None

        def decorate(target: T) -> T:
            self._entries[name] = target
            return target

        return decorate

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries  # a mapping given for a name is no name, not a crash

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def in_order(self) -> list[str]:
        """The registered names in the order they were registered: a listing that puts the most used first."""
        return list(self._entries)

    def peek(self, name: str) -> T | str | None:
        """The entry as stored (a lazy "module:attr" string stays a string), or None; imports nothing."""
        return self._entries.get(name)

    def get(self, name: str) -> T:
        """The object for `name`; an unknown name is a UserError naming the closest choice."""
        if name not in self:
            raise UserError(unknown_name(self.what, name, self._entries))
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module), attr)
            self._entries[name] = entry
        return entry  # type: ignore[return-value]
