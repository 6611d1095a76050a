"""A search's last trial actors, kept alive for its re-evaluation.

Ray ends an actor's process with the actor, and Ray Tune reuses trial actors only within one Tuner.fit: so the
re-evaluation that follows a search started new trial processes, each paying its imports again before its first
iteration (ray.tune and torch: about 6.8 CPU-s for our learners, bench/trial_startup.py). Here the search's
controller hands the actors of its last trials to the re-evaluation's controller instead of ending them, and that
one resets each for a trial of its own as Tune resets a cached actor within a fit (Trainable.reset_config).

Only between those two fits of one search: a kept actor holds the placement group its trial had (its CPUs and
GPUs), so the kept actors are ended as soon as the re-evaluation asks for a trial they do not fit, and when the
search ends in any case (`release`, in the runner's `finally`).

Ray Tune builds its TuneController in ray.tune.tune.run; a subclass of it moves an actor and its placement group
between two controllers' actor and resource managers. Those are private parts of Ray (pinned in pyproject.toml):
where they are not as expected, nothing is kept and both fits run as Tune's own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass
class _Kept:
    tracked: Any  # Tune's TrackedActor
    handle: Any  # its Ray actor handle
    acquired: Any  # its placement group, as the resource manager acquired it
    request: Any  # the resource manager's key for it
    resources: Any  # the trial's PlacementGroupFactory: Tune's key for reusing an actor
    trainable: str  # the trial's trainable name


class WarmTrials:
    """Up to `keep` trial actors, kept from one fit (`keeping`) for the next (`adopting`)."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.kept: list[_Kept] = []
        self.adopted = 0  # trials of the second fit that started on a kept actor

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        """Tuner.fit calls inside keep the actors of the trials that end once no trial is left to start."""
        with _controller_class(self, keep=True):
            yield

    @contextlib.contextmanager
    def adopting(self) -> Iterator[None]:
        """Tuner.fit calls inside start their trials on the kept actors that fit them; the rest are ended."""
        try:
            with _controller_class(self, keep=False):
                yield
        finally:
            self.release()

    def release(self) -> None:
        """End every kept actor and free its placement group."""
        kept, self.kept = self.kept, []
        if not kept:
            return
        import ray
        from ray.util.placement_group import remove_placement_group

        if not ray.is_initialized():
            return
        for actor in kept:  # either may be gone already (with its node): nothing to end or free then
            with contextlib.suppress(Exception):
                ray.kill(actor.handle)
            with contextlib.suppress(Exception):
                remove_placement_group(actor.acquired.placement_group)

    def take(self, controller: Any, trial: Any) -> bool:
        """Keep `trial`'s actor, which `controller` would end now: True when it did (Tune then leaves it)."""
        if len(self.kept) >= self.keep or not controller._search_alg.is_finished() or controller._staged_trials:
            return False  # full, or Tune may still give it a trial of this fit
        tracked = controller._trial_to_actor.get(trial)
        manager = controller._actor_manager
        if not _books_as_expected(manager) or tracked is None or tracked not in controller._started_actors:
            return False
        if (not manager.is_actor_started(tracked) or manager.is_actor_failed(tracked)
                or manager._tracked_actors_to_task_futures.get(tracked)):
            return False
        live = manager._live_actors_to_ray_actors_resources.get(tracked)
        resources = manager._resource_manager
        group = getattr(live[1], "placement_group", None) if live else None
        if group is None or group not in resources._acquired_pgs or group not in resources._pg_to_request:
            return False
        # Out of this controller's books (so that its clean-up neither waits for it nor ends it) ...
        manager._live_actors_to_ray_actors_resources.pop(tracked)
        manager._live_resource_cache = None
        manager._cleanup_actor_futures(tracked)
        resources._acquired_pgs.remove(group)
        request = resources._pg_to_request.pop(group)
        controller._trial_to_actor.pop(trial)
        controller._actor_to_trial.pop(tracked)
        controller._started_actors.discard(tracked)
        trial.set_ray_actor(None)
        for set_callback in (tracked.set_on_start, tracked.set_on_stop, tracked.set_on_error):
            set_callback(None)
        # ... and into ours.
        self.kept.append(_Kept(tracked, live[0], live[1], request, trial.placement_group_factory,
                               trial.trainable_name))
        logger.debug("kept the actor of trial %s for the next fit", trial)
        return True

    def hand(self, controller: Any, trial: Any) -> None:
        """Put a kept actor that fits `trial` into `controller`'s actor cache, where Tune's own reuse takes it;
        when none fits, end them all: their placement groups may be what the trial waits for."""
        fits = next((k for k in self.kept if k.trainable == trial.trainable_name
                     and k.resources == trial.placement_group_factory), None)
        manager = controller._actor_manager
        # The trial is staged: Tune raised the cache's maximum for its resources before asking for an actor.
        if (fits is None or not _books_as_expected(manager)
                or not controller._actor_cache.cache_object(trial.placement_group_factory, fits.tracked)):
            self.release()
            return
        self.kept.remove(fits)
        manager._live_actors_to_ray_actors_resources[fits.tracked] = (fits.handle, fits.acquired)
        manager._live_resource_cache = None
        manager._resource_manager._acquired_pgs.add(fits.acquired.placement_group)
        manager._resource_manager._pg_to_request[fits.acquired.placement_group] = fits.request
        fits.tracked.set_on_start(controller._actor_started)
        fits.tracked.set_on_stop(controller._actor_stopped)
        fits.tracked.set_on_error(controller._actor_failed)
        controller._started_actors.add(fits.tracked)
        self.adopted += 1


@contextlib.contextmanager
def _controller_class(pool: WarmTrials, *, keep: bool) -> Iterator[None]:
    """ray.tune.tune.run builds this subclass of its TuneController for the fits inside: it keeps and hands over
    trial actors, and writes Tune's state so that a full disk cannot cut it short."""
    import ray.tune.tune as tune_run
    from ray.tune.execution.tune_controller import TuneController

    class Controller(TuneController):
        def _maybe_cache_trial_actor(self, trial: Any) -> bool:
            if super()._maybe_cache_trial_actor(trial):
                return True
            return keep and _guarded(pool.take, self, trial, default=False)

        def save_to_dir(self) -> None:
            """Tune's state written so that a disk that fills cannot leave it cut short (tuning.disk): the file
            from before is moved aside first (a rename needs no space) and put back when the new one fails."""
            path = Path(self._storage.experiment_driver_staging_path, self.experiment_state_file_name)
            aside = path.with_name(f".{path.name}.before")
            if path.is_file():
                os.replace(path, aside)
            try:
                super().save_to_dir()
            except OSError:
                if aside.is_file():
                    os.replace(aside, path)
                raise
            aside.unlink(missing_ok=True)

        def _maybe_reuse_cached_actor(self, trial: Any) -> bool:
            if (not keep and pool.kept and trial not in self._resetting_trials
                    and not self._actor_cache.has_cached_object(trial.placement_group_factory)):
                _guarded(pool.hand, self, trial, default=None)
            return super()._maybe_reuse_cached_actor(trial)

    if tune_run.TuneController is not TuneController:
        yield  # another controller is in place (a fit inside a fit, or someone else's): leave it be
        return
    tune_run.TuneController = Controller
    try:
        yield
    finally:
        tune_run.TuneController = TuneController


def _books_as_expected(manager: Any) -> bool:
    """Whether Ray's actor and resource managers keep the books this module moves actors between (Ray 2.60's)."""
    resources = getattr(manager, "_resource_manager", None)
    return (isinstance(getattr(manager, "_live_actors_to_ray_actors_resources", None), dict)
            and callable(getattr(manager, "_cleanup_actor_futures", None))
            and isinstance(getattr(resources, "_acquired_pgs", None), set)
            and isinstance(getattr(resources, "_pg_to_request", None), dict))


def _guarded(step: Any, controller: Any, trial: Any, *, default: Any) -> Any:
    """`step`, or `default` where Ray's private parts are not what this module expects (another Ray version)."""
    try:
        return step(controller, trial)
    except (AttributeError, KeyError, TypeError) as exc:
        logger.debug("warm trials off: %r", exc)
        return default
