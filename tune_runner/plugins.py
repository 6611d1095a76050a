"""TEMPORARY STUB (not committed): helper A writes the real one."""
from tune_runner.registry import Registry

ENVS, MODELS, AGENTS = Registry("environment"), Registry("model"), Registry("agent")


def register_model(name):
    return MODELS.register(name)


def register_agent(name):
    return AGENTS.register(name)


def load_plugins(paths=(), *, cwd=None):
    import importlib.util
    from pathlib import Path
    out = []
    for p in paths:
        p = Path(p).resolve()
        spec = importlib.util.spec_from_file_location("tune_rl_plugin_" + p.stem, p)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        out.append(p)
    return out
