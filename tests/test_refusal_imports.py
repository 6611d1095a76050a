"""A search refused for its env (issue 14) answers before Ray, torch or MLflow is imported.

Each case runs the console script in a fresh interpreter (tests/cli_process.py) on a space whose env or
env_config is bad, and reads its sys.modules afterwards: gymnasium, and only it, must be there (the env
was built: the refusal came from the env check, not from something earlier). A module imported by a
previous test cannot hide a regression, and no clock is read; times are in bench/cli_startup.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_process import run_entry_point
from tests.conftest import HERE
from tests.test_bad_inputs import expected

CORPUS = ["env_config_unknown_kwarg", "env_config_unknown_kwarg_rllib", "env_dqn_continuous_actions",
          "env_rllib_dqn_continuous_actions", "env_ppo_discrete_observations", "env_backend_torch_no_torch_env"]

# A searched env_config key with one bad value, on envs gymnasium ships (no plug-in file is read).
CORNERS = {
    "dqn_corner": ("trainable: dqn\nenv: CartPole-v1\nbudget: {env_steps: 1000}\nspace:\n"
                   "  lr: {loguniform: [1.0e-4, 1.0e-3]}\n"
                   "  env_config.max_episode_steps: {choice: [200, long]}\n",
                   "space.env_config.max_episode_steps = 'long' (a choice): AssertionError: "),
    "rllib_corner": ("trainable: rllib/PPO\nenv: FrozenLake-v1\nbudget: {env_steps: 1000}\nspace:\n"
                     "  env_config.map_name: {choice: [4x4, 5x5]}\n",
                     "space.env_config.map_name = '5x5' (a choice): KeyError: '5x5'; drop that choice"),
}


def refuse(space: Path, says: str, tmp_path: Path) -> None:
    home, before = tmp_path / "home", set(tmp_path.rglob("*"))
    ran = run_entry_point(["search", "--space", str(space)], tmp_path, cwd=tmp_path, env={"TUNE_RL_HOME": str(home)})
    assert ran["status"] == 2 and f"{space}: {says}" in ran["err"], ran["err"]
    assert ran["heavy"] == ["gymnasium"], f"refusing {space.name} imported {ran['heavy']}"
    assert set(tmp_path.rglob("*")) - before == {tmp_path / "report.json"}, "the refusal wrote a file"


@pytest.mark.parametrize("name", CORPUS)
def test_a_bad_env_is_refused_without_ray_or_torch(name, tmp_path):
    space = HERE / "bad_inputs" / f"{name}.yaml"
    refuse(space, expected(space), tmp_path)


@pytest.mark.parametrize("name", CORNERS)
def test_a_bad_searched_env_config_value_is_refused_without_ray_or_torch(name, tmp_path):
    text, says = CORNERS[name]
    space = tmp_path / "spaces" / f"{name}.yaml"
    space.parent.mkdir()
    space.write_text(text)
    refuse(space, says, tmp_path)
