"""Plugin files shipped to a joined cluster, without a cluster: the staged package and the spec the trials see
agree on each file's module (tests/test_cluster_e2e.py runs a search that imports them on a second node)."""

from __future__ import annotations

from dataclasses import replace

from tune_runner.cluster.session import SHIPPED_PLUGINS, shipped_names, stage_plugins, trial_plugins
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


def test_only_a_local_ray_this_process_started_is_killed_at_exit_and_only_where_proc_lists_it(monkeypatch):
    """cluster.end_local_ray, with the process table and the signals replaced (nothing is killed here): it ends
    its own local Ray's processes, and leaves a joined cluster, or a system without /proc, to ray.shutdown."""
    import os

    from tune_runner.cluster import reaper
    from tune_runner.cluster import session as cluster

    killed, redirected = [], []
    monkeypatch.setattr(reaper, "marked", lambda driver: [101, 102])
    monkeypatch.setattr(reaper, "descendants", lambda driver: [102, 103])
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.setattr(os, "dup2", lambda fd, fd2: redirected.append(fd2))
    monkeypatch.setattr(cluster, "_LOCAL", {})
    assert cluster.end_local_ray() is False and killed == []  # no local Ray started here: a joined cluster, or none
    monkeypatch.setattr(cluster, "_LOCAL", {"driver": os.getpid() + 1})
    assert cluster.end_local_ray() is False and killed == []  # started by another process (a fork of this one)
    monkeypatch.setattr(cluster, "_LOCAL", {"driver": os.getpid()})
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda path: False if path == "/proc" else real_isdir(path))
    assert cluster.end_local_ray() is False and killed == []  # macOS, Windows: ray.shutdown
    monkeypatch.setattr(os.path, "isdir", real_isdir)
    assert cluster.end_local_ray() is True
    import signal

    assert killed == [(101, signal.SIGKILL), (102, signal.SIGKILL), (103, signal.SIGKILL)] and redirected == [2]
