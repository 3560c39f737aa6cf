"""Gymnasium wrappers that let off-the-shelf RL libraries (Stable-Baselines3, TorchRL) train in the envs.

A Kosmos env observes a ``Dict`` holding a ``Text`` instruction, which most RL libraries refuse.
:class:`KosmosObservation` turns it into a ``Dict`` of arrays only, through the functions of
:mod:`kosmos_env.utils.obs_encoding` (the same ones a trained-checkpoint policy applies to raw
observations, so a network trained here sees identical arrays when it is evaluated);
:class:`StackFrames` stacks the last few of those observations with a layout a CNN reads;
Gymnasium's own :class:`~gymnasium.wrappers.RescaleAction` maps actions onto [-1, 1].
:func:`make_rl_env` applies all of them in one call::

    env = make_rl_env("Kosmos-Tabletop-v1", image_size=(64, 64), frame_stack=2)
    model = stable_baselines3.PPO("MultiInputPolicy", env)
    instructions = env.get_wrapper_attr("instructions")   # store them beside the weights

Gymnasium 1.x wrappers do not forward attribute reads to inner wrappers: read ``instructions``
(and ``task_encoding``, ``image_size``) with ``env.get_wrapper_attr(name)``.
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import FrameStackObservation, RescaleAction

from kosmos_env.utils.obs_encoding import STATE_KEYS, encode_state, encode_task, resize_image
from kosmos_env.tasks import load_suite

TASK_ENCODINGS = ("onehot", "index")


class KosmosObservation(gymnasium.ObservationWrapper, gymnasium.utils.RecordConstructorArgs):
    """Observations as a ``Dict`` of arrays: image, state vector, task.

    The wrapped env must be a Kosmos env (``env.unwrapped`` has ``task_names`` and
    ``kosmos_spec``) whose observations carry the state extras ``ee_pos``, ``ee_euler`` and
    ``gripper`` (both tabletop worlds do; ``Kosmos-Bridge-v1`` does not, a ``ValueError``).

    Observation space, ``spaces.Dict`` with exactly these keys:

    - ``image``: ``Box(0, 255, (h, w, 3), uint8)``, the env's frame; at ``image_size`` = (h, w)
      when given (``obs_encoding.resize_image``: area averaging), else at the env's own size;
    - ``state``: ``Box(low, high, (7,), float32)``, ``obs_encoding.encode_state``:
      ``[ee_pos (3), ee_euler (3), gripper (1)]``; ``low``/``high`` are the sub-spaces' bounds
      concatenated in that order (tabletop: ±2.0 m, ±pi rad, [0, 1]);
    - ``task``: with ``task_encoding="onehot"``, ``Box(0.0, 1.0, (K,), float32)``, a one-hot of
      the instruction's position in :attr:`instructions`; with ``"index"``, ``Discrete(K)``
      holding that position (an ``np.int64``). K is the number of tasks in the env's suite.
      Either equals ``obs_encoding.encode_task(instruction, instructions, onehot)``.

    Attributes: :attr:`instructions` (tuple of K strings, in suite order: the encoding's
    vocabulary, to be stored with a trained network), :attr:`task_names` (the matching task
    names), :attr:`task_encoding`, :attr:`image_size` ((h, w) of the produced image).
    Actions, rewards and infos pass through unchanged.
    """

    def __init__(self, env: gymnasium.Env, *, task_encoding: str = "onehot", image_size: Sequence[int] | None = None):
        task_encoding = _check_task_encoding(task_encoding)
        size = _check_image_size(image_size)
        source = env.observation_space
        name = _env_name(env)
        if not isinstance(source, spaces.Dict) or "image" not in source.spaces or "instruction" not in source.spaces:
            raise ValueError(
                f"KosmosObservation needs a Kosmos env (Dict observation with 'image' and 'instruction'); {name} observes {source}"
            )
        missing = [key for key in STATE_KEYS if key not in source.spaces]
        if missing:
            raise ValueError(
                f"{name} observations have no {missing}: the state vector needs {list(STATE_KEYS)}, which only the tabletop worlds provide"
            )
        not_box = [key for key in STATE_KEYS if not isinstance(source.spaces[key], spaces.Box)]
        if not_box:
            raise ValueError(f"{name} observation extras {not_box} are not Box spaces; the state vector needs Boxes")
        base = env.unwrapped
        if not hasattr(base, "task_names") or not hasattr(base, "kosmos_spec"):
            raise ValueError(
                f"KosmosObservation needs a Kosmos env (env.unwrapped with task_names and kosmos_spec); got {type(base).__name__}"
            )
        # recorded so that env.spec can remake the wrapped env (Gymnasium's check_env does)
        gymnasium.utils.RecordConstructorArgs.__init__(self, task_encoding=task_encoding, image_size=size)
        gymnasium.ObservationWrapper.__init__(self, env)

        # The vocabulary comes from the suite file, in the env's task order, so that two envs of
        # the same suite (and a checkpoint policy reading it back) agree on every position.
        suite = load_suite(base.kosmos_spec.tasks["suite"])
        self.task_names: tuple[str, ...] = tuple(base.task_names)
        self.instructions: tuple[str, ...] = tuple(suite.tasks[task].instruction for task in self.task_names)
        self.task_encoding = task_encoding
        self._onehot = task_encoding == "onehot"

        image = source.spaces["image"]
        if not isinstance(image, spaces.Box) or len(image.shape) != 3 or image.shape[2] != 3:
            raise ValueError(f"{name} image space is {image}; KosmosObservation needs a (H, W, 3) uint8 Box")
        self.image_size: tuple[int, int] = size if size is not None else (int(image.shape[0]), int(image.shape[1]))
        self._resize = size

        # bounds of the state vector: each extra's own bounds, flattened and concatenated in the
        # order encode_state concatenates the values, so every encoded observation lies inside
        low = np.concatenate([np.asarray(source.spaces[k].low, np.float32).reshape(-1) for k in STATE_KEYS])
        high = np.concatenate([np.asarray(source.spaces[k].high, np.float32).reshape(-1) for k in STATE_KEYS])
        k = len(self.instructions)
        task_space: spaces.Space = spaces.Box(0.0, 1.0, (k,), dtype=np.float32) if self._onehot else spaces.Discrete(k)
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (*self.image_size, 3), dtype=np.uint8),
                "state": spaces.Box(low, high, low.shape, dtype=np.float32),
                "task": task_space,
            }
        )

    def observation(self, observation: dict[str, Any]) -> dict[str, np.ndarray]:
        return {
            "image": resize_image(observation["image"], self._resize),
            "state": encode_state(observation),
            "task": self._task(observation["instruction"]),
        }

    def _task(self, instruction: str) -> np.ndarray | np.int64:
        task = encode_task(instruction, self.instructions, onehot=self._onehot)
        # encode_task gives the index as an int64 array of shape (); a Discrete observation is
        # the np.int64 scalar of the same value (what Gymnasium's checker and spaces expect)
        return task if self._onehot else np.int64(task)


class StackFrames(FrameStackObservation):
    """The last ``stack_size`` observations of a :class:`KosmosObservation` env, in one ``Dict``.

    A :class:`~gymnasium.wrappers.FrameStackObservation` (padding ``"reset"``: after a reset
    every slot holds the reset observation) whose output is laid out again. Gymnasium's gives
    each key a leading stack axis, which Stable-Baselines3 would not read as an image (a 4-D Box
    is flattened into an MLP input), so this one produces, oldest first:

    - ``image``: ``Box(0, 255, (h, w, 3 * n), uint8)``; channels ``3i, 3i+1, 3i+2`` are the RGB
      of frame ``t - (n - 1) + i``, so the newest frame is the last three channels
      (``np.concatenate(frames, axis=-1)``). A CNN reads it as one channels-last image.
    - ``state``: ``Box(tile(low, n), tile(high, n), (7 * n,), float32)``, the ``n`` state vectors
      concatenated, oldest first (``np.concatenate(states)``).
    - ``task``: unchanged from the inner env (the one-hot Box or the ``Discrete``), from the
      newest observation: the instruction only changes at a reset, so a stack holds one task.

    Attributes: :attr:`stack_size` (n).
    """

    def __init__(self, env: gymnasium.Env, stack_size: int):
        stack_size = _check_frame_stack(stack_size, "stack_size")
        inner = env.observation_space
        if not isinstance(inner, spaces.Dict) or set(inner.spaces) != {"image", "state", "task"}:
            raise ValueError(f"StackFrames needs the Dict(image, state, task) of KosmosObservation; got {inner}")
        # recorded first (the first record wins), so that env.spec remakes this wrapper with its
        # own arguments rather than FrameStackObservation's
        gymnasium.utils.RecordConstructorArgs.__init__(self, stack_size=stack_size)
        super().__init__(env, stack_size, padding_type="reset")
        image, state = inner.spaces["image"], inner.spaces["state"]
        h, w, c = image.shape
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (h, w, c * stack_size), dtype=np.uint8),
                "state": spaces.Box(
                    np.tile(state.low, stack_size),
                    np.tile(state.high, stack_size),
                    (state.shape[0] * stack_size,),
                    dtype=np.float32,
                ),
                "task": inner.spaces["task"],
            }
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return self._layout(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return self._layout(obs), reward, terminated, truncated, info

    @staticmethod
    def _layout(stacked: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        frames = stacked["image"]  # (n, h, w, 3), oldest first
        return {
            "image": np.ascontiguousarray(np.concatenate(list(frames), axis=-1)),
            "state": np.asarray(stacked["state"], np.float32).reshape(-1),
            "task": _newest_task(stacked["task"]),
        }


def wrap_rl_env(
    env: gymnasium.Env,
    *,
    task_encoding: str = "onehot",
    image_size: Sequence[int] | None = None,
    frame_stack: int = 1,
    rescale_actions: bool = True,
) -> gymnasium.Env:
    """Wrap a made Kosmos env for RL libraries (see :func:`make_rl_env` for the arguments).

    Use this instead of :func:`make_rl_env` when the env must be made differently, e.g. rendered
    at another spec ``image_size`` (a spec override: another spec hash) or with an injected world.
    """
    _check_task_encoding(task_encoding)
    _check_image_size(image_size)
    _check_frame_stack(frame_stack)
    if not isinstance(rescale_actions, bool):
        raise ValueError(f"rescale_actions must be True or False, got {rescale_actions!r}")
    env = KosmosObservation(env, task_encoding=task_encoding, image_size=image_size)
    if frame_stack > 1:
        env = StackFrames(env, frame_stack)
    if rescale_actions:
        if not isinstance(env.action_space, spaces.Box):
            raise ValueError(f"rescale_actions needs a Box action space; {_env_name(env)} has {env.action_space}")
        # PPO's Gaussian policy starts at unit scale; the env's bounds (±0.05 m, ±0.25 rad,
        # gripper [0, 1]) differ by 20x, so the policy sees [-1, 1] and the env its own units
        env = RescaleAction(env, np.float32(-1.0), np.float32(1.0))
    return env


def make_rl_env(
    env_id: str,
    *,
    task_encoding: str = "onehot",
    image_size: Sequence[int] | None = None,
    frame_stack: int = 1,
    rescale_actions: bool = True,
    **make_kwargs: Any,
) -> gymnasium.Env:
    """``gymnasium.make(env_id, **make_kwargs)`` wrapped for RL libraries.

    - ``task_encoding``: ``"onehot"`` (a float32 Box) or ``"index"`` (a ``Discrete``) for ``task``;
    - ``image_size``: (h, w) the wrapper resizes frames to (area averaging), or None for the
      env's own size. The env itself still renders at its spec size, so its spec hash is the one
      evaluations use and a checkpoint policy resizing raw frames sees the same pixels;
    - ``frame_stack``: n >= 1; n > 1 adds :class:`StackFrames` (image (h, w, 3n), state (7n,));
    - ``rescale_actions``: actions in [-1, 1] (Gymnasium's ``RescaleAction``), else the env's units;
    - ``make_kwargs``: passed to ``gymnasium.make`` (``task=``, ``judge=``, spec overrides such as
      ``horizon=10``).

    Returns the wrapped env: observations as documented in :class:`KosmosObservation` (and
    :class:`StackFrames`); ``env.get_wrapper_attr("instructions")`` is the task vocabulary.
    Bad arguments raise ``ValueError`` before the env is made.
    """
    _check_task_encoding(task_encoding)
    _check_image_size(image_size)
    _check_frame_stack(frame_stack)
    if not isinstance(rescale_actions, bool):
        raise ValueError(f"rescale_actions must be True or False, got {rescale_actions!r}")
    env = gymnasium.make(env_id, **make_kwargs)
    try:
        return wrap_rl_env(
            env,
            task_encoding=task_encoding,
            image_size=image_size,
            frame_stack=frame_stack,
            rescale_actions=rescale_actions,
        )
    except Exception:
        env.close()  # a refused env still holds its world (a simulator, loaded weights)
        raise


# -- argument checks (one line each, naming the argument and what is accepted) ----------------
def _check_task_encoding(task_encoding: Any) -> str:
    if task_encoding not in TASK_ENCODINGS:
        raise ValueError(f"task_encoding must be one of {list(TASK_ENCODINGS)}, got {task_encoding!r}")
    return str(task_encoding)


def _check_image_size(image_size: Any) -> tuple[int, int] | None:
    if image_size is None:
        return None
    try:
        size = tuple(image_size)
    except TypeError:
        raise ValueError(
            f"image_size must be None or (height, width) of two positive ints, got {image_size!r}"
        ) from None
    if len(size) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in size):
        raise ValueError(f"image_size must be None or (height, width) of two positive ints, got {image_size!r}")
    return int(size[0]), int(size[1])


def _check_frame_stack(frame_stack: Any, name: str = "frame_stack") -> int:
    if not isinstance(frame_stack, (int, np.integer)) or isinstance(frame_stack, bool) or frame_stack < 1:
        raise ValueError(f"{name} must be an int >= 1, got {frame_stack!r}")
    return int(frame_stack)


def _newest_task(stacked: np.ndarray) -> np.ndarray:
    """The newest entry of a stacked ``task``: a one-hot row (float32) or an index (``np.int64``)."""
    stacked = np.asarray(stacked)
    newest = stacked[-1]
    if np.issubdtype(stacked.dtype, np.integer):
        return np.int64(newest)
    return np.array(newest, dtype=np.float32)


def _env_name(env: gymnasium.Env) -> str:
    spec = getattr(env.unwrapped, "kosmos_spec", None)
    if spec is not None:
        return str(spec.id)
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__
