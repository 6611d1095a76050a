"""What a searcher is to the rest of the code: one frozen record per algorithm (`SearcherType`), built from
one `Request`. Each algorithm's private module (`_basic`, `_optuna`, ...) holds its record; the package's
registry names them. Nothing here imports more than the standard library: the command line's help reads the
registry's names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tune_runner.spec.search_space import Param

COMMON = ("seed", "points_to_evaluate", "warm_start", "warm_start_top")  # settings every searcher takes


@dataclass(frozen=True, kw_only=True)
class Request:
    """Everything a record's builder gets: the spec's searcher settings (checked against the record's), the
    searched parameters, the start points (given and warm-start ones), and the search's budget (env steps),
    number of trials and metric, for a searcher that plans with them (smac, nevergrad)."""

    settings: dict
    params: tuple[Param, ...]
    points: list[dict]
    where: str
    metric: str = "episode_return_mean"
    mode: str = "max"
    budget: int | None = None
    num_samples: int = 1

    @property
    def seed(self) -> int | None:
        return self.settings.get("seed")

    @property
    def options(self) -> dict:
        """The searcher's own settings: those all searchers take (COMMON) left out."""
        return {k: v for k, v in self.settings.items() if k not in COMMON}


@dataclass(frozen=True, kw_only=True)
class Conditional:
    """How a searcher searches a space with conditions (`when:`). `holds_space`: the searcher holds the space
    (Tune's param_space then carries the fixed values only); False where Tune samples every parameter and the
    searcher drops the inactive ones from each trial (random, grid)."""

    build: Callable[[Request], Any]
    holds_space: bool = True


@dataclass(frozen=True, kw_only=True)
class SearcherType:
    """One search algorithm, answering every question the code asks about it.

    `build`: the Ray Tune searcher for a space without conditions. `settings`: its own settings, as a list or
    as a function of the given settings (optuna's depend on its sampler). `model_based`: it learns from
    results, so a grid makes no sense with it and it needs a space. `scheduler`: the one scheduler type it
    must run with (BOHB's pair, smac's fifo). `owns_space`: it always holds the searched space itself.
    `conditional`: how it takes a space with `when:` conditions, None where it cannot. `grid_axes`: a
    choice becomes a grid axis (every value tried, num_samples times).
    """

    name: str
    build: Callable[[Request], Any]
    model_based: bool
    settings: Sequence[str] | Callable[[dict], Sequence[str]] = ()
    scheduler: str | None = None
    owns_space: bool = False
    conditional: Conditional | None = None
    grid_axes: bool = False
    members: str | None = None
    """How it fills a population trial (configs_per_trial, searchers/population.py): `draws` the trial-level values
    once and the member values per member, `groups` its points by trial-level values, `fixes` the trial-level values
    when asked for each further member, `member keys` takes spaces of member keys only; None: it cannot, for
    `members_why`."""
    members_why: str = ""

    def accepted(self, settings: dict) -> list[str]:
        """Every setting it takes, given those the spec sets (a UserError for a bad one that decides the rest)."""
        own = self.settings(settings) if callable(self.settings) else self.settings
        return [*COMMON, *own]

    def holds_space(self, *, conditional: bool) -> bool:
        """Whether it holds the searched parameters itself, for a space with or without conditions."""
        return self.owns_space or (conditional and self.conditional is not None and self.conditional.holds_space)
