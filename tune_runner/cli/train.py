"""`tune-rl train`: one training run, with the seeds' command line.

    tune-rl train --env_name CartPole-v1 --agent_name ppo --model_name mlp --num_envs_per_worker 8 \\
                  --num_workers 2 --gpu "0" --num_gpus 1 --num_cpus 8 --batch_size 2048 [--lr 3e-3 ...]

Seed 000's flags keep their meaning: `--num_envs_per_worker` envs per rollout worker, `--num_workers`
rollout actors, `--gpu` the visible devices, `--num_gpus`/`--num_cpus` the local Ray's size,
`--batch_size` env steps per iteration (our agents; RLlib's train_batch_size_per_learner). The chosen
agent's and model's own options (their `add_args`; for ours, every field of their config) are flags
too: `tune-rl train --agent_name dqn --help` lists them. With `--config BUNDLE` the run starts from an
exported best config and the flags given override it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tune_runner.errors import ExitStatus, UserError
from tune_runner.spec import reserved

if TYPE_CHECKING:
    from tune_runner.trainables.backends import Backend

DEFAULT_AGENT, DEFAULT_BUDGET = "ppo", 100_000
SEED_AGENT = "default_agent"  # seed 000's agent name; its learning rule came from --model_name
FLAG_KEYS = {"num_envs_per_worker": "num_envs_per_env_runner", "num_workers": reserved.RUNNERS_KEY}


def scan(argv: Sequence[str]) -> dict[str, Any]:
    """The flags that decide which options exist (--agent_name, --model_name, --plugins), read before parsing."""
    found: dict[str, Any] = {"plugins": [], "discover": "--no-plugins" not in argv}
    names = {"--agent_name": "agent", "--agent-name": "agent", "--model_name": "model", "--model-name": "model",
             "--plugins": "plugins"}
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=")
        if flag not in names:
            continue
        value = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if names[flag] == "plugins":
            found["plugins"].append(value)
        else:
            found[names[flag]] = value
    return found


def add_parser(sub: Any, argv: Sequence[str], common: Any) -> argparse.ArgumentParser:
    """The `train` subcommand: the seed's flags, our run flags, and the chosen agent's and model's options."""
    train = sub.add_parser("train", help="one training run: seed 000's flags, or an exported config",
                           description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--config", metavar="BUNDLE", help="start from a file written by tune-rl best --export")
    seed = train.add_argument_group("seed 000's flags")
    seed.add_argument("--env_name", "--env-name", dest="env_name", help="a gymnasium id or a registered env")
    agent_name = seed.add_argument("--agent_name", "--agent-name", dest="agent_name",
                                   help=f"the learning rule (default {DEFAULT_AGENT})")
    seed.add_argument("--model_name", "--model-name", dest="model_name",
                      help="the network: mlp (default) or a registered model")
    seed.add_argument("--num_envs_per_worker", "--num-envs-per-worker", dest="num_envs_per_worker", type=int,
                      help="envs stepped together in each rollout worker")
    seed.add_argument("--num_workers", "--num-workers", dest="num_workers", type=int,
                      help="rollout actors (0: the trial steps its own envs)")
    seed.add_argument("--batch_size", "--batch-size", dest="batch_size", type=int,
                      help="env steps per training iteration")
    seed.add_argument("--budget", type=int, help=f"env steps to train (default {DEFAULT_BUDGET:,}, or the export's)")
    seed.add_argument("--seed", type=int, help="seed of the networks, envs and sampling")
    common(train)
    words = [w for w in argv if not w.startswith("-")]
    if words[:1] == ["train"]:  # another command never reads these options: no agent is looked at
        _add_options(train, scan(argv))
        agent_name.help = agent_help()  # after _add_options: a plug-in file it loaded registered its agents
    return train


def agent_help() -> str:
    """`--agent_name`'s help: the agents registered (ours and the users'), and RLlib's algorithms."""
    from tune_runner.algos.records import LEARNERS  # noqa: F401 - our learners are agents once it is imported
    from tune_runner.plugins import AGENTS

    return f"the learning rule: {', '.join(AGENTS.names())}, rllib/PPO, ... (default {DEFAULT_AGENT})"


def seed_names(agent_name: str | None, model_name: str | None) -> tuple[str, str | None, bool]:
    """(agent, model, whether --model_name was read as the agent): seed 000 wrote `--agent_name
    default_agent --model_name ppo`, naming the learning rule with --model_name. Plugins loaded first."""
    from tune_runner.plugins import MODELS
    from tune_runner.trainables import agents

    agent = DEFAULT_AGENT if agent_name in (None, SEED_AGENT) else agent_name
    if model_name and model_name not in MODELS and agents.is_agent(model_name) and agent_name in (None, SEED_AGENT):
        return model_name, None, True
    return agent, model_name, False


def _add_options(parser: argparse.ArgumentParser, chosen: dict[str, Any]) -> None:
    """Argument groups for the chosen agent's and model's own options (suppressed unless given)."""
    if (chosen.get("agent") or "").startswith("rllib/"):
        return  # RLlib's settings come with --set KEY=VALUE
    try:
        from tune_runner.algos.records import ours
        from tune_runner.plugins import BUILT_IN_MODEL, MODELS, load_plugins
        from tune_runner.trainables import agents

        known = (None, SEED_AGENT, *ours(), BUILT_IN_MODEL)  # names whose options need no plug-in file (ours)
        if chosen["plugins"] or chosen.get("agent") not in known or chosen.get("model") not in known:
            # a user's agent or model: its file declares them
            load_plugins(chosen["plugins"], shipped=False, discover=chosen["discover"])
        agent, model, _ = seed_names(chosen.get("agent"), chosen.get("model"))
        if not agents.is_agent(agent):
            return  # prepare() names the unknown agent with its did-you-mean
        taken = {s for a in parser._actions for s in a.option_strings}
        group = parser.add_argument_group(f"options of agent {agent}")
        for flag, kwargs in agent_flags(agent):
            if flag not in taken:
                group.add_argument(flag, dest=f"agent:{flag[2:]}", default=argparse.SUPPRESS, **kwargs)
                taken.add(flag)
        if model and model in MODELS and model != "mlp":  # models.BUILT_IN: the agent's fcnet_* size it
            from tune_runner.plugins.add_args import options

            group = parser.add_argument_group(f"options of model {model} (model_config)")
            for action in options(MODELS.get(model), prog=model).values():
                if set(action.option_strings) & taken:
                    continue  # the agent's flag of that name wins; model_config.<name> via --set
                group.add_argument(*action.option_strings, dest=f"model:{action.dest}", type=action.type,
                                   nargs=action.nargs, choices=action.choices, help=action.help,
                                   default=argparse.SUPPRESS)
    except UserError:
        return  # a bad --plugins path is reported by the command, with its flag


def agent_flags(agent: str) -> list[tuple[str, dict[str, Any]]]:
    """(flag, add_argument kwargs) for each option of an agent: its config fields (ours) or its add_args."""
    from tune_runner.trainables import agents

    config = agents.config_class(agent)
    if not dataclasses.is_dataclass(config):
        from tune_runner.plugins.add_args import options

        return [(a.option_strings[0], {"type": a.type, "nargs": a.nargs, "choices": a.choices, "help": a.help})
                for a in options(agents.agent_class(agent), prog=agent).values()]
    docs = field_docs(config)
    skip = {"seed", "model", "model_config"}
    return [(f"--{f.name}", {"type": parse_value, "metavar": "VALUE", "help": _field_help(f, docs)})
            for f in dataclasses.fields(config) if f.name not in skip]


def parse_value(text: str) -> Any:
    """`spec.parse_value`, imported when a value is parsed: the YAML reader costs a --help 0.05 s."""
    from tune_runner.spec.experiment import parse_value as parse

    return parse(text)


def _field_help(field: dataclasses.Field, docs: dict[str, str]) -> str:
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore
    return f"{docs.get(field.name, '')} (default {default!r})".replace("%", "%%")


def field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields (CleanRL's convention), by field name; those of its
    dataclass bases too (our configs' shared settings are LearnerConfig's), a subclass's own winning."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    """The field docstrings written in `cls`'s own body."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return {}
    node = _classes_in(path).get(cls.__name__) if path else None
    if node is None:
        return {}
    body, docs = node.body, {}
    for field, after in zip(body, body[1:], strict=False):
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and \
                isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and \
                isinstance(after.value.value, str):
            docs[field.target.id] = " ".join(after.value.value.split())
    return docs


@functools.cache
def _classes_in(path: str) -> dict[str, ast.ClassDef]:
    """A source file's classes by name (the outermost of a name first), its file parsed once: inspect.getsource
    tokenised and parsed the whole module again for each class, 20 ms of `train --help` for our configs' three
    classes."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except OSError:
        return {}
    for attempt in range(3):
        try:
            tree = ast.parse(source)
            break
        except SystemError:  # CPython 3.11's ast.parse while another thread parses too (cpython #106905): again
            if attempt == 2:
                return {}
        except SyntaxError:
            return {}
    classes: dict[str, ast.ClassDef] = {}
    for node in ast.walk(tree):  # breadth first: a module's own classes before those nested in them
        if isinstance(node, ast.ClassDef):
            classes.setdefault(node.name, node)
    return classes


def spec_from_flags(args: argparse.Namespace, out: TextIO) -> tuple[Any, Backend | None]:
    """The one-trial spec the flags describe (an exported bundle's, with the flags on top), and the record of
    its trainable where --agent_name was resolved to name the flag in an error (None: prepare resolves it)."""
    from tune_runner.results import export
    from tune_runner.spec.experiment import build_spec, parse_override
    from tune_runner.tuning.preflight import without_plugins

    agent, model = _agent_and_model(args, out)
    fixed = _fixed_from_flags(args, agent=agent, model=model)
    fixed.update(dict(parse_override(item) for item in args.overrides))
    budget = _budget(args, fixed)
    top = _top_level_sets(fixed)  # --set env=, stop_at=, metric=, mode=, env_config.X=: the run's, not the learner's
    env = _one_env(args.env_name, top.pop("env", None))
    if args.config:
        from pathlib import Path

        spec = export.load(Path(args.config), overrides=fixed)
        changes = {k: v for k, v in (("env", env), ("trainable", args.agent_name and agent)) if v}
        changes.update(_run_settings(spec, top, env=env))
        spec = spec.with_overrides(**changes, budget_env_steps=budget or spec.budget_env_steps,
                                   plugins=spec.plugins + tuple(str(Path(p).resolve()) for p in args.plugins))
        return (without_plugins(spec) if args.no_plugins else spec), None
    if not env:
        raise UserError("train: give --env_name ENV (a gymnasium id or a registered env), or --config BUNDLE")
    record = _check_names(agent=agent, env=env)
    raw = {"trainable": agent, "env": env, "budget": {"env_steps": budget or DEFAULT_BUDGET},
           "fixed": fixed, "reevaluate": False, "plugins": False if args.no_plugins else list(args.plugins),
           **{k: v for k, v in top.items() if k != "env_config"},
           **({"env_config": top["env_config"]} if "env_config" in top else {})}
    name = f"{agent}-{args.env_name}".replace("/", "-")  # the experiment's folder: rllib/PPO, phys2d/CartPole-v1
    return build_spec(raw, name=name, source="tune-rl train"), record


# --set keys that are the run's settings (a space's top level, search's too), not the learner's
TOP_LEVEL_SETS = ("env", "stop_at", "metric", "mode", *reserved.SEED_KEYS)


def _top_level_sets(fixed: dict[str, Any]) -> dict[str, Any]:
    """The `--set` items that are the run's own settings, taken out of `fixed` (where they would reach the
    trial's config as learner settings): TOP_LEVEL_SETS, and env_config.X as {"env_config": {...}}."""
    from tune_runner.spec.top_level import TOP_KEYS

    top = {key: fixed.pop(key) for key in TOP_LEVEL_SETS if key in fixed}
    if "trainable" in fixed:
        raise UserError(f"--set trainable={fixed['trainable']}: a run's trainable is its --agent_name; give "
                        f"--agent_name {fixed['trainable']}")
    for key in TOP_KEYS:  # a search's own setting (num_samples, searcher, ...): not the learner's, and no search here
        if key in fixed and key != "env_config":
            raise UserError(f"--set {key}={fixed[key]}: {key} is a setting of a search (tune-rl search), not of "
                            f"one training run; drop it")
    env_config = {key.removeprefix(reserved.PREFIX): fixed.pop(key) for key in list(fixed)
                  if key.startswith(reserved.PREFIX)}
    if env_config:
        top["env_config"] = env_config
    return top


def _one_env(flag: str | None, setting: Any) -> str | None:
    """The env of --env_name and --set env= (the same, or one of them)."""
    if flag and setting is not None and str(setting) != flag:
        raise UserError(f"--env_name {flag} and --set env={setting} disagree; give one of them")
    return flag or (None if setting is None else str(setting))


def _run_settings(spec: Any, top: dict[str, Any], *, env: str | None) -> dict[str, Any]:
    """An exported bundle's spec changes for `--set` run settings: env_config merged, metric, mode, stop_at;
    another env than the bundle's gets its own stop_at (spec.experiment.retarget_stop_at), as search does."""
    from tune_runner.spec.experiment import retarget_stop_at
    from tune_runner.spec.top_level import number_setting, seeds_settings

    changes: dict[str, Any] = {k: str(top[k]) for k in ("metric", "mode") if k in top}
    changes.update(seeds_settings(top, "--set"))
    if "mode" in changes and changes["mode"] not in ("max", "min"):
        raise UserError(f"--set mode={changes['mode']}: must be max or min")
    if "env_config" in top:
        changes["env_config"] = {**spec.env_config, **top["env_config"]}
    if "stop_at" in top:
        changes["stop_at"] = number_setting(top, "stop_at", "--set")
    elif env and env != spec.env:
        raw = {"env": env, "stop_at": spec.stop_at, "metric": changes.get("metric", spec.metric),
               "mode": changes.get("mode", spec.mode)}
        note = retarget_stop_at(raw, (spec.env, spec.stop_at), set_keys={"env"}, owner="bundle")
        changes.update(stop_at=raw["stop_at"], stop_at_note=note)
    return changes


def _budget(args: argparse.Namespace, fixed: dict[str, Any]) -> int | None:
    """--budget, or `--set budget=N` (as search takes it; taken out of `fixed`); None for the default."""
    from tune_runner.spec.top_level import budget_steps

    sets = [fixed.pop(key) for key in ("budget", "budget.env_steps") if key in fixed]
    if not sets:
        return args.budget
    steps = budget_steps({"env_steps": sets[-1]}, "--set budget")
    if args.budget is not None and args.budget != steps:
        raise UserError(f"--set budget={sets[-1]} and --budget {args.budget} disagree; give one of them")
    return steps


def _check_names(*, agent: str, env: str) -> Backend:
    """--agent_name and --env_name named in their own one-line errors (before a spec exists); the agent's
    record, which the run is prepared with (not resolved again)."""
    from tune_runner.trainables.catalog import backend
    from tune_runner.tuning.preflight import unknown_env

    try:
        record = backend(agent)
    except UserError as exc:
        raise UserError(f"--agent_name {agent}: {exc}") from None
    problem = unknown_env(env)
    if problem:
        raise UserError(f"--env_name {env}: {problem}")
    return record


def _agent_and_model(args: argparse.Namespace, out: TextIO) -> tuple[str, str | None]:
    from tune_runner.plugins import MODELS

    agent, model, read_as_agent = seed_names(args.agent_name, args.model_name)
    if read_as_agent:
        print(f"note       --model_name {agent} names a learning rule: read as --agent_name {agent} "
              f"(seed 000's usage)", file=out)
    if model and model not in MODELS:
        from tune_runner.errors import unknown_name

        raise UserError(f"--model_name {model}: {unknown_name('model', model, list(MODELS))}")
    return agent, model


def _fixed_from_flags(args: argparse.Namespace, *, agent: str, model: str | None) -> dict[str, Any]:
    """The trial settings the flags set: seed flags renamed, the agent's and model's options."""
    fixed: dict[str, Any] = {}
    for flag, key in FLAG_KEYS.items():
        if getattr(args, flag) is not None:
            fixed[key] = getattr(args, flag)
    if args.batch_size is not None:
        fixed["train_batch_size_per_learner" if agent.startswith("rllib/") else "train_batch_size"] = args.batch_size
    if args.seed is not None:
        fixed["seed"] = args.seed
    if model:
        fixed["model"] = model
    for dest, value in vars(args).items():
        kind, _, name = dest.partition(":")
        if kind == "agent":
            fixed[name] = value
        elif kind == "model":
            fixed[f"model_config.{name}"] = value
    return fixed


def command(args: argparse.Namespace, out: TextIO) -> int:
    """Run `tune-rl train`."""
    from tune_runner.cli.options import plugins_setting, positive, run_options
    from tune_runner.plugins import load_plugins
    from tune_runner.tuning import runner

    for flag in ("budget", "num_cpus", "num_envs_per_worker", "batch_size"):
        positive(f"--{flag}", getattr(args, flag))
    if args.num_workers is not None and args.num_workers < 0:
        raise UserError(f"--num_workers {args.num_workers}: must be 0 or more")
    load_plugins(args.plugins, discover=plugins_setting(args) is not False)
    spec, record = spec_from_flags(args, out)
    outcome = runner.run(spec, run_options(args, export=False, reevaluate=False), out=out, suffix="train",
                         record=record)
    return int(outcome.exit_status) if outcome.exit_status else ExitStatus.OK
