"""Plugin files shipped to a joined cluster, without a cluster: the staged package and the spec the trials see
agree on each file's module (tests/test_cluster_e2e.py runs a search that imports them on a second node)."""

from __future__ import annotations

from dataclasses import replace

from tune_runner.search.cluster import SHIPPED_PLUGINS, shipped_names, stage_plugins, trial_plugins
from tune_runner.spec.experiment import load_spec


def test_staged_plugins_are_the_modules_the_trials_import(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my-env.py").write_text("X = 1\n")
    (mine / "agent.v2.py").write_text("Y = 2\n")
    plugins = (str(mine / "my-env.py"), str(mine / "agent.v2.py"))
    spec = replace(load_spec("oracle"), plugins=plugins + ("module:already.there",))
    staging = tmp_path / "staging"
    staging.mkdir()

    package = stage_plugins(plugins, staging)
    assert package == staging / SHIPPED_PLUGINS
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", "p0_my_env.py", "p1_agent_v2.py"]
    assert (package / "p1_agent_v2.py").read_text() == "Y = 2\n"
    shipped = shipped_names(plugins)  # what joining the cluster answers, for the trials
    assert shipped == {plugins[0]: "module:tune_rl_user_plugins.p0_my_env",
                       plugins[1]: "module:tune_rl_user_plugins.p1_agent_v2"}
    assert trial_plugins(spec, shipped).plugins == (*shipped.values(), "module:already.there")
    assert trial_plugins(spec, {}).plugins == spec.plugins  # a local Ray: the trials read the files themselves
