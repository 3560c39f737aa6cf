"""A synchronous vector env whose sub-envs' world calls meet in one batched model call.

Gymnasium's ``SyncVectorEnv`` steps its sub-envs one after another, so N episodes over a
video world cost N sequential model calls. :class:`BatchedWorldVectorEnv` is a
``SyncVectorEnv`` (same spaces, seeding, autoreset modes and info batching) that runs the
sub-envs' ``step`` calls side by side in threads; each sub-env's world hands its model
request to a shared :class:`WorldCallBatcher` instead of calling the model, and once every
stepping sub-env has either handed in its request or finished, the batcher runs all requests
through one batched call (:func:`kosmos_env.worlds.cosmos3_batch.generate_batch`: one
denoising loop for the whole batch). Everything else in a step (action checks, the gate, the
judge) runs per sub-env exactly as in a single env, so a vector rollout equals N single
rollouts with the same seeds (within the float tolerance of batched arithmetic).

A progress-judged env (``reward.mode = "progress"`` with a progress judge, e.g. ``vlm_progress`` on
Bridge) batches its step judge the same way: every sub-env hands its chunk to a second batcher,
:attr:`BatchedWorldVectorEnv.progress_batcher`, which scores all of them in one ``score_progress``
call of one judge (one model call per vector step, not one per sub-env), and
:func:`make_batched_vec` loads that judge once and gives it to every sub-env.

Worlds that can take part expose a ``batcher`` attribute: the Cosmos 3 world (its requests are
diffusers calls, run through one denoising loop) and the learned tabletop (its request is one
action on its own one-episode engine; the world hands the batcher an object with
``kosmos_run_batch``, which steps all lanes' engines as one batch:
:meth:`kosmos_env.worlds.tabletop_learned.engine.Engine.step_lanes`). Only those sub-envs step in
threads. Any other sub-env steps in the calling thread, one after another, exactly as in a
``SyncVectorEnv``: the MuJoCo tabletop renders through an EGL context, which is current in the
thread that last rendered with it, and making it current in another thread fails
(``EGL_BAD_ACCESS``, measured with MuJoCo 4.0 and Mesa EGL: reset in the main thread, step in a
worker thread), and resets (also autoresets) always run in the calling thread.

    envs = gymnasium.make_vec("Kosmos-Bridge-v1", num_envs=4, vectorization_mode="vector_entry_point",
                              world_kwargs={...})
    envs = gymnasium.make_vec("Kosmos-TabletopLearned-v1", num_envs=8, vectorization_mode="vector_entry_point")
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import gymnasium
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate


class WorldCallBatcher:
    """Collects one model request per stepping sub-env and runs them as one batch.

    A round starts with :meth:`open_round` (how many participants step). A participant
    either calls :meth:`generate` (and blocks until the batch holding its request has run)
    or :meth:`leave` once its step is over. The batch runs as soon as every participant
    still in the round is waiting in :meth:`generate`.
    """

    def __init__(self, run_batch: Callable[[Any, list], tuple[list, Any]] | None = None):
        self._cond = threading.Condition()
        self._active = 0
        self._pending: list[tuple[int, Any, dict]] = []
        self._results: dict[int, Any] = {}
        self._next_ticket = 0
        self._run_batch = run_batch
        self._shared: dict[Any, Any] = {}
        #: sizes of the batches run so far, and whether each was a true batched call
        self.batches: list[tuple[int, bool]] = []

    def shared(self, key: Any, make: Callable[[], Any]) -> Any:
        """One object per ``key`` for every participant of this batcher (made on first request):
        e.g. the learned tabletop's lane stepper, which keeps the batch's stacked tensors between
        rounds."""
        with self._cond:
            if key not in self._shared:
                self._shared[key] = make()
            return self._shared[key]

    def open_round(self, participants: int) -> None:
        with self._cond:
            self._active = participants
            self._pending, self._results = [], {}

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            self._flush_if_ready()

    def generate(self, pipe: Any, kwargs: dict) -> Any:
        """The request's result, run inside a batch: a diffusers pipeline's video (as
        ``np.asarray(pipe(**kwargs).video)``), or what ``pipe.kosmos_run_batch`` returns for it."""
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._pending.append((ticket, pipe, kwargs))
            self._flush_if_ready()
            while ticket not in self._results:
                self._cond.wait()
            result = self._results.pop(ticket)
        if isinstance(result, BaseException):
            raise result
        return result

    def _flush_if_ready(self) -> None:
        if not self._pending or len(self._pending) < self._active:
            return
        pending, self._pending = self._pending, []
        # requests on different pipelines cannot share a loop: one batch per pipeline object
        groups: dict[int, list[tuple[int, Any, dict]]] = {}
        for item in pending:
            groups.setdefault(id(item[1]), []).append(item)
        for items in groups.values():
            pipe = items[0][1]
            # a request target that batches itself (the learned tabletop's lane stepper) runs its own
            # batch; anything else is a diffusers pipeline
            own = getattr(pipe, "kosmos_run_batch", None)
            run = (lambda _pipe, requests: own(requests)) if own is not None else (self._run_batch or _generate_batch)
            try:
                videos, report = run(pipe, [kw for _, _, kw in items])
                self.batches.append((len(items), bool(getattr(report, "batched", True))))
                for (ticket, _, _), video in zip(items, videos, strict=True):
                    self._results[ticket] = video
            except Exception as exc:  # every waiting participant sees the failure
                for ticket, _, _ in items:
                    self._results[ticket] = exc
        self._cond.notify_all()


def _generate_batch(pipe: Any, requests: list) -> tuple[list, Any]:
    from kosmos_env.worlds.cosmos3_batch import generate_batch

    return generate_batch(pipe, requests)


class _ProgressCalls:
    """A batcher request target that scores its requests' chunks in one ``score_progress`` call."""

    def __init__(self, judge: Any):
        self.judge = judge

    def kosmos_run_batch(self, requests: list) -> tuple[list, Any]:
        scores = self.judge.score_progress(
            [r["chunk"] for r in requests],
            [r["instruction"] for r in requests],
            [r["task"] for r in requests],
            first_frames=[r["first_frame"] for r in requests],
        )
        if len(scores) != len(requests):
            raise RuntimeError(f"progress judge returned {len(scores)} scores for {len(requests)} chunks")
        return list(scores), None


def _progress_request(batcher: WorldCallBatcher, target: _ProgressCalls) -> Callable[..., Any]:
    """What a sub-env calls to score its chunk inside the round's batch (``KosmosEnv.progress_batch``)."""

    def score(chunk: Any, instruction: str, task: str, first_frame: Any) -> Any:
        return batcher.generate(
            target, {"chunk": chunk, "instruction": instruction, "task": task, "first_frame": first_frame}
        )

    return score


class _PreStepped(gymnasium.Wrapper):
    """Returns the step result computed ahead (in a thread) when there is one."""

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)
        self.ready: Any = None

    def step(self, action):
        if self.ready is None:
            return self.env.step(action)
        result, self.ready = self.ready, None
        if isinstance(result, BaseException):
            raise result
        return result


class BatchedWorldVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` with threaded sub-env steps and batched world calls (module docstring)."""

    def __init__(self, env_fns: Sequence[Callable[[], gymnasium.Env]], **kwargs: Any):
        super().__init__([lambda fn=fn: _PreStepped(fn()) for fn in env_fns], **kwargs)
        self.batcher = WorldCallBatcher()
        #: scores the stepping sub-envs' chunks in one call of their progress judge (progress rewards)
        self.progress_batcher = WorldCallBatcher()
        #: which sub-envs' worlds take part in the batched calls (and so step in threads)
        self.batched = []
        targets: dict[int, _ProgressCalls] = {}  # one per judge object: its requests share a call
        for env in self.envs:
            world = getattr(env.unwrapped, "world", None)
            takes_part = world is not None and hasattr(world, "batcher")
            if takes_part:
                world.batcher = self.batcher
                judge = getattr(env.unwrapped, "progress_judge", None)
                if judge is not None:
                    target = targets.setdefault(id(judge), _ProgressCalls(judge))
                    env.unwrapped.progress_batch = _progress_request(self.progress_batcher, target)
            self.batched.append(takes_part)
        self._pool = ThreadPoolExecutor(max_workers=len(self.envs), thread_name_prefix="kosmos-vec")

    def step(self, actions):
        stepping = [
            i
            for i in range(self.num_envs)
            if not (self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i])
        ]
        per_env = list(iterate(self.action_space, actions))
        for i, result in self.step_some({i: per_env[i] for i in stepping}).items():
            self.envs[i].ready = result  # an exception is re-raised by the wrapper in the main thread
        try:
            return super().step(actions)
        finally:
            for env in self.envs:  # a sub-env that raised leaves the others' results unread: drop them
                env.ready = None

    def step_some(self, actions: Mapping[int, Any]) -> dict[int, Any]:
        """Step only the sub-envs ``actions`` names (index -> its action), side by side, their world
        calls in one batch; no autoreset and no batching of the results (the lockstep campaign
        worker steps only the episodes running). The sub-envs may be at different steps of their
        episodes, and one may have been reset alone since the last call (a refilled lockstep
        lane): each world request carries its own frame, actions and seed. Returns index -> that env's
        ``(obs, reward, terminated, truncated, info)``, or the exception its step raised."""
        results: dict[int, Any] = {}
        threaded = {i: a for i, a in actions.items() if self.batched[i]}
        self.batcher.open_round(len(threaded))
        self.progress_batcher.open_round(len(threaded))

        def run(i: int, action: Any) -> None:
            try:
                results[i] = self.envs[i].env.step(action)
            except BaseException as exc:
                results[i] = exc
            finally:
                self.batcher.leave()
                self.progress_batcher.leave()

        futures = [self._pool.submit(run, i, a) for i, a in threaded.items()]
        for i, action in actions.items():  # the rest here, in this thread (module docstring: EGL)
            if i not in threaded:
                try:
                    results[i] = self.envs[i].env.step(action)
                except Exception as exc:
                    results[i] = exc
        for future in futures:
            future.result()
        return {i: results[i] for i in actions}

    def close_extras(self, **kwargs: Any) -> None:
        self._pool.shutdown(wait=True)
        super().close_extras(**kwargs)


def make_batched_vec(num_envs: int = 1, **env_kwargs: Any) -> BatchedWorldVectorEnv:
    """Vector entry point: ``num_envs`` Kosmos envs built with the same keyword arguments.

    A progress judge (a model) is loaded once, by the first sub-env, and handed to the others
    (``step_judge=``), so N sub-envs hold one copy of it and their chunks meet in one call.
    """
    from kosmos_env.env import KosmosEnv

    env_kwargs.pop("max_episode_steps", None)  # the spec owns the horizon
    shared: dict[str, Any] = {}

    def make() -> KosmosEnv:
        kwargs = dict(env_kwargs)
        if shared.get("progress_judge") is not None:
            kwargs.setdefault("step_judge", shared["progress_judge"])
        env = KosmosEnv(**kwargs)
        shared.setdefault("progress_judge", env.progress_judge)
        return env

    return BatchedWorldVectorEnv([make for _ in range(num_envs)])
