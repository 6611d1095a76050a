"""Our search spaces as ConfigSpace spaces, and back: for the searchers that model a ConfigSpace (bohb, smac).

No Ray here, and ConfigSpace is imported when a space is made: smac's module imports this one without pulling in
Ray Tune's BOHB (hpbandster and statsmodels, about 2 s).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from tune_runner.spec.search_space import LIST_DISTS, Param, _thaw


def config_space(params: Sequence[Param], *, seed: int | None) -> Any:
    """BOHB's ConfigSpace: a choice's values by their index (ConfigSpace would hand back numpy booleans
    and tuples), a condition per parent."""
    import ConfigSpace as CS

    space = CS.ConfigurationSpace(seed=seed)
    made = {}
    for param in params:
        if param.dist in LIST_DISTS:
            made[param.name] = CS.CategoricalHyperparameter(param.name, [str(i) for i in range(len(param.args))])
        elif param.dist == "randint":
            made[param.name] = CS.UniformIntegerHyperparameter(param.name, param.args[0], param.args[1])
        else:
            low, high, *rest = param.args
            made[param.name] = CS.UniformFloatHyperparameter(param.name, low, high,
                                                             log=param.dist == "loguniform")
    space.add(list(made.values()))
    by_name = {p.name: p for p in params}
    for param in params:
        conditions = []
        for parent, values in param.when:
            indices = [str(by_name[parent].args.index(v)) for v in values]
            conditions.append(CS.EqualsCondition(made[param.name], made[parent], indices[0]) if len(indices) == 1
                              else CS.InCondition(made[param.name], made[parent], indices))
        if conditions:
            space.add(conditions[0] if len(conditions) == 1 else CS.AndConjunction(*conditions))
    return space


def from_config_space(params: Sequence[Param], config: dict[str, Any]) -> dict[str, Any]:
    """A configuration of config_space's as the trial's values: a choice's own value for its index, ints as
    ints, quniform's step applied (as Ray's conversion of a plain space does not)."""
    out = copy.deepcopy(config)
    for param in params:
        if param.name not in out:
            continue
        if param.dist in LIST_DISTS:
            out[param.name] = _thaw(param.args[int(out[param.name])])
        elif param.dist == "randint":
            out[param.name] = int(out[param.name])
        elif param.dist == "quniform":
            out[param.name] = param.snapped(out[param.name])
        else:
            out[param.name] = float(out[param.name])
    return out
