"""Plug-in registries and loading (tune_runner.plugins), on plug-in files written into tmp_path. No Ray is started."""

from __future__ import annotations

import pickle
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
import ray
from gymnasium.utils.env_checker import check_env
from ray.tune.registry import ENV_CREATOR, _global_registry

from tune_runner import plugins
from tune_runner.algos.learner_envs import make_vec_env
from tune_runner.errors import UserError
from tune_runner.plugins import AGENTS, ENVS, MODELS, load_plugins, register_agent, register_env, register_model
from tune_runner.plugins import envs as env_registry
from tune_runner.plugins.env_api import unwrap_actor_class
from tune_runner.tuning.preflight import check_env as preflight_check_env

HERE = Path(__file__).parent
BAD = HERE / "bad_plugins"

# A minimal gymnasium env body; `{init}` is its __init__ signature, `size` its one setting.
ENV_BODY = '''
import gymnasium as gym
import numpy as np
import ray

from tune_runner.plugins import register_env


class Base(gym.Env):
    metadata = {"render_modes": []}

    def setup(self, size):
        self.size = size
        self.observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.np_random.integers(0, 10)], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), float(action), self.t >= self.size, False, {}
'''


@pytest.fixture(autouse=True)
def _restore_registries(tmp_path_factory: pytest.TempPathFactory, forbid_ray):
    """Each test's registrations are undone after it; the shipped envs stay (they load once).
    Registering and loading never start Ray (forbid_ray fails the test if they try)."""
    load_plugins(cwd=tmp_path_factory.mktemp("empty"))
    saved = {reg: dict(reg._entries) for reg in (ENVS, MODELS, AGENTS)}
    gym_ids, ray_keys, modules = set(gym.envs.registry), set(_global_registry._to_flush), set(sys.modules)
    unshipped, by_value = dict(env_registry._UNSHIPPED), set(plugins._BY_VALUE)
    yield
    env_registry._UNSHIPPED.clear()
    env_registry._UNSHIPPED.update(unshipped)
    plugins._BY_VALUE.clear()
    plugins._BY_VALUE.update(by_value)
    for reg, entries in saved.items():
        reg._entries = entries
    for name in set(gym.envs.registry) - gym_ids:
        del gym.envs.registry[name]
    for key in set(_global_registry._to_flush) - ray_keys:
        del _global_registry._to_flush[key]
    for name in set(sys.modules) - modules:
        if name.startswith(plugins._PLUGIN_PREFIX):
            del sys.modules[name]


def write_plugin(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(ENV_BODY + textwrap.dedent(body))
    return path


def strict_check(env: gym.Env) -> None:
    """gymnasium's env checker with its warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=False)


# ---- register_env: the three accepted forms ---------------------------------------------------------


@pytest.mark.parametrize("init", ["env_config", "config"])
def test_an_env_class_taking_a_config_dict_gets_env_config_from_make_and_make_vec(tmp_path, init):
    path = write_plugin(tmp_path, "dict_env.py", f'''
        @register_env("plug_dict_env")
        class DictEnv(Base):
            def __init__(self, {init}=None):
                self.received = dict({init} or {{}})
                self.setup({init}.get("size", 3) if {init} else 3)
        ''')
    assert load_plugins([path]) == [path.resolve()]
    env = gym.make("plug_dict_env", size=5)
    assert env.unwrapped.received == {"size": 5}
    strict_check(env)
    vec = gym.make_vec("plug_dict_env", num_envs=2, vectorization_mode="sync", size=4)
    assert vec.get_attr("received") == ({"size": 4}, {"size": 4})
    ours = make_vec_env("plug_dict_env", env_config={"size": 6}, num_envs=2, seed=0)  # how our learners make it
    assert ours.env.get_attr("size") == (6, 6) and ours.obs.shape == (2, 1)


def test_an_env_class_with_keyword_arguments_gets_the_keys_as_keywords(tmp_path):
    path = write_plugin(tmp_path, "kw_env.py", '''
        @register_env("plug_kw_env")
        class KwEnv(Base):
            def __init__(self, size=3, render_mode=None):
                self.setup(size)
        ''')
    load_plugins([path])
    assert gym.make("plug_kw_env", size=7).unwrapped.size == 7
    with pytest.raises(TypeError, match="unexpected keyword argument 'sise'"):
        gym.make("plug_kw_env", sise=7)


def test_a_creator_function_gets_the_env_config_dict(tmp_path):
    path = write_plugin(tmp_path, "creator.py", '''
        class Made(Base):
            def __init__(self, size):
                self.setup(size)

        @register_env("plug_creator")
        def make(env_config):
            return Made(env_config.get("size", 2) * 10)
        ''')
    load_plugins([path])
    assert gym.make("plug_creator", size=3).unwrapped.size == 30
    strict_check(gym.make("plug_creator"))


def test_a_ray_remote_env_class_runs_in_process_as_a_gymnasium_env(tmp_path):
    path = write_plugin(tmp_path, "actor.py", '''
        @register_env("plug_actor")
        @ray.remote
        class ActorEnvWrapper:
            def __init__(self, env_config):
                self.env = Plain(env_config.get("size", 3))
                self.observation_space, self.action_space = self.env.observation_space, self.env.action_space

            def reset(self, *, seed=None, options=None):
                return self.env.reset(seed=seed, options=options)

            def step(self, action):
                return self.env.step(action)

            def count(self):
                return self.env.t

        class Plain(Base):
            def __init__(self, size):
                self.setup(size)
        ''')
    load_plugins([path])
    module = sys.modules[ENVS.get("plug_actor").module]
    assert isinstance(module.ActorEnvWrapper, ray.actor.ActorClass)  # returned unchanged
    env = gym.make("plug_actor", size=4)
    strict_check(env)
    env.reset(seed=0)
    env.step(1)
    assert env.unwrapped.count() == 1  # other methods reach the wrapped object
    assert pickle.loads(pickle.dumps(env)).unwrapped.count() == 1  # as our learners' exact restore does
    plugins.ship_to_ray()
    creator = _global_registry.get(ENV_CREATOR, "plug_actor")
    del sys.modules[module.__name__]  # by value: a Ray worker without the file can build it
    assert creator({"size": 2}).env.size == 2



def test_an_env_ray_cannot_pickle_is_one_line_naming_its_file_and_line_when_shipped(tmp_path):
    path = write_plugin(tmp_path, "locked.py", '''
        import threading

        LOCK = threading.Lock()


        @register_env("plug_locked")
        class Locked(Base):
            def __init__(self, env_config=None):
                with LOCK:
                    self.setup(1)
        ''')
    load_plugins([path])  # gymnasium can make it: only Ray's pickling fails, when the run starts
    assert gym.make("plug_locked").unwrapped.size == 1
    with pytest.raises(UserError) as bad:
        plugins.ship_to_ray()
    message = str(bad.value)
    assert message.startswith(f"env 'plug_locked' ({path.resolve()}:") and "Ray cannot pickle it" in message
    assert "_thread.lock" in message and "\n" not in message
    assert not _global_registry.contains(ENV_CREATOR, "plug_locked")


def test_a_broken_plugin_leaves_nothing_for_ray(tmp_path):
    path = write_plugin(tmp_path, "half.py", '''
        @register_env("plug_half")
        class Half(Base):
            def __init__(self, env_config=None):
                self.setup(1)

        raise RuntimeError("broken after registering")
        ''')
    with pytest.raises(UserError, match=r"RuntimeError: broken after registering \(line \d+\)$"):
        load_plugins([path])
    assert "plug_half" not in env_registry._UNSHIPPED
    plugins.ship_to_ray()
    assert not _global_registry.contains(ENV_CREATOR, "plug_half")


def test_unwrapping_an_actor_class_gives_the_plain_class_without_starting_ray():
    class Plain:
        pass

    assert unwrap_actor_class(ray.remote(Plain)) is Plain
    assert unwrap_actor_class(ray.remote(num_cpus=1)(Plain)) is Plain
    assert unwrap_actor_class(Plain) is Plain



def test_an_old_gym_api_actor_fails_when_made_naming_the_env_and_what_is_missing(tmp_path):
    path = write_plugin(tmp_path, "old_api.py", '''
        @register_env("plug_old_reset")
        @ray.remote
        class OldReset:
            def __init__(self, env_config):
                self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)

            def reset(self):
                return np.zeros(1, np.float32)

            def step(self, action):
                return np.zeros(1, np.float32), 0.0, False, {}
        ''')
    load_plugins([path])
    with pytest.raises(UserError) as made:
        gym.make("plug_old_reset")
    message = str(made.value)
    assert "'plug_old_reset'" in message and "old_api.py" in message
    assert "no action_space" in message and "reset() takes no seed/options" in message and "\n" not in message


def test_a_non_env_object_with_a_four_value_step_fails_on_its_first_step(tmp_path):
    path = write_plugin(tmp_path, "four.py", '''
        @register_env("plug_four")
        @ray.remote
        class Four:
            def __init__(self, env_config):
                self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
                self.action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                return np.zeros(1, np.float32), {}

            def step(self, action):
                return np.zeros(1, np.float32), 0.0, False, {}
        ''')
    load_plugins([path])
    env = gym.make("plug_four", disable_env_checker=True)
    env.reset(seed=0)
    with pytest.raises(UserError, match=r"'plug_four'.*step\(\) returned 4 values \(the old gym API"):
        env.step(0)


def test_a_registered_env_passes_preflight_and_rays_registry_holds_a_working_creator(tmp_path):
    # The helper is defined below the class: the creator Ray keeps must still have it.
    path = write_plugin(tmp_path, "late_helper.py", '''
        @register_env("plug_late_helper")
        class LateHelper(Base):
            def __init__(self, env_config=None):
                self.setup(helper())

        def helper():
            return 9
        ''')
    load_plugins([path])
    preflight_check_env("plug_late_helper", where="space.yaml")
    assert not _global_registry.contains(ENV_CREATOR, "plug_late_helper")  # Ray's turn comes when a run starts
    plugins.ship_to_ray()
    creator = _global_registry.get(ENV_CREATOR, "plug_late_helper")
    del sys.modules[ENVS.get("plug_late_helper").module]  # by value: a worker without the file can build it
    path.unlink()
    assert creator({}).size == 9


def test_shipped_envs_go_to_ray_by_reference():
    plugins.ship_to_ray()
    creator = _global_registry.get(ENV_CREATOR, "custom_env")
    assert creator.origin == ("tune_runner.envs.custom_env", "CustomEnv")
    assert creator({"length": 5}).length == 5
    assert creator({}).__class__.__name__ == "CustomEnv"
    actor = _global_registry.get(ENV_CREATOR, "custom_env_actor")
    assert actor.origin == ("tune_runner.envs.custom_env", "CustomEnvWrapper") and actor({"length": 4}).env.length == 4


# ---- one name, one definition ----------------------------------------------------------------------


def test_the_same_definition_registered_again_is_fine_and_another_one_is_refused(tmp_path):
    body = '''
        @register_env("plug_twice")
        class Twice(Base):
            def __init__(self, env_config=None):
                self.setup(2)
        '''
    first, second = write_plugin(tmp_path / "a", "twice.py", body), write_plugin(tmp_path / "b", "twice.py", body)
    load_plugins([first])
    module = sys.modules[ENVS.get("plug_twice").module]
    register_env("plug_twice")(module.Twice)  # e.g. the module imported again
    with pytest.raises(UserError) as clash:
        load_plugins([second])
    message = str(clash.value)
    assert message.startswith(f"--plugins {second}: ValueError: environment 'plug_twice' is registered twice")
    assert f"{first.resolve()}:" in message and f"{second.resolve()}:" in message


def test_a_gymnasium_id_cannot_be_taken():
    class Pole(gym.Env):
        pass

    with pytest.raises(ValueError, match="'CartPole-v1'.*already a gymnasium env"):
        register_env("CartPole-v1")(Pole)


def test_models_and_agents_are_recorded_unchanged_and_clashes_name_both_places():
    @register_model("plug_model")
    class Model:
        pass

    @register_agent("plug_agent")
    class Agent:
        pass

    assert MODELS.get("plug_model") is Model and AGENTS.get("plug_agent") is Agent
    assert register_model("plug_model")(Model) is Model  # the same class again

    class Other:
        pass

    with pytest.raises(ValueError, match=r"model 'plug_model' is registered twice: by .*test_plugins.py:\d+ "
                                         r"\(.*Model\) and by .*test_plugins.py:\d+ \(.*Other\)"):
        register_model("plug_model")(Other)
    with pytest.raises(TypeError, match="expected a class or function"):
        register_agent("plug_agent_2")(42)


def test_an_unknown_name_suggests_the_closest():
    with pytest.raises(UserError, match="unknown environment 'custm_env'; did you mean 'custom_env'"):
        ENVS.get("custm_env")
    assert {"custom_env", "CartPole-v1"} <= set(plugins.env_names())


@pytest.mark.parametrize("env_id, package", [("ALE/Pong-v5", "ale_py"), ("MinAtar/Breakout-v1", "minatar")])
def test_an_env_family_whose_package_is_missing_is_refused_with_its_pip_line(env_id, package, monkeypatch):
    """Atari's and MinAtar's ids exist once their package registers them: without it, the pip line, not
    'unknown environment' and gymnasium's whole registry."""
    import gymnasium as gym

    from tune_runner.tuning.preflight import unknown_env

    monkeypatch.setitem(sys.modules, package, None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, f"{package}.gym", None)
    monkeypatch.setattr(gym.envs.registration, "registry", {k: v for k, v in gym.registry.items()
                                                            if not k.startswith(env_id.split("/")[0] + "/")})
    monkeypatch.setattr(gym, "registry", gym.envs.registration.registry)
    assert unknown_env(env_id) == f"{env_id} needs the {package.replace('_', '-')} package: " \
                                  f"pip install {package.replace('_', '-')}"


def test_pickles_naming_the_env_classes_old_home_in_plugins_still_load(monkeypatch):
    # Before tune_runner.plugins.envs, Ray pickled an env's creator as tune_runner.plugins._RayCreator and an
    # env's factory pickled as tune_runner.plugins.registered_env; a search saved then must still resume.
    creator = env_registry._RayCreator("custom_env", ("tune_runner.envs.custom_env", "CustomEnv"))
    for thing in (env_registry._RayCreator, env_registry.registered_env):
        monkeypatch.setattr(thing, "__module__", "tune_runner.plugins")
    old = pickle.dumps(creator), pickle.dumps(ENVS.get("custom_env"))
    monkeypatch.undo()
    assert all(b"tune_runner.plugins" in data and b"env_registry" not in data for data in old)
    loaded_creator, loaded_factory = map(pickle.loads, old)
    assert isinstance(loaded_creator, env_registry._RayCreator) and loaded_creator.origin == creator.origin
    assert loaded_factory is ENVS.get("custom_env")
    assert plugins.EnvFactory is env_registry.EnvFactory


# ---- load_plugins ----------------------------------------------------------------------------------


def test_a_folder_loads_its_files_and_subfolders_but_not_private_or_hidden_ones(tmp_path):
    folder = tmp_path / "myenvs"
    for rel in ("one.py", "more/two.py", "_helper.py", "_private/three.py", ".hidden/four.py"):
        write_plugin(folder / Path(rel).parent, Path(rel).name, f'''
            @register_env("plug_{Path(rel).stem}")
            class E(Base):
                def __init__(self, env_config=None):
                    self.setup(1)
            ''')
    loaded = load_plugins([folder])
    assert loaded == [(folder / "more/two.py").resolve(), (folder / "one.py").resolve()]
    assert {"plug_one", "plug_two"} <= set(ENVS) and not {"plug__helper", "plug_three", "plug_four"} & set(ENVS)


def test_loading_again_runs_nothing_again(tmp_path):
    path = write_plugin(tmp_path, "counted.py", '''
        import builtins
        builtins.tune_rl_test_loads = getattr(builtins, "tune_rl_test_loads", 0) + 1
        ''')
    import builtins

    try:
        assert load_plugins([path]) == load_plugins([str(path)]) == [path.resolve()]
        assert builtins.tune_rl_test_loads == 1
    finally:
        del builtins.tune_rl_test_loads


def test_envs_in_the_working_directory_are_found(tmp_path, monkeypatch):
    write_plugin(tmp_path / "envs", "local_env.py", '''
        @register_env("plug_local")
        class Local(Base):
            def __init__(self, env_config=None):
                self.setup(1)
        ''')
    monkeypatch.chdir(tmp_path)
    assert load_plugins() == [(tmp_path / "envs" / "local_env.py").resolve()]
    assert "plug_local" in ENVS and gym.make("plug_local").unwrapped.size == 1


def test_relative_paths_are_taken_from_cwd(tmp_path):
    write_plugin(tmp_path / "sub", "rel.py", "")
    assert load_plugins(["sub/rel.py"], cwd=tmp_path) == [(tmp_path / "sub" / "rel.py").resolve()]


# ---- bad plug-ins: one line naming the path --------------------------------------------------------


@pytest.mark.parametrize(("name", "says"), [
    ("syntax_error.py", "SyntaxError: invalid syntax (line 4)"),
    ("raises_on_import.py", "RuntimeError: no licence server configured (line 6)"),
    ("missing_dependency.py", "ModuleNotFoundError: No module named 'tune_rl_package_that_is_not_installed' (line 3)"),
    ("duplicate_name.py", "ValueError: environment 'custom_env' is registered twice"),
    ("bad_env_name.py", "ValueError: register_env: an env name is letters, digits and _ : . - (a gymnasium id), "
                        "got 'my env' (line 8)"),
])
def test_a_bad_plugin_is_one_line_naming_the_path(name, says):
    given = f"tests/bad_plugins/{name}"
    with pytest.raises(UserError) as bad:
        load_plugins([given], cwd=HERE.parent)
    message = str(bad.value)
    assert message.startswith(f"--plugins {given}: ") and says in message and "\n" not in message, message
    assert not any(m.startswith(plugins._PLUGIN_PREFIX + Path(name).stem) for m in sys.modules)  # can be retried


@pytest.mark.parametrize(("given", "says"), [
    ("tests/bad_plugins/nowhere.py", "--plugins tests/bad_plugins/nowhere.py: no such file or folder"),
    ("tests/bad_plugins/not_a_plugin.txt", "--plugins tests/bad_plugins/not_a_plugin.txt: not a Python file"),
])
def test_a_missing_or_non_python_path_is_refused(given, says):
    with pytest.raises(UserError, match=f"^{says}"):
        load_plugins([given], cwd=HERE.parent)


def test_an_empty_folder_is_refused(tmp_path):
    (tmp_path / "nothing").mkdir()
    with pytest.raises(UserError, match="^--plugins nothing: no .py files in this folder$"):
        load_plugins(["nothing"], cwd=tmp_path)


def test_a_bad_file_in_the_working_directorys_envs_names_the_file(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "broken.py").write_text("x = 1\nraise KeyError('size')\n")
    with pytest.raises(UserError, match=r"^envs/broken.py: KeyError: 'size' \(line 2\)$"):
        load_plugins(cwd=tmp_path)


def test_a_plugin_file_rewritten_within_the_same_second_runs_as_it_is_now(tmp_path):
    """Python's import cache trusts a .pyc whose source has the same mtime and size: an edit made within the
    same second as the last run (here: the same mtime, set back) would run the old code. We compile the text."""
    import os
    import subprocess
    import sys

    plugin = tmp_path / "envs" / "mine.py"
    plugin.parent.mkdir()
    show = ("import sys; from tune_runner.plugins import load_plugins; load_plugins([sys.argv[1]]); "
            "print(next(m.VALUE for n, m in sys.modules.items() if n.endswith(sys.argv[2])))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    seen = []
    for value in ("1", "2"):
        plugin.write_text(f"VALUE = {value}\n")
        os.utime(plugin, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
        run = subprocess.run([sys.executable, "-c", show, str(plugin), "_" + __import__("hashlib").sha1(
            str(plugin.resolve()).encode()).hexdigest()[:8]], capture_output=True, text=True, env=env, check=True)
        seen.append(run.stdout.strip())
    assert seen == ["1", "2"]
    assert not (plugin.parent / "__pycache__").exists()  # nothing written into the user's folder


# ---- code that runs is named: the header lists each plug-in file; --no-plugins and plugins: false import none --


def marking(path: Path, marker: Path) -> Path:
    """A plug-in file that leaves `marker` when imported (and registers nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n")
    return path


def space_file(folder: Path, *, env: str = "CartPole-v1", plugins: str = "") -> Path:
    path = folder / "s.yaml"
    path.write_text(f"trainable: ppo\nenv: {env}\nbudget: {{env_steps: 1000}}\n{plugins}")
    return path


def header_lines(spec) -> list[str]:
    import io

    from tune_runner.tuning.console import header

    out = io.StringIO()
    header(spec, "s", out)
    return [line for line in out.getvalue().splitlines() if line.startswith("  plug-ins")]


def test_the_header_names_every_plugin_file_the_search_imported(tmp_path, monkeypatch):
    from tune_runner.spec.experiment import load_spec
    from tune_runner.tuning.preflight import prepare

    monkeypatch.chdir(tmp_path)
    marking(tmp_path / "envs" / "local_plugin.py", tmp_path / "local.marker")
    marking(tmp_path / "extra.py", tmp_path / "extra.marker")
    prepared = prepare(load_spec(str(space_file(tmp_path, plugins="plugins: [extra.py]\n"))))
    assert header_lines(prepared.spec) == ["  plug-ins  envs/local_plugin.py, extra.py"]
    assert (tmp_path / "local.marker").exists() and (tmp_path / "extra.marker").exists()


@pytest.mark.parametrize("how", ["--no-plugins", "plugins: false"])
def test_no_plugins_imports_nothing_and_the_header_says_so(how, tmp_path, monkeypatch):
    from tune_runner.api.searching import search_spec
    from tune_runner.tuning.preflight import check_before_ray, prepare

    monkeypatch.chdir(tmp_path)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "boom.py").write_text("raise RuntimeError('a plug-in ran')\n")
    space = space_file(tmp_path, plugins="plugins: false\n" if how == "plugins: false" else "")
    spec = search_spec(str(space), plugins=False if how == "--no-plugins" else ())
    check_before_ray(spec)
    prepared = prepare(spec)
    assert header_lines(prepared.spec) == ["  plug-ins  none (--no-plugins or plugins: false)"]
    assert prepared.spec.as_dict()["plugins"] is False  # a resumed search keeps it off


@pytest.mark.parametrize("how", ["--no-plugins", "plugins: false"])
def test_an_env_only_a_plugin_would_register_is_unknown_without_plugins(how, tmp_path, cli, untouched):
    """ensure_gym_id, deep in the env checks, looks in ./envs/ too: it must not import it either."""
    marking(tmp_path / "envs" / "plug.py", tmp_path / "envs.marker")
    space = space_file(tmp_path, env="plug_env", plugins="plugins: false\n" if how == "plugins: false" else "")
    untouched.mark()
    result = cli("search", "--space", str(space), *(["--no-plugins"] if how == "--no-plugins" else []))
    assert result.status == 2 and "unknown environment 'plug_env'" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1 and not (tmp_path / "envs.marker").exists()
    untouched.check()


def test_no_plugins_refuses_a_space_that_names_plugins_importing_none(tmp_path, cli, untouched):
    marking(tmp_path / "extra.py", tmp_path / "extra.marker")
    space = space_file(tmp_path, plugins="plugins: [extra.py]\n")
    untouched.mark()
    result = cli("search", "--space", str(space), "--no-plugins")
    assert result.status == 2, result.err
    assert result.err.strip() == (f"tune-rl: --no-plugins: {space} names plug-in files, code the search would "
                                  f"import ({tmp_path / 'extra.py'}); read them, then run without --no-plugins")
    assert not (tmp_path / "extra.marker").exists()
    untouched.check()


def test_train_with_no_plugins_does_not_import_the_working_folders_envs(tmp_path, cli, untouched):
    marking(tmp_path / "envs" / "plug.py", tmp_path / "envs.marker")
    untouched.mark()
    result = cli("train", "--env_name", "plug_env", "--no-plugins")
    assert result.status == 2 and "unknown environment 'plug_env'" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1 and not (tmp_path / "envs.marker").exists()
    untouched.check()
