"""Conditional spaces (`when:` in the space grammar, tune_runner.spec.search_space): the spaces and searcher
classes that the records' `conditional` builders (searchers/_basic.py, _optuna.py, ...) make.

A parameter whose condition fails is not sampled where the searcher can say so, and never reaches a
trial's config (so neither the trainable nor MLflow sees it):

- optuna: a define-by-run function, parents first; Optuna never suggests an inactive parameter.
- hyperopt: a nested choice: each parent's values are the branches, its children live in theirs.
- bohb: a ConfigSpace with an EqualsCondition / InCondition per parent (an AndConjunction for several).
- random and grid: Ray Tune's variant generator samples every parameter; the inactive ones are then
  dropped from each trial's config.
- smac and nevergrad hold the space themselves (searchers/_smac.py, _nevergrad.py).

Ray Tune is imported here, at the top: a record's builder imports this one only when a space has
conditions, after Ray's checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray.tune.search import BasicVariantGenerator
from ray.tune.search.bohb import TuneBOHB
from ray.tune.search.hyperopt import HyperOptSearch

from tune_runner.errors import UserError
from tune_runner.searchers.config_space import from_config_space
from tune_runner.spec.search_space import LIST_DISTS, Param, _freeze, _thaw, prune


class PruningVariantGenerator(BasicVariantGenerator):
    """Ray Tune's random/grid generator whose trials leave out the parameters inactive in their config."""

    def __init__(self, params: Sequence[Param], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.params = tuple(params)

    def next_trial(self) -> Any:
        trial = super().next_trial()
        if trial is not None:
            kept = prune(trial.config, self.params)
            for key in [k for k in trial.config if k not in kept]:
                del trial.config[key]
                trial.evaluated_params.pop(key, None)
        return trial


class DefineByRun:
    """Optuna's define-by-run space: each parameter suggested once its conditions hold, parents first."""

    def __init__(self, params: Sequence[Param]) -> None:
        self.params = tuple(params)

    def __call__(self, trial: Any) -> None:
        chosen: dict[str, Any] = {}
        for param in self.params:
            if param.active(chosen):
                chosen[param.name] = suggest(trial, param)


def suggest(trial: Any, param: Param) -> Any:
    """One Optuna suggestion from a parameter's distribution (randint inclusive at both ends)."""
    if param.dist in LIST_DISTS:
        return trial.suggest_categorical(param.name, [_thaw(a) for a in param.args])
    low, high, *rest = param.args
    if param.dist == "randint":  # ours and Optuna's are both inclusive at both ends
        return trial.suggest_int(param.name, low, high)
    if param.dist == "quniform":
        return trial.suggest_float(param.name, low, high, step=rest[0])
    return trial.suggest_float(param.name, low, high, log=param.dist == "loguniform")


def hyperopt_space(params: Sequence[Param], *, where: str) -> dict[str, Any]:
    """The nested hyperopt space: unconditional parameters at the top, each parent an `hp.choice` over one
    branch per value, holding the parent's value and the children active under it."""
    from hyperopt import hp

    children: dict[str, list[Param]] = {}
    for param in params:
        if len(param.when) > 1:
            raise UserError(f"{where}: space.{param.name}.when: hyperopt nests a parameter under one parent's "
                            f"choice, this one names {len(param.when)}; give it one parent, or use searcher optuna")
        if param.when:
            children.setdefault(param.when[0][0], []).append(param)

    def node(param: Param, path: str) -> Any:
        """`param` below the branches in `path`: hyperopt's labels must be unique, and a child active under
        several of its parent's values appears once in each of their branches."""
        label = param.name + path
        if param.name not in children:
            return _hyperopt_domain(hp, param, label)
        branches = []
        for index, value in enumerate(param.args):
            branch = {param.name: _thaw(value)}
            for child in children[param.name]:
                if value in child.when[0][1]:
                    branch[f"{BRANCH}{child.name}"] = node(child, f"{path}{BRANCH}{param.name}={index}")
            branches.append(branch)
        return hp.choice(label, branches)

    return {f"{BRANCH}{p.name}": node(p, "") for p in params if not p.when}


BRANCH = "@"  # hyperopt's labels must be unique: a nested space's keys are its parameters' names behind this


def _hyperopt_domain(hp: Any, param: Param, label: str) -> Any:
    import math

    low, high, *rest = param.args if param.dist not in LIST_DISTS else (None, None)
    if param.dist in LIST_DISTS:
        return hp.choice(label, [_thaw(a) for a in param.args])
    if param.dist == "uniform":
        return hp.uniform(label, low, high)
    if param.dist == "loguniform":
        return hp.loguniform(label, math.log(low), math.log(high))
    if param.dist == "quniform":
        return hp.quniform(label, low, high, rest[0])
    return hp.uniformint(label, low, high)


def flat(nested: dict[str, Any]) -> dict[str, Any]:
    """A suggestion from hyperopt_space's nesting as a flat config of the parameters it chose."""
    out: dict[str, Any] = {}
    for key, value in nested.items():
        name = key.removeprefix(BRANCH)
        if isinstance(value, dict) and name in value:  # a parent's branch: its value and its children
            out[name] = value[name]
            out.update(flat({k: v for k, v in value.items() if k != name}))
        else:
            out[name] = value
    return out


class NestedHyperOptSearch(HyperOptSearch):
    """HyperOptSearch over hyperopt_space's nested space, suggesting flat configs (a listed value as the space
    file wrote it: hyperopt hands a list back as a tuple)."""

    def __init__(self, params: Sequence[Param], **kwargs: Any) -> None:
        self.params = tuple(params)
        super().__init__(**kwargs)

    def suggest(self, trial_id: str) -> dict | None:
        nested = super().suggest(trial_id)
        if not isinstance(nested, dict):
            return nested
        config = flat(nested)
        for param in self.params:
            if param.dist in LIST_DISTS and param.name in config:
                config[param.name] = next(_thaw(a) for a in param.args if a == _freeze(config[param.name]))
        return config


class IndexedBOHB(TuneBOHB):
    """TuneBOHB over config_space's indexed choices, suggesting the choices' own values (quniform's step
    applied, as Ray's conversion of a plain space does not)."""

    def __init__(self, params: Sequence[Param], *, points_to_evaluate: list[dict] | None = None,
                 **kwargs: Any) -> None:
        self.params = tuple(params)
        super().__init__(points_to_evaluate=[self._indexed(p) for p in points_to_evaluate or []] or None, **kwargs)

    def _indexed(self, point: dict[str, Any]) -> dict[str, Any]:
        out = dict(point)
        for param in self.params:
            if param.dist in LIST_DISTS and param.name in out:
                out[param.name] = str([_thaw(a) for a in param.args].index(out[param.name]))
        return out

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        return from_config_space(self.params, config) if isinstance(config, dict) else config
