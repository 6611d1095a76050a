"""The package's import graph: no cycle, and each layer imports only the layers below it (no Ray, no import).

Every module of tune_runner/ is read with `ast`; imports inside functions count too (a lazy import is still a
dependency, and the cycles this test guards against were all function-level). `from X import Y` is an edge
to the submodule X.Y when Y is a module, else to X.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import tune_runner

ROOT = Path(tune_runner.__file__).parent

# Lowest first; a module may import its own layer and the layers before it. The base modules are what every
# layer shares (errors, paths, the registry, storage, ...): no order is asserted among them, only no cycle.
# A layer names top-level modules or packages, or a package's module (`tracking.uri`, the MLflow URI checked
# and shown without secrets, which the saved spec and the results use too: it imports no MLflow), which then
# sits in that layer instead of its package's.
# plugins are the user's envs, models and agents (plugins/envs.py: register_env, the env factory, Ray's env
# registry); spec is the validated experiment; algos the own learners (they know no spec); trainables run one
# trial (they read the spec's env settings); results read a finished search back (and rebuild a policy from a
# trial's checkpoint: trainables); tracking writes everything MLflow gets (asserted below), so it sits above
# results: the policy model it logs is built by results/pyfunc_model.py, the verdict it tags is
# results/robust.py's; cluster is the Ray a search runs on; searchers suggest configs (they read a previous
# search's results for a warm start); tuning composes and runs Tune runs, re-evaluation included
# (tuning/reevaluate.py); api is what a Python caller uses (tr.search, tr.best, ...) with typed results and
# errors, and cli parses flags, calls the api (or, for commands it does not cover, the layers below) and
# prints: above the api, so the command line cannot do a search differently. tune_rl_policy, the file an
# exported policy ships with, imports nothing of the project (asserted below).
LAYERS = (
    ("base", ("__init__", "errors", "paths", "files", "registry", "storage", "_moved", "tune_rl_policy", "version",
              "tracking.uri", "hints")),
    ("plugins", ("plugins",)),
    ("spec", ("spec",)),
    ("algos", ("algos",)),
    ("trainables", ("trainables",)),
    ("results", ("results",)),
    ("tracking", ("tracking",)),
    ("cluster", ("cluster",)),
    ("searchers", ("searchers",)),
    ("tuning", ("tuning",)),
    ("api", ("api",)),
    ("cli", ("cli", "__main__")),
)
RANK = {top: i for i, (_, tops) in enumerate(LAYERS) for top in tops}
# Imports against the order that are known and kept, each with its reason. results/tracked.py reads a search
# back from MLflow with the scheduler registry, which tuning/ owns. The package itself is the API's front door,
# by a call-time import: `tr.best` and the rest load the api on first use (import tune_runner stays light).
ALLOWED = {
    ("tune_runner.results.tracked", "tune_runner.tuning.schedulers"),
    ("tune_runner", "tune_runner.api"),
}


# MLflow's write calls (client and fluent API): only tracking/ makes them. The parent run is tracking/parent.py's,
# the trials' child runs tracking/callback.py's, the policy model tracking/log_model.py's; reading (search_runs,
# get_run, downloads) may happen anywhere.
MLFLOW_WRITES = frozenset({
    "log_metric", "log_metrics", "log_param", "log_params", "log_batch", "set_tag", "set_tags", "log_artifact",
    "log_artifacts", "log_dict", "log_text", "log_figure", "log_image", "log_table", "log_input", "log_model",
    "create_run", "start_run", "end_run", "update_run", "set_terminated", "delete_run", "delete_tag",
    "set_experiment_tag", "create_experiment", "create_logged_model"})


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports(name: str) -> Iterator[tuple[str, int]]:
    """(imported project module, line) for every import in the module, function-level ones included."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:
                    yield sub, node.lineno
                elif base in MODULES:
                    yield base, node.lineno


@functools.cache  # parsing every module takes about 0.5 s, and the tests ask for the graph 9 times
def graph() -> Mapping[str, Mapping[str, int]]:
    """module -> {imported module: first line}. A package __init__ that re-exports its own submodules lazily,
    by string (`_moved.forward`), holds no import statement of them: no edge, as it should be. Read-only, as
    the tests share it: a test that adds an edge does so to its own copy (an edge added to the cached graph
    was a cycle for every test after it)."""
    edges: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for name in MODULES:
        for target, line in imports(name):
            if target != name:
                edges[name].setdefault(target, line)
    return MappingProxyType({name: MappingProxyType(targets) for name, targets in edges.items()})


def cycles(edges: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer(name: str) -> int:
    parts = name.split(".")[1:] or ["__init__"]
    for size in range(len(parts), 0, -1):  # the longest name in LAYERS: a package's module before its package
        if ".".join(parts[:size]) in RANK:
            return RANK[".".join(parts[:size])]
    raise AssertionError(f"{name}: in no layer of tests/test_architecture.py LAYERS; add it where it belongs")


def test_every_module_is_read():
    assert {"tune_runner.cli.main", "tune_runner.tuning.runner", "tune_runner._moved"} <= MODULES.keys()
    # a function-level import counts (runner's own import of the stopper is at module level; the api's of runner not)
    assert "tune_runner.tuning.runner" in graph()["tune_runner.api.searching"]
    assert "tune_runner.api" in graph()["tune_runner.cli.commands"]


def test_no_import_cycle():
    edges = graph()
    found = cycles(edges)
    lines = []
    for component in found:
        members = set(component)
        lines += [f"{m}:{line} imports {t}" for m in component for t, line in edges[m].items() if t in members]
    assert not found, f"{len(found)} import cycle(s): {found}\n" + "\n".join(lines)


def test_each_layer_imports_only_layers_below():
    wrong = [f"{name}:{line} imports {target} (layer {LAYERS[layer(target)][0]} is above "
             f"{LAYERS[layer(name)][0]})"
             for name, targets in graph().items() for target, line in targets.items()
             if layer(target) > layer(name) and (name, target) not in ALLOWED]
    assert not wrong, "\n".join(wrong)
    stale = [pair for pair in ALLOWED if pair[1] not in graph()[pair[0]]]
    assert not stale, f"ALLOWED names imports that are gone; remove them: {stale}"


def test_the_exported_policy_file_imports_nothing_of_the_project():
    assert not list(imports("tune_runner.tune_rl_policy"))


def mlflow_writes(source: str) -> Iterator[tuple[str, int]]:
    """(method, line) of every call `something.<an MLflow write>(...)` in `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MLFLOW_WRITES:
            yield node.func.attr, node.lineno


def test_only_tracking_writes_to_mlflow():
    assert list(mlflow_writes("mlflow.set_terminated(run, status='FAILED')\nclient.log_batch(r, metrics=[])"
                              "\nprint(len(x))")) == [("set_terminated", 1), ("log_batch", 2)]
    outside = [f"{name}:{line} calls .{method}(): MLflow writes belong in tune_runner/tracking/"
               for name, path in MODULES.items() if not name.startswith("tune_runner.tracking.")
               for method, line in mlflow_writes(path.read_text(encoding="utf-8"))]
    assert not outside, "\n".join(outside)
    inside = {method for name, path in MODULES.items() if name.startswith("tune_runner.tracking.")
              for method, _ in mlflow_writes(path.read_text(encoding="utf-8"))}
    assert {"create_run", "set_terminated", "log_artifacts", "create_logged_model"} <= inside  # the walk sees them


def third_party(source: str) -> Iterator[tuple[str, int]]:
    """(top-level package, line) of every absolute import in `source`, function-level ones included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((alias.name.partition(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.partition(".")[0], node.lineno


def test_our_learners_know_no_ray_nor_mlflow():
    # algos/ is our PPO and DQN as plain PyTorch: a user's script, the exported policy and `tune-rl train`
    # run them without Ray. Ray's env registry is asked in plugins/envs.py (ray_env_creator), one place.
    assert list(third_party("import ray.tune\nfrom mlflow import x\ndef f():\n    from ray import y")) == \
        [("ray", 1), ("mlflow", 2), ("ray", 4)]
    found = [f"{name}:{line} imports {top}" for name, path in MODULES.items() if name.startswith("tune_runner.algos")
             for top, line in third_party(path.read_text(encoding="utf-8")) if top in ("ray", "mlflow")]
    assert not found, "\n".join(found)


def test_the_checks_catch_a_back_import_and_a_cycle():
    edges = {name: dict(targets) for name, targets in graph().items()}  # a copy: the cached graph is shared
    edges["tune_runner.spec.experiment"]["tune_runner.cli.main"] = 1  # spec -> cli: above, and a cycle
    assert any("tune_runner.spec.experiment" in c for c in cycles(edges))
    assert layer("tune_runner.cli.main") > layer("tune_runner.spec.experiment")


# Issue 42 split the six modules that had grown past about 400 lines along their seams; a module that grows past
# this again is split the same way, not let grow.
MAX_LINES = 450


def test_no_module_is_over_450_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams (at most {MAX_LINES} lines a module): {long}"


def readme_tree(text: str) -> set[str]:
    """The modules the README's tree lists: `name.py` at the top, `package/` then its modules' names."""
    block = text.split("```text\ntune_runner/\n", 1)[1].split("```", 1)[0]
    listed, package = set(), None
    for token in block.split():
        if token.endswith("/"):
            package = token.rstrip("/")
            listed.add(f"tune_runner.{package}")
        elif package is None:
            stem = token.removesuffix(".py")
            listed.add("tune_runner" if stem == "__init__" else f"tune_runner.{stem}")
        else:
            listed.add(f"tune_runner.{package}.{token}")
    return listed


def test_the_readme_tree_lists_every_module_and_no_other():
    assert readme_tree("```text\ntune_runner/\n  __init__.py errors.py\n  spec/   saved\n```") == {
        "tune_runner", "tune_runner.errors", "tune_runner.spec", "tune_runner.spec.saved"}
    listed = readme_tree((ROOT.parent / "README.md").read_text(encoding="utf-8"))
    assert listed == set(MODULES), (f"README.md's tree: add {sorted(set(MODULES) - listed)}, "
                                    f"drop {sorted(listed - set(MODULES))}")
