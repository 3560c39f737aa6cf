"""A Stable-Baselines3 model as a policy: ``sb3:path=MODEL.zip``.

The zip is what ``model.save("MODEL.zip")`` writes for a model trained through
:mod:`kosmos_env.wrappers` (``make_rl_env`` / ``wrap_rl_env``). The adapter rebuilds the wrapper's
observation from a raw Kosmos observation, asks the model's policy for an action in the
wrapper's action space and maps it back to the env's bounds:

- image: resized to the model's image size, the last ``k`` frames stacked along channels, oldest
  first, the first frame repeated at an episode's start (:class:`~kosmos_env.wrappers.StackFrames`);
  ``k`` = the model's image channels / 3;
- state: ``[ee_pos, ee_euler, gripper]`` of the same ``k`` steps, concatenated;
- task: the instruction's position in the env's suite, in suite order (what ``wrap_rl_env``
  builds its ``instructions`` from), as a one-hot or a ``Discrete`` index as the model's
  observation space says. The suite and the action bounds come from the env spec named by
  ``env=`` (default ``Kosmos-Tabletop-v1``; give the id the model was trained in when the suite
  or bounds differ);
- action: the policy's ``predict`` (``deterministic=True`` by default), then Gymnasium's
  ``RescaleAction`` transform from the model's action space (``[-1, 1]`` under the wrapper) to
  the env's bounds.

What loading reads. An SB3 zip holds JSON (``data``), tensors (``policy.pth`` and optimizer
states) and, inside ``data``, cloudpickled Python objects. ``PPO.load`` unpickles them all, and
unpickling can run any code the file names. This adapter does not call ``PPO.load``: it reads
``data`` as JSON, loads only ``policy.pth`` (``torch.load(weights_only=True)``), and decodes only
the four pickled entries inference needs (``observation_space``, ``action_space``,
``policy_class`` and, when pickled, ``policy_kwargs``) with an unpickler that accepts a fixed list
of classes: Gymnasium spaces, the numpy internals that rebuild arrays and generators, SB3 / sb3-contrib
policy and feature-extractor classes, torch activations and optimizers. Anything else in those
entries (a class or function pickled by value from a training script) is refused in one line;
the other pickled entries (schedules, buffers, the last observation) are never decoded. With
``unpickle=true`` the four entries are unpickled as SB3 does (any code), which only the person
running the command can allow: ``kosmos-env --trust-remote-code`` (or
``KOSMOS_ENV_TRUST_REMOTE_CODE=1``), never a setting, protocol or registration.

The content hash covers the zip's bytes (not its path), the algorithm, the instruction list, the
action bounds, ``deterministic`` and, when sampling, ``seed``; computing it from the file
(:meth:`SB3Policy.content_hash_from_files`) decodes nothing.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import inspect
import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kosmos_env.hashing import sha256_file
from kosmos_env.policies.base import Policy, policy_hash
from kosmos_env.policies.checkpoint import FrameStacker, encode_observation, is_sb3_archive
from kosmos_env.utils.obs_encoding import encode_task

DEFAULT_ENV = "Kosmos-Tabletop-v1"
#: algorithms ``algo=`` may name (Stable-Baselines3's); sb3-contrib's are accepted when it is installed
SB3_ALGOS = ("PPO", "A2C", "SAC", "TD3", "DDPG", "DQN")
CONTRIB_ALGOS = ("ARS", "CrossQ", "MaskablePPO", "QRDQN", "RecurrentPPO", "TQC", "TRPO")
#: the pickled entries of ``data`` that inference needs; every other pickled entry is skipped
NEEDED = ("observation_space", "action_space", "policy_class", "policy_kwargs")
#: policy-class module -> algorithm, where the module alone tells
_MODULE_ALGOS = {
    "stable_baselines3.sac.policies": "SAC",
    "stable_baselines3.dqn.policies": "DQN",
    "sb3_contrib.ars.policies": "ARS",
    "sb3_contrib.crossq.policies": "CrossQ",
    "sb3_contrib.qrdqn.policies": "QRDQN",
    "sb3_contrib.tqc.policies": "TQC",
    "sb3_contrib.common.maskable.policies": "MaskablePPO",
    "sb3_contrib.common.recurrent.policies": "RecurrentPPO",
}
_TRUST_HINT = (
    "settings and files cannot turn that on: rerun with `kosmos-env --trust-remote-code ...` "
    "(or KOSMOS_ENV_TRUST_REMOTE_CODE=1) if you trust the file"
)
_WHAT = (
    "a zip written by Stable-Baselines3's model.save() for a model trained through "
    "kosmos_env.wrappers; its pickled entries are decoded against a class allow-list, not run "
    "(unpickle=true runs them: only for files you trust)"
)


# -- reading the zip (no unpickling) ---------------------------------------------------------


def read_sb3_data(path: str | Path) -> dict[str, Any]:
    """The ``data`` JSON of an SB3 zip, pickled entries left encoded; problems are one ValueError line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"policy sb3: no such file {str(path)!r} (expected {_WHAT})")
    if not is_sb3_archive(path):
        raise ValueError(f"policy sb3: {str(path)!r} is not a Stable-Baselines3 model zip (expected {_WHAT})")
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data").decode("utf-8"))
    except (zipfile.BadZipFile, UnicodeDecodeError, json.JSONDecodeError, KeyError) as exc:
        raise ValueError(f"policy sb3: {str(path)!r} has a corrupt 'data' entry ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ValueError(f"policy sb3: {str(path)!r} has a 'data' entry that is not a JSON object")
    return data


def _pickled(entry: Any) -> bool:
    return isinstance(entry, dict) and ":serialized:" in entry


def infer_algo(data: Mapping[str, Any], path: str | Path = "") -> str:
    """The algorithm that saved ``data``, from the readable module of its policy class (and, where
    PPO / A2C / TRPO or TD3 / DDPG share one, from their settings); ValueError asking for ``algo=``."""
    entry = data.get("policy_class")
    module = entry.get("__module__") if isinstance(entry, dict) else None
    if module in _MODULE_ALGOS:
        return _MODULE_ALGOS[module]
    if module == "stable_baselines3.common.policies":  # PPO, A2C and TRPO share the actor-critic policies
        if "cg_max_steps" in data:
            return "TRPO"
        return "PPO" if "clip_range" in data else "A2C"
    if module == "stable_baselines3.td3.policies":  # DDPG is TD3 without its tricks
        ddpg = data.get("policy_delay") == 1 and data.get("target_noise_clip") == 0.0
        return "DDPG" if ddpg else "TD3"
    raise ValueError(
        f"policy sb3: cannot tell which algorithm saved {str(path)!r} (policy class module {module!r}); "
        f"name it with algo=, one of {', '.join(SB3_ALGOS + CONTRIB_ALGOS)}"
    )


def _check_algo_name(algo: str) -> str:
    if algo not in SB3_ALGOS + CONTRIB_ALGOS:
        raise ValueError(f"policy sb3: unknown algo {algo!r}; known: {', '.join(SB3_ALGOS + CONTRIB_ALGOS)}")
    return algo


def _env_settings(env: str) -> tuple[list[str], np.ndarray, np.ndarray, int]:
    """(instructions in suite order, action low, action high, action chunk) of env spec ``env``."""
    from kosmos_env.spec import load_spec
    from kosmos_env.tasks import load_suite

    spec = load_spec(env)
    suite = load_suite(spec.tasks["suite"])
    instructions = [task.instruction for task in suite.tasks.values()]
    return instructions, spec.action_low_array, spec.action_high_array, int(spec.action_chunk)


# -- the allow-list unpickler -----------------------------------------------------------------

_NUMPY_GLOBALS = {
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random._pcg64", "PCG64"),
    ("numpy.random._pcg64", "PCG64DXSM"),
    ("numpy.random._mt19937", "MT19937"),
    ("numpy.random._philox", "Philox"),
    ("numpy.random._sfc64", "SFC64"),
    ("numpy.random.bit_generator", "SeedSequence"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("collections", "OrderedDict"),
}
_SPACES = {
    ("gymnasium.spaces.dict", "Dict"),
    ("gymnasium.spaces.box", "Box"),
    ("gymnasium.spaces.discrete", "Discrete"),
    ("gymnasium.spaces.multi_discrete", "MultiDiscrete"),
    ("gymnasium.spaces.multi_binary", "MultiBinary"),
}


class _AllowListUnpickler(pickle._Unpickler):  # the Python unpickler: its opcode table can be amended
    """Resolves only listed globals: numpy's array and generator rebuilders, Gymnasium spaces, and
    classes (never functions) that subclass SB3's ``BasePolicy`` or ``BaseFeaturesExtractor``
    (modules of stable_baselines3 / sb3_contrib), ``torch.nn.Module`` (modules of ``torch.nn``)
    or ``torch.optim.Optimizer`` (modules of ``torch.optim``). A module outside those packages is
    refused before it is imported, and so is state written onto a class (``BUILD`` on a class
    would set attributes of a library class for the whole process)."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY_GLOBALS or (module, name) in _SPACES:
            return super().find_class(module, name)
        bases = _allowed_bases(module)
        if bases:
            obj = super().find_class(module, name)
            if inspect.isclass(obj) and issubclass(obj, bases):
                return obj
        raise pickle.UnpicklingError(f"names {module}.{name}")

    def _load_build(self) -> None:
        target = self.stack[-2] if len(self.stack) > 1 else None
        if inspect.isclass(target):
            raise pickle.UnpicklingError(f"sets attributes of the class {target.__module__}.{target.__qualname__}")
        pickle._Unpickler.load_build(self)

    dispatch[pickle.BUILD[0]] = _load_build


def _allowed_bases(module: str) -> tuple[type, ...]:
    top = module.split(".")[0]
    if top in ("stable_baselines3", "sb3_contrib"):
        from stable_baselines3.common.policies import BasePolicy
        from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

        return (BasePolicy, BaseFeaturesExtractor)
    if module == "torch.nn" or module.startswith("torch.nn.modules."):
        import torch

        return (torch.nn.Module,)
    if module == "torch.optim" or module.startswith("torch.optim."):
        import torch

        return (torch.optim.Optimizer,)
    return ()


def decode_entries(data: Mapping[str, Any], path: str | Path, unpickle: bool = False) -> dict[str, Any]:
    """The :data:`NEEDED` entries of ``data``: plain JSON as is, pickled ones decoded with the
    allow-list unpickler (``unpickle=True``: with cloudpickle, as SB3 does; the caller checked
    the permission). Nothing else in ``data`` is decoded."""
    out: dict[str, Any] = {}
    for key in NEEDED:
        if key not in data:
            if key == "policy_kwargs":
                out[key] = {}
                continue
            raise ValueError(f"policy sb3: {str(path)!r} has no {key!r} in its data (not an SB3 model zip?)")
        entry = data[key]
        if not _pickled(entry):
            out[key] = entry
            continue
        try:
            raw = base64.b64decode(entry[":serialized:"].encode())
        except (AttributeError, ValueError):
            raise ValueError(f"policy sb3: {str(path)!r}: its {key!r} entry is not base64") from None
        if unpickle:
            import cloudpickle

            try:
                out[key] = cloudpickle.loads(raw)
            except Exception as exc:  # noqa: BLE001 - whatever the file's pickle raised: one line
                line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise ValueError(
                    f"policy sb3: {str(path)!r}: unpickling its {key!r} failed ({type(exc).__name__}: {line})"
                ) from None
            continue
        try:
            out[key] = _AllowListUnpickler(io.BytesIO(raw)).load()
        except pickle.UnpicklingError as exc:
            raise ValueError(
                f"policy sb3: {str(path)!r}: its {key!r} entry {exc}, which this adapter does not decode "
                f"(it rebuilds only Gymnasium spaces, SB3/sb3-contrib policy and feature-extractor "
                f"classes, torch activations and optimizers); unpickle=true loads it as SB3 does, which "
                f"runs whatever code the file holds; {_TRUST_HINT}"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a truncated or malformed pickle: one line
            raise ValueError(
                f"policy sb3: {str(path)!r}: its {key!r} entry cannot be decoded ({type(exc).__name__})"
            ) from None
    return out


def _check_unpickle(unpickle: bool, path: str | Path) -> bool:
    """``unpickle`` may be asked for by any setting, but only the person running the command can
    allow it (``kosmos-env --trust-remote-code``); returns it or raises one ValueError line."""
    from kosmos_env.plugins import remote_code_allowed

    if unpickle and not remote_code_allowed():
        raise ValueError(
            f"policy sb3 asks for unpickle=true: loading {str(path)!r} then runs whatever Python code is "
            f"pickled in it (load only files you trust); {_TRUST_HINT}"
        )
    return bool(unpickle)


def _require_sb3() -> Any:
    try:
        import stable_baselines3
    except ModuleNotFoundError as exc:
        from kosmos_env.errors import missing_module_message

        message = missing_module_message(exc) or f"{exc.name} is not installed"
        raise ModuleNotFoundError(f"the sb3 policy loads Stable-Baselines3 models: {message}", name=exc.name) from None
    return stable_baselines3


def algo_class(algo: str) -> type:
    """The algorithm class ``algo`` names (an allow-listed name: nothing else is imported)."""
    _check_algo_name(algo)
    if algo in SB3_ALGOS:
        return getattr(_require_sb3(), algo)
    try:
        contrib = importlib.import_module("sb3_contrib")
    except ModuleNotFoundError:
        raise ValueError(
            f"policy sb3: algo {algo!r} comes from sb3-contrib, which is not installed (pip install sb3-contrib)"
        ) from None
    if not hasattr(contrib, algo):
        raise ValueError(f"policy sb3: the installed sb3-contrib has no {algo!r}")
    return getattr(contrib, algo)


def _widths_without_tensors(kwargs: Mapping[str, Any], state: Mapping[str, Any]) -> list[Any]:
    """The layer widths ``policy_kwargs`` asks for (``net_arch``, ``features_extractor_kwargs.features_dim``)
    that are not a dimension of any stored tensor. A width the weights really have is backed by the
    file's own bytes; one they lack (a JSON asking for a 6e6-wide layer beside small tensors) would
    make SB3 allocate that layer before ``load_state_dict`` found the mismatch."""
    widths: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif value is not None:
            widths.append(value)

    walk(kwargs.get("net_arch"))
    extractor = kwargs.get("features_extractor_kwargs")
    if isinstance(extractor, Mapping) and "features_dim" in extractor:
        widths.append(extractor["features_dim"])
    dims = {int(d) for t in state.values() if hasattr(t, "shape") for d in t.shape}
    return [w for w in widths if isinstance(w, bool) or not isinstance(w, int) or w not in dims]


# -- the policy -------------------------------------------------------------------------------


class SB3Policy(Policy):
    """A Stable-Baselines3 model zip as a policy (see the module docstring for what it reads).

    ``path``: the zip (required). ``algo``: the algorithm (default: read from the zip; one of
    :data:`SB3_ALGOS`, or :data:`CONTRIB_ALGOS` with sb3-contrib installed). ``deterministic``:
    the policy's mode (default) or a sample, drawn from a generator seeded by ``seed`` (and by
    ``reset(..., seed=)``). ``device``: torch device. ``env``: the env id whose task suite and
    action bounds the model was trained with. ``unpickle``: load the pickled entries as SB3
    does (needs ``kosmos-env --trust-remote-code``).
    """

    name = "sb3"
    action_convention = (
        "kosmos_env.wrappers actions in the model's action space ([-1, 1] under RescaleAction), "
        "mapped to the env's bounds as RescaleAction does"
    )

    def __init__(
        self,
        path: str = "",
        algo: str | None = None,
        deterministic: bool = True,
        device: str = "cpu",
        env: str = DEFAULT_ENV,
        seed: int | None = None,
        unpickle: bool = False,
    ):
        if not path:
            raise ValueError(f"the sb3 policy needs path=MODEL.zip ({_WHAT})")
        self.path = Path(path)
        self.unpickle = _check_unpickle(unpickle, self.path)
        data = read_sb3_data(self.path)
        self.sha256 = sha256_file(self.path)
        self.algo = _check_algo_name(str(algo)) if algo else infer_algo(data, self.path)
        self.deterministic = bool(deterministic)
        self.seed = seed
        self.env_id = str(env)
        self.instructions, low, high, chunk = _env_settings(self.env_id)
        self.device = str(device)

        sb3 = _require_sb3()
        cls = algo_class(self.algo)
        entries = decode_entries(data, self.path, unpickle=self.unpickle)
        self._setup_spaces(entries["observation_space"], entries["action_space"], low, high, chunk)
        self.policy = self._build_policy(cls, data, entries)
        self.sb3_version = sb3.__version__
        self._stack = FrameStacker(self.frame_stack)
        self._task: np.ndarray | np.int64 | None = None
        self._state: Any = None
        self._start = True
        self._rng = np.random.default_rng(seed if seed is not None else 0)

    # -- loading

    def _build_policy(self, cls: type, data: Mapping[str, Any], entries: Mapping[str, Any]):
        import torch
        from stable_baselines3.common.policies import BasePolicy
        from stable_baselines3.common.utils import get_device

        where = str(self.path)
        policy_class = entries["policy_class"]
        if not (inspect.isclass(policy_class) and issubclass(policy_class, BasePolicy)):
            raise ValueError(f"policy sb3: {where!r}: its policy_class is not an SB3 policy class")
        known = tuple(c for c in getattr(cls, "policy_aliases", {}).values() if inspect.isclass(c))
        if known and not issubclass(policy_class, known):
            raise ValueError(
                f"policy sb3: {where!r} holds a {policy_class.__module__}.{policy_class.__qualname__}, "
                f"not a {self.algo} policy; name the algorithm that saved it with algo="
            )
        kwargs = entries["policy_kwargs"]
        if not isinstance(kwargs, dict):
            raise ValueError(f"policy sb3: {where!r}: its policy_kwargs is not a mapping")
        kwargs = dict(kwargs)
        # as BaseAlgorithm.load does: files of old SB3 versions
        kwargs.pop("device", None)
        net_arch = kwargs.get("net_arch")
        if isinstance(net_arch, list) and net_arch and isinstance(net_arch[0], dict):
            kwargs["net_arch"] = net_arch[0]
        # on-policy algorithms hand use_sde to the policy outside policy_kwargs
        params = inspect.signature(policy_class.__init__).parameters
        if "use_sde" in data and "use_sde" in params and "use_sde" not in kwargs:
            kwargs["use_sde"] = bool(data["use_sde"])
        self.use_sde = bool(kwargs.get("use_sde", False))
        device = self._torch_device = get_device(self.device)
        try:
            with zipfile.ZipFile(self.path) as archive, archive.open("policy.pth") as fh:
                state = torch.load(fh, map_location=device, weights_only=True)
        except KeyError:
            raise ValueError(f"policy sb3: {where!r} has no policy.pth (the policy's weights)") from None
        except Exception as exc:  # noqa: BLE001 - torch's weights-only loader refuses anything but tensors
            raise ValueError(f"policy sb3: {where!r}: policy.pth cannot be read ({type(exc).__name__})") from None
        unbacked = _widths_without_tensors(kwargs, state)
        if unbacked:  # checked before the policy is built: its layers would be allocated at these widths
            raise ValueError(
                f"policy sb3: {where!r}: its policy_kwargs ask for layer width(s) {unbacked[:5]} that no tensor "
                "in its policy.pth has (its weights do not fit its policy settings)"
            )
        try:
            policy = policy_class(entries["observation_space"], entries["action_space"], lambda _: 0.0, **kwargs)
            policy.load_state_dict(state, strict=True)
        except (TypeError, ValueError, RuntimeError, KeyError, AssertionError) as exc:
            line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"policy sb3: {where!r}: its weights do not fit its policy settings ({line})") from None
        policy = policy.to(device)
        policy.set_training_mode(False)
        return policy

    def _setup_spaces(self, obs_space: Any, act_space: Any, low: np.ndarray, high: np.ndarray, chunk: int) -> None:
        from gymnasium import spaces
        from gymnasium.wrappers.utils import rescale_box
        from stable_baselines3.common.preprocessing import is_image_space_channels_first

        where = str(self.path)
        if not isinstance(obs_space, spaces.Dict) or set(obs_space.spaces) != {"image", "state", "task"}:
            raise ValueError(
                f"policy sb3: {where!r} was not trained on kosmos_env.wrappers observations (a Dict of "
                f"image, state, task); its observation space is {obs_space}"
            )
        image, state, task = (obs_space.spaces[k] for k in ("image", "state", "task"))
        if not (isinstance(image, spaces.Box) and image.dtype == np.uint8 and len(image.shape) == 3):
            raise ValueError(f"policy sb3: {where!r}: its image space {image} is not a uint8 image")
        if is_image_space_channels_first(image):  # SB3 stores the channel-first view it trained on
            channels, h, w = image.shape
        else:
            h, w, channels = image.shape
        if channels % 3:
            raise ValueError(f"policy sb3: {where!r}: its image has {channels} channels, not 3 per frame")
        self.frame_stack = channels // 3
        self.image_size = (int(h), int(w))
        if not (isinstance(state, spaces.Box) and state.shape == (7 * self.frame_stack,)):
            raise ValueError(
                f"policy sb3: {where!r}: its state space {state} is not 7 numbers per frame ({self.frame_stack} frames)"
            )
        if isinstance(task, spaces.Discrete):
            self.task_encoding, n_tasks = "index", int(task.n)
        elif isinstance(task, spaces.Box) and len(task.shape) == 1:
            self.task_encoding, n_tasks = "onehot", int(task.shape[0])
        else:
            raise ValueError(f"policy sb3: {where!r}: its task space {task} is neither a one-hot Box nor a Discrete")
        if n_tasks != len(self.instructions):
            raise ValueError(
                f"policy sb3: {where!r} knows {n_tasks} tasks; {self.env_id}'s suite has {len(self.instructions)} "
                f"({self.instructions}): pass env= the env id it was trained in"
            )
        shape = (7,) if chunk == 1 else (chunk, 7)
        if not (isinstance(act_space, spaces.Box) and act_space.shape == shape):
            raise ValueError(
                f"policy sb3: {where!r}: its action space {act_space} is not a Box of shape {shape} "
                f"({self.env_id}'s actions)"
            )
        self.low = np.broadcast_to(low, shape).astype(np.float32)
        self.high = np.broadcast_to(high, shape).astype(np.float32)
        env_box = spaces.Box(self.low, self.high, shape, dtype=np.float32)
        model_low = np.asarray(act_space.low, np.float32)
        model_high = np.asarray(act_space.high, np.float32)
        # RescaleAction(env, min, max) hands the env backward(action): the same function here
        _, _, self._to_env = rescale_box(env_box, model_low, model_high)

    # -- identity

    def config(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "zip_sha256": self.sha256,
            "algo": self.algo,
            "deterministic": self.deterministic,
            "seed": None if self.deterministic else self.seed,
            "env": self.env_id,
            "device": self.device,
            "image_size": list(self.image_size),
            "frame_stack": self.frame_stack,
            "task_encoding": self.task_encoding,
            "stable_baselines3": self.sb3_version,
        }

    def content_hash(self) -> str:
        return self._hash(self.sha256, self.algo, self.deterministic, self.seed, self.instructions, self.low, self.high)

    @classmethod
    def _hash(cls, sha256, algo, deterministic, seed, instructions, low, high) -> str:
        # what decides the actions: the zip's bytes, how they are read and mapped; not where the file lies
        payload = {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "zip_sha256": sha256,
            "algo": algo,
            "deterministic": bool(deterministic),
            "seed": None if deterministic else seed,
            "instructions": list(instructions),
            "action_low": np.asarray(low, np.float32).reshape(-1, 7)[0].tolist(),
            "action_high": np.asarray(high, np.float32).reshape(-1, 7)[0].tolist(),
        }
        return policy_hash(payload)

    @classmethod
    def content_hash_from_files(
        cls,
        path: str = "",
        algo: str | None = None,
        deterministic: bool = True,
        device: str = "cpu",
        env: str = DEFAULT_ENV,
        seed: int | None = None,
        unpickle: bool = False,
    ) -> str | None:
        """The built policy's ``content_hash()`` from the zip's bytes and its ``data`` JSON (nothing decoded)."""
        if not path:
            raise ValueError(f"the sb3 policy needs path=MODEL.zip ({_WHAT})")
        _check_unpickle(unpickle, path)  # refused when registering too, as when built
        data = read_sb3_data(path)
        name = _check_algo_name(str(algo)) if algo else infer_algo(data, path)
        instructions, low, high, _ = _env_settings(str(env))
        return cls._hash(sha256_file(Path(path)), name, deterministic, seed, instructions, low, high)

    # -- acting

    def reset(self, instruction: str, seed: int | None = None) -> None:
        self._task = self._encode_task(instruction)  # ValueError naming the known instructions
        self._stack.clear()
        self._state = None
        self._start = True
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if self.use_sde and not self.deterministic:
            with self._seeded():
                self.policy.reset_noise()

    def _encode_task(self, instruction: str) -> np.ndarray | np.int64:
        """As ``KosmosObservation`` encodes it: a float32 one-hot, or the index as an ``np.int64``."""
        onehot = self.task_encoding == "onehot"
        task = encode_task(instruction, self.instructions, onehot=onehot)
        return task if onehot else np.int64(task)

    def observation(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The wrapper's observation for raw ``obs`` (pushes it onto this episode's frame stack)."""
        enc = encode_observation(obs, self.instructions, self.image_size)
        task = self._encode_task(obs["instruction"]) if "instruction" in obs else self._task
        image, state = self._stack.push(enc["image"], enc["state"])
        return {"image": image, "state": state, "task": task}

    def act(self, obs: Mapping[str, Any]) -> np.ndarray:
        if self._task is None:
            raise RuntimeError("call reset(instruction) before act()")
        wrapped = self.observation(obs)
        start = np.array([self._start])
        if self.deterministic:
            action, self._state = self.policy.predict(wrapped, self._state, start, deterministic=True)
        else:
            with self._seeded():
                action, self._state = self.policy.predict(wrapped, self._state, start, deterministic=False)
        self._start = False
        out = self._to_env(np.asarray(action, np.float32))
        return np.clip(out, self.low, self.high).astype(np.float32)

    @contextlib.contextmanager
    def _seeded(self):
        """torch's RNG seeded from this instance's generator for one call, then restored."""
        import torch

        cuda = [self._torch_device.index or 0] if self._torch_device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(int(self._rng.integers(2**63 - 1)))
            yield

    def close(self) -> None:
        self.policy = None
