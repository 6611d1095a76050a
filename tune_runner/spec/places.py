"""One value, one place: a setting a space file gives twice is refused, with both places named.

Each value of a section (the file's top level, or one `backends.<name>` section) has a path: a top-level
setting its key (`num_samples`), `env_config: {size: 5}` the path env_config.size, a `fixed:` or `space:` key
its dotted parts (`replay_buffer_config.capacity`, `env_config.size`), a fixed mapping its keys below that.
Two values whose paths are equal, or one of which holds the other (`space.replay_buffer_config` and
`fixed.replay_buffer_config.capacity`), are one setting given twice. A backend section is compared with itself
only: its values replace the top level's, as the section is meant to (spec.experiment.apply_backend).
"""

from __future__ import annotations

from typing import Any

from tune_runner.errors import UserError

SECTIONS = ("fixed", "space")
NOT_VALUES = ("backends",)  # a top-level key that holds sections, not a value


def check_places(raw: dict, *, where: str) -> None:
    """Refuse a value given twice in the top level of `raw`, or twice in one of its backend sections."""
    _check_section(raw, where=where, at="")
    sections = raw.get("backends")
    if isinstance(sections, dict):
        for name, section in sections.items():
            if isinstance(section, dict):
                _check_section(section, where=where, at=f"backends.{name}.")


def _check_section(section: dict, *, where: str, at: str) -> None:
    found = places(section, at=at)
    for index, (path, place) in enumerate(found):
        for other, other_place in found[index + 1:]:
            if path[:len(other)] == other or other[:len(path)] == path:
                name = ".".join(max(path, other, key=len))
                raise UserError(f"{where}: {name} is given twice, in {place} and {other_place}; keep one")


def drop_replaced(raw: dict, section: dict) -> None:
    """Take out of `raw` (a file's top level) every fixed, searched or env_config value that a value of `section`
    (a backend section) replaces: one at the same path or below it. A section's `fixed: {lr: ...}` ends the top
    level's `space: {lr: ...}`, its `space:` entry a fixed one, its `env_config: {size: 3}` a fixed
    `env_config.size`. A top-level value above the section's (a whole mapping) stays, and is refused as given
    twice once merged."""
    given = [path for path, _ in places(section)]

    def replaced(path: tuple[str, ...]) -> bool:
        return any(path[:len(other)] == other for other in given)

    for part in SECTIONS:
        entries = raw.get(part)
        if isinstance(entries, dict):
            for key in [k for k in entries if replaced(tuple(str(k).split(".")))]:
                del entries[key]
    env_config = raw.get("env_config")
    if isinstance(env_config, dict):
        for key in [k for k in env_config if replaced(("env_config", *str(k).split(".")))]:
            del env_config[key]


def places(section: dict, *, at: str = "") -> list[tuple[tuple[str, ...], str]]:
    """(path, place) for each value `section` gives, in file order; the place as a user finds it in the file."""
    found: list[tuple[tuple[str, ...], str]] = []
    for key, value in section.items():
        if key in SECTIONS or key in NOT_VALUES:
            continue
        shown = f"{at}{key}" if at else f"the top-level {key}"
        found += _leaves((str(key),), value, shown) if key == "env_config" else [((str(key),), shown)]
    for part in SECTIONS:
        entries = section.get(part)
        if not isinstance(entries, dict):
            continue
        for key, value in entries.items():
            path, place = tuple(str(key).split(".")), f"{at}{part}.{key}"
            found += _leaves(path, value, place) if part == "fixed" else [(path, place)]
    return found


def _leaves(path: tuple[str, ...], value: Any, place: str) -> list[tuple[tuple[str, ...], str]]:
    """A mapping's values, each with its own path (a mapping value nests); any other value is one leaf. An empty
    mapping gives no value (a saved spec writes `env_config: {}` beside a searched `space.env_config.K`)."""
    if isinstance(value, dict) and not value:
        return []
    if not isinstance(value, dict):
        return [(path, place)]
    return [leaf for key, inner in value.items()
            for leaf in _leaves((*path, *str(key).split(".")), inner, f"{place}.{key}")]
