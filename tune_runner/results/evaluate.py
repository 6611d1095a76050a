"""Run a trained policy for N episodes in a plain gymnasium env: `evaluate(policy, episodes=..., seed=...)`.

Actions are the policy's deterministic ones; episode i resets the env with seed + i, so a run
is reproducible and `--seed S+i --episodes 1` replays its episode i alone. With
`render="rgb_array"` and `video`, every frame goes into one video file (imageio + ffmpeg).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tune_runner.errors import UserError

RENDER_MODES = ("rgb_array", "human")
PROGRESS_EVERY_S = 15.0  # a long evaluation says how far it is, at most this often


@dataclass(frozen=True)
class Evaluation:
    """Each episode's return and length, and the video written (if any)."""

    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    video: Path | None = None
    frames: int = 0

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))


def check_options(*, episodes: int, seed: int, render: str | None, video: Path | None,
                  epsilon: float = 0.0) -> None:
    """The CLI's flags, checked before anything loads: one line naming the flag, the value and the fix."""
    if not 0.0 <= epsilon <= 1.0:  # NaN too
        raise UserError(f"--epsilon {epsilon}: the share of random actions, from 0 (greedy, the default) to 1")
    if episodes < 1:
        raise UserError(f"--episodes {episodes}: must be a positive integer")
    if seed < 0:
        raise UserError(f"--seed {seed}: must be 0 or more (gymnasium seeds are non-negative)")
    if render is not None and render not in RENDER_MODES:
        raise UserError(f"--render {render}: expected one of {', '.join(RENDER_MODES)}")
    if video is not None and render not in (None, "rgb_array"):
        raise UserError(f"--video {video}: writes rgb_array frames, not --render {render}; drop --render {render}")
    if render == "rgb_array" and video is None:
        raise UserError("--render rgb_array: the frames go nowhere; add --video FILE.mp4 to keep them")
    if video is not None:
        _video_module(video)
        if not video.expanduser().resolve().parent.is_dir():
            raise UserError(f"--video {video}: the folder {video.expanduser().resolve().parent} does not exist")


def render_mode(render: str | None, video: Path | None) -> str | None:
    """The env's render mode: the one asked for, else rgb_array when frames go to a video."""
    return render or ("rgb_array" if video is not None else None)


def evaluate(policy: Any, *, episodes: int, seed: int = 0, render: str | None = None, video: Path | None = None,
             epsilon: float = 0.0, progress: TextIO | None = None) -> Evaluation:
    """Run `episodes` episodes of `policy` (a tune_runner.results.policy.Policy) in its env; returns and lengths.

    With `epsilon`, each step takes a random action (one the env allows) with that probability, drawn from
    the episode's own generator (seed + i), so a run repeats: a greedy policy can loop where training's own
    exploration broke the loop (a DQN on Acrobot: -500 greedy, about -150 with epsilon 0.01).
    `progress` gets a line now and then when the evaluation takes long.
    """
    check_options(episodes=episodes, seed=seed, render=render, video=video, epsilon=epsilon)
    render = render_mode(render, video)
    env = make_env(policy.env_id, env_config=policy.env_config, render=render)
    recorder = None
    try:
        if video is not None:
            recorder = Recorder(video, fps=env.metadata.get("render_fps") or 30)
        returns, lengths = run_episodes(env, policy, episodes=episodes, seed=seed, recorder=recorder,
                                        progress=progress, epsilon=epsilon)
    except BaseException:
        if recorder is not None:
            recorder.close(keep=False)  # nothing half-written
        raise
    finally:
        env.close()
    if recorder is None:
        return Evaluation(tuple(returns), tuple(lengths))
    recorder.close(keep=True)
    return Evaluation(tuple(returns), tuple(lengths), recorder.path, recorder.frames)


def run_episodes(env: Any, policy: Any, *, episodes: int, seed: int, recorder: Recorder | None,
                 progress: TextIO | None, epsilon: float = 0.0) -> tuple[list[float], list[int]]:
    """Episode i from reset(seed + i); (returns, lengths)."""
    returns, lengths = [], []
    started = shown = time.monotonic()
    for i in range(episodes):
        total, steps = run_episode(env, policy, seed=seed + i, recorder=recorder, epsilon=epsilon)
        returns.append(total)
        lengths.append(steps)
        if progress is not None and time.monotonic() - shown >= PROGRESS_EVERY_S and i + 1 < episodes:
            shown = time.monotonic()
            print(f"evaluate   {i + 1}/{episodes} episodes  ({shown - started:.0f} s)", file=progress)
    return returns, lengths


def run_episode(env: Any, policy: Any, *, seed: int, recorder: Recorder | None,
                epsilon: float = 0.0) -> tuple[float, int]:
    """One episode from reset(seed) to termination or truncation: (return, length)."""
    obs, _ = env.reset(seed=seed)
    total, steps, done = 0.0, 0, False
    explore = np.random.default_rng(seed) if epsilon > 0 else None
    if recorder is not None:
        recorder.add(env.render())
    while not done:
        if explore is not None and explore.random() < epsilon:
            action = random_action(env.action_space, obs, explore)
        else:
            action = policy.compute_single_action(obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, steps, done = total + float(reward), steps + 1, bool(terminated or truncated)
        if recorder is not None:
            recorder.add(env.render())
    return total, steps


def random_action(space: Any, obs: Any, rng: np.random.Generator) -> Any:
    """A uniformly random action of `space` from `rng`, among those an `action_mask` in the observation allows."""
    import gymnasium as gym

    mask = obs.get("action_mask") if isinstance(obs, dict) else None
    if isinstance(space, gym.spaces.Discrete):
        allowed = np.flatnonzero(np.asarray(mask, dtype=bool)) if mask is not None else np.arange(space.n)
        return space.start + int(rng.choice(allowed))
    if mask is not None:
        raise UserError(f"--epsilon: random actions under an action_mask need a Discrete action space, not {space}; "
                        f"evaluate this policy greedily (drop --epsilon)")
    if isinstance(space, gym.spaces.Box):
        return rng.uniform(space.low, space.high).astype(space.dtype)
    space.seed(int(rng.integers(2**31)))  # MultiDiscrete, MultiBinary: the space's own draw, seeded from ours
    return space.sample()


def make_env(env_id: str, *, env_config: dict[str, Any], render: str | None) -> Any:
    """`gymnasium.make(env_id, render_mode=render, **env_config)`, its failure as one line."""
    import gymnasium as gym

    if render == "rgb_array":
        # pygame (classic-control rendering) needs no screen or sound card for frames; without this
        # it prints ALSA and XDG errors on a headless machine.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        # render_mode=None is left out: an env written without rendering takes no such argument.
        env = gym.make(env_id, **env_config, **({"render_mode": render} if render else {}))
        if render is not None:
            env.reset(seed=0)
            env.render()  # a missing renderer (pygame, mujoco) shows now, not after the first episode
    except gym.error.Error as exc:
        flag = f"--render {render}: " if render and isinstance(exc, gym.error.DependencyNotInstalled) else ""
        raise UserError(f"{flag}env {env_id}: {str(exc).strip().splitlines()[0]}") from None
    return env


# gymnasium's env checker warns of what MinAtar's renderer does, and we handle: float rgb_array frames
# (video_frame reads them) and no render_fps (a video then plays at 30 frames a second).
warnings.filterwarnings("ignore", message=".*RGB-array rendering should return a numpy array with dtype uint8")
warnings.filterwarnings("ignore", message=".*No render fps was declared in the environment")
MIN_VIDEO_SIDE = 160  # frames smaller than this a side (MinAtar's 10x10) are enlarged, each pixel a square block


def video_frame(frame: Any, *, unit_floats: bool) -> np.ndarray:
    """An env's rgb_array frame as the uint8 frame a video holds: float frames in [0, 1] (`unit_floats`, as MinAtar
    renders) scaled to 0-255, others clipped to it, and a small frame enlarged (nearest pixel) to MIN_VIDEO_SIDE."""
    frame = np.asarray(frame)
    if frame.dtype != np.uint8:
        values = frame.astype(np.float64) * (255.0 if unit_floats else 1.0)
        frame = np.clip(np.rint(values), 0, 255).astype(np.uint8)
    factor = -(-MIN_VIDEO_SIDE // max(1, min(frame.shape[:2])))
    if factor > 1:
        frame = frame.repeat(factor, axis=0).repeat(factor, axis=1)
    return frame


class Recorder:
    """Frames into a video file, written under a temporary name and renamed when complete.

    gymnasium's rgb_array frames are uint8; an env that renders floats is read as [0, 1] when its first frame's
    values lie there (MinAtar's), else as 0-255, so that one video never mixes the two readings."""

    def __init__(self, path: Path, *, fps: float) -> None:
        imageio = _video_module(path)
        self.path = path.expanduser().resolve()
        self.tmp = self.path.with_name(f".{self.path.stem}.partial{self.path.suffix}")  # ffmpeg picks by suffix
        # macro_block_size 2: even sizes for H.264 without resizing frames that are even already.
        self.writer = imageio.get_writer(self.tmp, fps=fps, macro_block_size=2)
        self.frames = 0
        self.unit_floats: bool | None = None

    def add(self, frame: np.ndarray | None) -> None:
        if frame is not None:
            frame = np.asarray(frame)
            if self.unit_floats is None:
                self.unit_floats = frame.dtype.kind == "f" and float(frame.max(initial=0.0)) <= 1.0
            self.writer.append_data(video_frame(frame, unit_floats=self.unit_floats))
            self.frames += 1

    def close(self, *, keep: bool) -> None:
        self.writer.close()
        if keep and self.frames:
            self.tmp.replace(self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def _video_module(path: Path) -> Any:
    """imageio (v2 API) with its ffmpeg plug-in, or one line saying which extra installs them."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401 - imageio's mp4 writer
    except ImportError as exc:
        missing = (exc.name or "imageio").split(".")[0]
        raise UserError(f"--video {path}: needs {missing} (not installed); pip install 'tune-rl[video]'") from None
    return imageio


def summary(result: Evaluation, *, env_id: str, seed: int, epsilon: float = 0.0) -> str:
    """One line: env, episodes, mean ± std return, mean length."""
    count = len(result.returns)
    seeds = f"seed {seed}" if count == 1 else f"seeds {seed}-{seed + count - 1}"
    seeds += f", epsilon {epsilon:g}" if epsilon else ""
    return (f"{env_id}  {count} episode{'s' if count > 1 else ''} ({seeds})  "
            f"return {result.mean:.1f} ± {result.std:.1f}  length {result.mean_length:.1f}")
