"""`nevergrad` (searchers/_nevergrad.py): Ray Tune's NevergradSearch with a budget, a seed and our space, as
Tune asks and tells it, without Ray. The objective is the oracle's peak (trainables/oracle.py)."""

from __future__ import annotations

import math

import pytest

from tune_runner.errors import UserError
from tune_runner.spec.experiment import Component
from tune_runner.spec.search_space import parse_space
from tune_runner.trainables.oracle import peak

OPTIMUM = {"lr": 1.0e-3, "x": 0.3}
SPACE = {"lr": {"loguniform": [1.0e-5, 1.0e-1]}, "x": {"uniform": [0.0, 1.0]},
         "clip": {"quniform": [0.1, 0.5, 0.1]}, "epochs": {"randint": [3, 6]}, "net": {"choice": [[64, 64], [32]]}}


def nevergrad(num_samples: int = 16, metric: str = "episode_return_mean", mode: str = "max", space=None,
              **settings):
    from tune_runner.searchers import build_searcher

    return build_searcher(Component("nevergrad", {"seed": 1, **settings}),
                          params=parse_space(space or SPACE, where="s.yaml"),
                          where="s.yaml", metric=metric, mode=mode, budget=9000, num_samples=num_samples)


def score(config: dict) -> float:
    return peak({**config, "optimum": OPTIMUM, "log_scale": ["lr"]})


def run(searcher, trials: int, *, sign: float = 1.0, metric: str = "episode_return_mean") -> list[dict]:
    configs = []
    for i in range(trials):
        config = searcher.suggest(f"t{i}")
        searcher.on_trial_complete(f"t{i}", {metric: sign * score(config)})
        configs.append(config)
    return configs


def test_a_seed_repeats_the_search_and_another_seed_changes_it(forbid_ray):
    first, again, other = run(nevergrad(), 6), run(nevergrad(), 6), run(nevergrad(seed=2), 6)
    assert first == again
    assert first != other


def test_suggestions_are_in_our_domains_with_quniform_on_its_step(forbid_ray, caplog):
    for config in run(nevergrad(), 12):
        assert set(config) == set(SPACE), config
        assert 1e-5 <= config["lr"] <= 0.1 and 0 <= config["x"] <= 1
        assert config["clip"] in (0.1, 0.2, 0.3, 0.4, 0.5), config  # Ray's conversion drops the step
        assert isinstance(config["epochs"], int) and 3 <= config["epochs"] <= 6
        assert config["net"] in ([64, 64], [32])
    assert "quantization" not in caplog.text  # Ray's warning that it dropped the step, which we keep


def test_it_maximizes_and_mode_min_is_told_as_it_is(forbid_ray):
    """Nevergrad minimizes: a max search must be told the negated return. The same search minimizing the negated
    return asks for the same configs; told the wrong way round, it would head for the corners (peak below 100)."""
    maximized = run(nevergrad(num_samples=24), 24)
    assert max(score(c) for c in maximized) > 450
    assert sum(score(c) > 300 for c in maximized[8:]) >= 8, [round(score(c)) for c in maximized]
    minimized = run(nevergrad(num_samples=24, metric="loss", mode="min"), 24, sign=-1.0, metric="loss")
    assert minimized == maximized


def test_a_failed_trial_is_not_told_and_the_search_goes_on(forbid_ray):
    searcher = nevergrad(num_samples=8)
    searcher.suggest("a"), searcher.suggest("b"), searcher.suggest("c")
    searcher.on_trial_complete("a", None, error=True)
    searcher.on_trial_complete("b", {"episode_return_mean": math.nan})
    searcher.on_trial_complete("c", {"training_iteration": 1})  # ended before it reported the metric
    assert searcher._nevergrad_opt.num_tell == 0
    assert len(run(searcher, 5)) == 5 and searcher._nevergrad_opt.num_tell == 5


@pytest.mark.parametrize("space", [SPACE, {k: SPACE[k] for k in ("lr", "x")}], ids=["five", "two"])
def test_tune_saves_and_restores_it_and_the_search_goes_on(space, tmp_path, forbid_ray):
    """For 2 parameters NGOpt told of one worker picks Cobyla, which runs in a thread and deadlocked when restored
    (Tune asks for several trials at once: told so, NGOpt picks a portfolio that pickles)."""
    searcher = nevergrad(space=space)
    run(searcher, 4)
    searcher.save(str(tmp_path / "searcher.pkl"))
    restored = nevergrad(space=space)
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert [restored.suggest(f"n{i}") for i in range(3)] == [searcher.suggest(f"n{i}") for i in range(3)]


@pytest.mark.parametrize(("settings", "message"), [
    ({"optimizer": "TwoPointDE"}, "s.yaml: searcher.optimizer: unknown nevergrad optimizer 'TwoPointDE'; did you "
                                  "mean 'TwoPointsDE'?"),
    ({"optimiser": "CMA"}, "s.yaml: searcher.optimiser: unknown setting of nevergrad; did you mean 'optimizer'?"),
    ({"optimizer": "Cobyla"}, "s.yaml: searcher.optimizer: Cobyla runs one trial at a time (in a thread of its "
                              "own), and Tune runs several at once; use NGOpt"),
])
def test_bad_settings_are_one_line(settings, message, forbid_ray):
    with pytest.raises(UserError) as caught:
        nevergrad(**settings)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_another_optimizer_by_its_name(forbid_ray):
    searcher = nevergrad(optimizer="TwoPointsDE")
    assert searcher._nevergrad_opt.name == "TwoPointsDE" and nevergrad()._nevergrad_opt.name == "NGOpt"
    assert len(run(searcher, 4)) == 4


def test_without_nevergrad_installed_the_line_says_how_to_get_it(uninstalled, forbid_ray):
    # Imported while nevergrad is there: Ray's module sets `ng = None` once, at import, when nevergrad is missing,
    # and would keep it for every later test of the process (shuffled, one of them ran first here)
    import tune_runner.searchers._nevergrad  # noqa: F401 - it imports ray.tune.search.nevergrad

    uninstalled("nevergrad")
    with pytest.raises(UserError, match=r"^s\.yaml: searcher: nevergrad: nevergrad is not installed here; pip"):
        nevergrad()
