"""`smac` (searchers/_smac.py): SMAC3's multi-fidelity facade asked and told as Tune does it, without Ray.

The objective is the oracle's (trainables/oracle.py): a config's peak return, reached by `rate` of the gap per
1000 env steps, so a larger budget scores higher and a better config scores higher at every budget.
"""

from __future__ import annotations

import math

import pytest

from tune_runner.errors import UserError
from tune_runner.spec.experiment import Component, build_spec
from tune_runner.spec.reserved import BUDGET_KEY
from tune_runner.spec.search_space import parse_space
from tune_runner.trainables.oracle import peak

OPTIMUM = {"lr": 1.0e-3, "x": 0.3}
SPACE = {"lr": {"loguniform": [1.0e-5, 1.0e-1]}, "x": {"uniform": [0.0, 1.0]}}
BUDGET = 9000


def oracle_return(config: dict) -> float:
    """The oracle's return after the config's budget: peak x (1 - 0.7^iterations), 1000 env steps each."""
    level = peak({**config, "optimum": OPTIMUM, "log_scale": ["lr"]})
    return level * (1 - 0.7 ** (config[BUDGET_KEY] / 1000))


def smac(num_samples: int = 16, **settings):
    from tune_runner.searchers import build_searcher

    return build_searcher(Component("smac", {"seed": 1, **settings}), params=parse_space(SPACE, where="s.yaml"),
                          where="s.yaml", budget=BUDGET, num_samples=num_samples)


def run(searcher, trials: int) -> list[tuple[dict, float]]:
    """Tune's use of a searcher with 2 trials at a time: ask, and tell the older of two pending trials."""
    told, pending = [], []
    for i in range(trials):
        pending.append((f"t{i}", searcher.suggest(f"t{i}")))
        if len(pending) == 2 or i == trials - 1:
            for trial_id, config in pending[:1] if i < trials - 1 else pending:
                value = oracle_return(config)
                searcher.on_trial_complete(trial_id, {"episode_return_mean": value, "env_steps": config[BUDGET_KEY]})
                told.append((config, value))
            pending = pending[1:] if i < trials - 1 else []
    return told


@pytest.fixture(scope="module")
def maximized() -> list[tuple[dict, float]]:
    """Hyperband's first bracket (13 trials) and the start of the next: SMAC's asks cost ~0.2 s each here."""
    return run(smac(), 16)


def test_smac_gives_hyperband_budgets_and_promotes_the_better_configs(maximized, forbid_ray):
    told = maximized
    budgets = sorted({config[BUDGET_KEY] for config, _ in told})
    assert budgets == [1000, 3000, 9000], budgets  # min_budget 0.1 x 9000, then x eta 3
    low = [config for config, _ in told if config[BUDGET_KEY] == 1000]
    seen_low = [{k: c[k] for k in SPACE} for c in low]
    # Hyperband's first bracket: 9 configs at 1000 env steps, the best 3 again at 3000, the best one at 9000
    # (a later bracket starts new configs at a larger budget).
    promoted = [c for c, _ in told if c[BUDGET_KEY] > 1000 and {k: c[k] for k in SPACE} in seen_low]
    assert len(promoted) >= 2, told
    # ... and the better ones go on: told max's return as a cost to minimize the wrong way round, SMAC would
    # promote the worst.
    def mean_peak(configs: list[dict]) -> float:
        return sum(peak({**c, "optimum": OPTIMUM, "log_scale": ["lr"]}) for c in configs) / len(configs)

    assert mean_peak(promoted) > mean_peak(low) + 50, (mean_peak(promoted), mean_peak(low))


def test_mode_min_is_told_as_it_is(maximized, forbid_ray):
    """The same search minimizing the negated return promotes the same configs as maximizing the return."""
    from tune_runner.searchers import build_searcher

    minimizer = build_searcher(Component("smac", {"seed": 1}), params=parse_space(SPACE, where="s.yaml"),
                               where="s.yaml", budget=BUDGET, num_samples=16, metric="loss", mode="min")
    told, pending = [], []
    for i in range(16):
        pending.append((f"t{i}", minimizer.suggest(f"t{i}")))
        if len(pending) == 2 or i == 15:
            for trial_id, config in pending[:1] if i < 15 else pending:
                minimizer.on_trial_complete(trial_id, {"loss": -oracle_return(config)})
                told.append(config)
            pending = pending[1:] if i < 15 else []
    assert [c for c, _ in maximized] == told


def test_a_failed_trial_is_told_as_crashed_and_the_search_goes_on(forbid_ray):
    searcher = smac(num_samples=12)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    searcher.on_trial_complete("a", None, error=True)
    searcher.on_trial_complete("b", {"episode_return_mean": math.nan})
    searcher.on_trial_complete("never-asked", {"episode_return_mean": 1.0})  # ignored, as Tune may send it
    assert BUDGET_KEY in first and BUDGET_KEY in second
    assert all(BUDGET_KEY in searcher.suggest(f"t{i}") for i in range(3))


def test_a_pickled_searcher_replays_its_asks_and_tells(forbid_ray):
    """Tune pickles the searcher with the experiment and restores it on resume; SMAC itself cannot be pickled."""
    import pickle

    searcher = smac()
    run(searcher, 5)
    searcher.suggest("pending")  # asked, not told when the search stopped
    restored = pickle.loads(pickle.dumps(searcher))
    assert "pending" in restored._asked
    restored.on_trial_complete("pending", {"episode_return_mean": 100.0})
    searcher.on_trial_complete("pending", {"episode_return_mean": 100.0})
    assert [restored.suggest(f"n{i}") for i in range(3)] == [searcher.suggest(f"n{i}") for i in range(3)]


def test_the_stopper_ends_a_trial_at_its_own_budget_and_counts_it_done():
    from tune_runner.tuning.stopper import BudgetStopper

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": BUDGET},
                       "fixed": {"optimum": OPTIMUM}, "space": SPACE}, name="s", source="s.yaml")
    stop = BudgetStopper(spec)
    own = {"config": {BUDGET_KEY: 3000}}
    assert not stop("t", {"env_steps": 2000, **own}) and stop("t", {"env_steps": 3000, **own})
    assert not stop("t", {"env_steps": 3000, "config": {}})  # no own budget: the space's
    assert spec.ending({"env_steps": 3000, **own}) == "done"
    assert spec.ending({"env_steps": 3000}) == "stopped_early"


def test_reevaluation_retrains_a_candidate_at_the_spaces_budget():
    from tune_runner.results.robust import Candidate
    from tune_runner.tuning.reevaluate import trial_configs

    spec = build_spec({"trainable": "oracle", "env": "CartPole-v1", "budget": {"env_steps": BUDGET},
                       "fixed": {"optimum": OPTIMUM}, "space": SPACE}, name="s", source="s.yaml")
    picks = [Candidate("t1", {"lr": 1e-3, "x": 0.3, BUDGET_KEY: 1000, "seed": 0}, 300.0),
             Candidate("t2", {"lr": 2e-3, "x": 0.4, BUDGET_KEY: 3000, "seed": 0}, 200.0)]
    configs = trial_configs(spec, picks, seeds=2, first_seed=1000, batched=False)
    assert len(configs) == 4 and all(BUDGET_KEY not in c and {"lr", "x"} <= set(c) for c in configs)


@pytest.mark.parametrize(("settings", "message"), [
    ({"eta": 1}, "s.yaml: searcher: smac rejects its settings: eta must be a number above 1"),
    ({"min_budget": 1.5}, "s.yaml: searcher: smac rejects its settings: min_budget is a share of the budget"),
    ({"etta": 2}, "s.yaml: searcher.etta: unknown setting of smac; did you mean 'eta'?"),
    ({"points_to_evaluate": [{"x": 0.5}]}, "s.yaml: searcher: smac cannot start from given points"),
])
def test_bad_settings_are_one_line(settings, message, forbid_ray):
    with pytest.raises(UserError) as caught:
        smac(**settings)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)


def test_without_smac3_installed_the_line_says_how_to_get_it(uninstalled, forbid_ray):
    uninstalled("smac")
    with pytest.raises(UserError, match=r"^s\.yaml: searcher: smac: SMAC3 is not installed here; pip install"):
        smac()
