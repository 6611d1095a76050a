"""The space grammar: each distribution → the right Tune domain; every bad input → a clear error."""

from __future__ import annotations

import random

import pytest
from ray.tune.search.sample import Categorical, Float, Integer, LogUniform, Quantized

from tune_runner.errors import UserError
from tune_runner.spec.search_space import parse_param, parse_space, randint_bounds

WHERE = "space.yaml: space.x"


def domain(spec):
    return parse_param("x", spec, where=WHERE).to_tune()


def test_uniform_maps_to_float_domain_with_bounds():
    d = domain({"uniform": [0.9, 0.99]})
    assert isinstance(d, Float) and (d.lower, d.upper) == (0.9, 0.99)
    assert not isinstance(d.get_sampler(), LogUniform)


def test_loguniform_maps_to_log_sampler():
    d = domain({"loguniform": [1.0e-5, 1.0e-2]})
    assert isinstance(d, Float) and isinstance(d.get_sampler(), LogUniform)
    assert (d.lower, d.upper) == (1.0e-5, 1.0e-2)


def test_quniform_is_quantized():
    d = domain({"quniform": [0, 1, 0.25]})
    assert isinstance(d.get_sampler(), Quantized) and d.get_sampler().q == 0.25
    values = {d.sample(random_state=random.Random(i).randint(0, 10_000)) for i in range(200)}
    assert values <= {0.0, 0.25, 0.5, 0.75, 1.0}


def test_randint_is_inclusive_at_both_ends():
    assert randint_bounds(3, 10) == (3, 11)
    d = domain({"randint": [3, 5]})
    assert isinstance(d, Integer) and (d.lower, d.upper) == (3, 6)
    seen = {d.sample(random_state=seed) for seed in range(300)}
    assert seen == {3, 4, 5}


def test_choice_and_grid():
    d = domain({"choice": [64, 128, [32, 32]]})
    assert isinstance(d, Categorical) and d.categories == [64, 128, [32, 32]]
    assert domain({"grid": [1, 2, 3]}) == {"grid_search": [1, 2, 3]}


def test_parse_space_keeps_order_and_names():
    params = parse_space({"b": {"choice": [1]}, "a": {"uniform": [0, 1]}}, where="f.yaml")
    assert [p.name for p in params] == ["b", "a"]
    assert params[1].describe() == "uniform(0, 1)"


@pytest.mark.parametrize("spec, expected", [
    ({"loguniform": ["1e-5", 1.0e-2]}, "space.x: loguniform bounds must be numbers, got '1e-5' (a string); "
                                       "write 1.0e-5 (YAML reads 1e-5 as text)"),
    ({"uniform": [1.0, 0.5]}, "needs low < high, got low=1.0 high=0.5"),
    ({"uniform": [1, 1]}, "needs low < high"),
    ({"loguniform": [0, 1]}, "loguniform bounds must be > 0, got low=0"),
    ({"loguniform": [-1.0, 1]}, "loguniform bounds must be > 0"),
    ({"randint": [1.5, 3]}, "randint bounds must be integers"),
    ({"uniform": [0]}, "uniform takes 2 numbers, got 1"),
    ({"quniform": [0, 1]}, "quniform takes 3 numbers, got 2"),
    ({"quniform": [0, 1, 0]}, "quniform step must be > 0"),
    ({"normal": [0, 1]}, "unknown distribution 'normal'"),
    ({"unifrom": [0, 1]}, "did you mean 'uniform'?"),
    ({"uniform": [0, 1], "choice": [1]}, "expected exactly one distribution key"),
    (0.5, "expected exactly one distribution key like {loguniform: [1.0e-5, 1.0e-2]}, got 0.5"),
    ({"choice": []}, "choice takes a non-empty list"),
    ({"uniform": "0, 1"}, "uniform takes a non-empty list"),
    ({"uniform": [True, 2]}, "bounds must be finite numbers"),
    ({"uniform": [float("nan"), 2]}, "bounds must be finite numbers"),
])
def test_bad_parameter_names_file_key_value_and_fix(spec, expected):
    with pytest.raises(UserError) as info:
        parse_param("x", spec, where=WHERE)
    message = str(info.value)
    assert message.startswith(WHERE) and expected in message
    assert "\n" not in message
