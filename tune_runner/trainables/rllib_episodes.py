"""Episode returns of `rllib/*` trials, counted by us: the last `metrics_num_episodes_for_smoothing` episodes.

RLlib 2.60's `env_runners/episode_return_mean` is not that mean: each EnvRunner's windowed
stats are emptied at every reduce (once per iteration), so the figure covers only the
episodes finished in the latest iteration (it read 500 while the last 100 averaged 310).
Our trials decide on the return (stop_at, ASHA, PBT, the best trial, the curriculum), so
they count it themselves, the way our own learners do:

- on each EnvRunner (any process), `on_sample_end` notes the return and length of every
  episode chunk that a `sample()` call hands out unfinished, and `on_episode_end` adds the
  finished chunk to those and keeps the episode's (return, length) in a list on the EnvRunner.
  The chunks are read when RLlib hands them out, not later: RLlib's learner connectors change
  them in place (PPO appends one step to each), and a local EnvRunner shares them;
- `on_train_result` runs in the Algorithm's process after every iteration: it collects those
  lists from every EnvRunner into the Algorithm's `EpisodeWindow` and writes the window's
  figures to `result["tune_rl"]`, where tune_runner.trainables.metrics reads them.

The state lives in attributes of the EnvRunner and the Algorithm, the objects that live as long
as it must (RLlib's docs advise callbacks and attributes, not its MetricsLogger, for moving data
between components). Nothing here imports RLlib or starts Ray.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

RESULT_KEY = "tune_rl"  # our section of RLlib's result dict
_RUNNER = "_tune_rl_episodes"  # on each EnvRunner: its RunnerEpisodes
_WINDOW = "_tune_rl_episode_window"  # on the Algorithm: its EpisodeWindow


class EpisodeWindow:
    """The returns and lengths of the last `size` finished episodes, and how many finished in all."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"metrics_num_episodes_for_smoothing must be >= 1, got {size}")
        self.returns: deque[float] = deque(maxlen=size)
        self.lengths: deque[int] = deque(maxlen=size)
        self.episodes = 0

    def add(self, finished: Iterable[tuple[float, int]]) -> None:
        """Add finished episodes, oldest first."""
        for episode_return, length in finished:
            self.returns.append(float(episode_return))
            self.lengths.append(int(length))
            self.episodes += 1

    def metrics(self) -> dict[str, float]:
        """Our metric names; NaN for the statistics before the first finished episode."""
        if not self.returns:
            return {"episode_return_mean": math.nan, "episode_return_max": math.nan,
                    "episode_return_min": math.nan, "episode_len_mean": math.nan, "episodes": 0}
        return {"episode_return_mean": math.fsum(self.returns) / len(self.returns),
                "episode_return_max": max(self.returns), "episode_return_min": min(self.returns),
                "episode_len_mean": sum(self.lengths) / len(self.lengths), "episodes": self.episodes}

    def get_state(self) -> dict[str, Any]:
        """Plain data (JSON-safe) for a checkpoint."""
        return {"returns": list(self.returns), "lengths": list(self.lengths), "episodes": self.episodes}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore `get_state`; a smaller window keeps the newest episodes."""
        self.returns.clear()
        self.lengths.clear()
        self.returns.extend(float(r) for r in state["returns"])
        self.lengths.extend(int(n) for n in state["lengths"])
        self.episodes = int(state["episodes"])


class RunnerEpisodes:
    """One EnvRunner's episodes: the earlier chunks of those still running, the finished ones not yet collected."""

    def __init__(self) -> None:
        self.running: dict[str, tuple[float, int]] = {}  # episode id -> (return, length) of its handed-out chunks
        self.finished: list[tuple[float, int]] = []


def _on_runner(env_runner: Any) -> RunnerEpisodes | None:
    """The EnvRunner's RunnerEpisodes; None on an evaluation EnvRunner (not training episodes, never collected)."""
    if getattr(env_runner.config, "in_evaluation", False):
        return None
    return vars(env_runner).setdefault(_RUNNER, RunnerEpisodes())


def on_episode_end(*, episode: Any, env_runner: Any, **_: Any) -> None:
    """On the EnvRunner: the episode's return and length, its earlier chunks included, kept until collected."""
    episodes = _on_runner(env_runner)
    if episodes is not None:
        earlier_return, earlier_length = episodes.running.pop(episode.id_, (0.0, 0))
        episodes.finished.append((earlier_return + float(episode.get_return()), earlier_length + len(episode)))


def on_sample_end(*, env_runner: Any, samples: list[Any], **_: Any) -> None:
    """On the EnvRunner: add each unfinished chunk handed out to its episode's running sums.

    An episode still running after this `sample()` call has a chunk here; any other id in
    `running` belongs to an episode the EnvRunner dropped (a forced reset), so it goes.
    """
    episodes = _on_runner(env_runner)
    if episodes is None:
        return
    running = {}
    for chunk in samples:
        if not chunk.is_done:
            earlier_return, earlier_length = episodes.running.get(chunk.id_, (0.0, 0))
            running[chunk.id_] = (earlier_return + float(chunk.get_return()), earlier_length + len(chunk))
    episodes.running = running


def collect(env_runner: Any) -> list[tuple[float, int]]:
    """On an EnvRunner (any process): the episodes it finished since the last call, oldest first."""
    episodes = _on_runner(env_runner)
    if episodes is None:
        return []
    finished, episodes.finished = episodes.finished, []
    return finished


def window_of(algorithm: Any) -> EpisodeWindow:
    """The Algorithm's episode window (made on first use, `metrics_num_episodes_for_smoothing` long)."""
    window = vars(algorithm).get(_WINDOW)
    if window is None:
        window = EpisodeWindow(int(algorithm.config.metrics_num_episodes_for_smoothing))
        setattr(algorithm, _WINDOW, window)
    return window


def collect_all(algorithm: Any) -> list[tuple[float, int]]:
    """Every training EnvRunner's finished episodes since the last collection (the local one first)."""
    return [episode for finished in algorithm.env_runner_group.foreach_env_runner(collect) for episode in finished]


def on_train_result(*, algorithm: Any, result: dict, **_: Any) -> None:
    """After RLlib's iteration: add the finished episodes to the window, report its figures in `result`."""
    window = window_of(algorithm)
    window.add(collect_all(algorithm))
    result[RESULT_KEY] = window.metrics()


def add_callbacks(algo_config: Any, **callbacks: Callable[..., None]) -> None:
    """Append callables to `AlgorithmConfig.callbacks(on_...=...)`, after any already there (none replaced)."""
    for name, fn in callbacks.items():
        present = getattr(algo_config, f"callbacks_{name}", None)
        before = list(present) if isinstance(present, (list, tuple)) else [] if present is None else [present]
        algo_config.callbacks(**{name: [*before, fn]})


def install(algo_config: Any) -> None:
    """Count episodes for this config's Algorithm. Install it first: a later `on_train_result` then sees our return."""
    add_callbacks(algo_config, on_episode_end=on_episode_end, on_sample_end=on_sample_end,
                  on_train_result=on_train_result)
