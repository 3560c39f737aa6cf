"""The renderer: draws each frame from the world's *state*, over the episode's first frame.

Why this shape: a renderer that predicts the next frame from its own last frame blurs a little
at every call, and the blur compounds (the previous version drew the gripper as a grey smear
after 20 steps, and a frame classifier trained on simulator frames then misread every last
frame). This renderer never reads its own output. Each frame is drawn afresh from:

- the episode's first frame (the true photograph the world was given; it holds the table,
  the target and the background) and where the robot and the object were in it;
- the robot's pose now and at the two previous steps, integrated from the actions
  (:mod:`.kinematics`; the previous poses let the network learn how far the simulated arm
  lags its command), given as keypoint heatmaps and, with the measured and commanded
  gripper, as a conditioning vector (FiLM at every resolution);
- the object's sprite (premultiplied RGB and alpha cut from the first frame by the learned
  segmenter, :mod:`.objects`) shifted to the object's current position.

The network predicts what differs from the first frame and composites the sprite on top:

    r = 1 − (1 − m) · (1 − A₀)
    y = (1 − r) · x[0] + r · c              (robot drawn at its pose, old robot/object erased)
    x[t] = (1 − a) · y + (1 − o) · P        (the object's sprite where it now is)

with a per-pixel mask ``m`` (initialised near 0: the untrained net copies the first frame),
always opened on the object's first-frame alpha ``A₀`` (where the object started is redrawn
by the content, so no faint copy of it stays behind when it moves), content ``c``, the shifted
sprite ``P`` with alpha ``A``, ``a = A · (1 − o)`` and a learned occlusion ``o`` (the fingers
in front of the object, the basket's wall). The sprite's alpha is the segmenter's object
probability cleaned by a fixed rule (:func:`.objects.sprite_alpha`: one connected region, no
halo over the table or the target). What is learned: the
segmenter, the object dynamics and this network's weights, all fitted to simulator frames and
states. What is fixed geometry: the published camera calibration (sprite shifts, heatmaps),
the integration of commanded pose, and the table/target resting rules of :mod:`.engine`;
fixed rules (not learned): the sprite-alpha cleaning and the redraw of the first-frame footprint.
Because nothing is fed back, a frame at step 40 is as sharp as one at step 1; a wrong state
(the dynamics' error) shows as a wrong picture, not a blurred one.

The weights file holds three networks: ``renderer.*`` (this one), ``segmenter.*`` and
``dynamics.*`` (:mod:`.objects`), and may hold a fourth, the slip predictor ``slip.*``
(:mod:`.slip`: a learned per-step hazard that a held object leaves fingers still commanded
closed, with a fixed rule for what then happens); a file without it runs without slips.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

COND_DIM = 17
MAX_ACTIONS_PER_CALL = 4
#: first frame RGB, object alpha in the first frame, heatmaps (first pose, now, 1 and 2 steps
#: ago), sprite at the current position (P, A)
IN_CHANNELS = 12
FORMAT = "kosmos-tabletop-learned-v4"
DEFAULT_CONFIG = {
    "channels": [12, 24, 32, 48],
    "cond_dim": COND_DIM,
    "hidden": 128,
    "image_size": [64, 64],
    "segmenter_width": 16,
    "dynamics_hidden": 128,
}


def condition_vector(
    pos: np.ndarray,
    euler: np.ndarray,
    pos_1: np.ndarray,
    pos_2: np.ndarray,
    gripper: np.ndarray,
    command: np.ndarray,
    home: np.ndarray,
) -> np.ndarray:
    """(…, 17) float32: position relative to home (3), sin/cos of the Euler angles (6), measured
    gripper (1), commanded gripper (1), the last two position steps (pos − pos 1 step ago,
    pos 1 step ago − pos 2 steps ago; 6): the arm lags its command by about that much."""
    pos, pos_1, pos_2 = (np.asarray(a, dtype=np.float32) for a in (pos, pos_1, pos_2))
    euler = np.asarray(euler, dtype=np.float32)
    return np.concatenate(
        [
            (pos - home) * 5.0,
            np.sin(euler),
            np.cos(euler),
            np.asarray(gripper, np.float32)[..., None],
            np.asarray(command, np.float32)[..., None],
            (pos - pos_1) * 20.0,
            (pos_1 - pos_2) * 20.0,
        ],
        axis=-1,
    ).astype(np.float32)


class _FiLMBlock(nn.Module):
    def __init__(self, cin: int, cout: int, hidden: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.film = nn.Linear(hidden, 2 * cout)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        x = F.silu(self.conv1(x))
        gamma, beta = self.film(h)[..., None, None].chunk(2, dim=1)
        x = x * (1 + gamma) + beta
        return F.silu(self.conv2(x))


class StateRenderer(nn.Module):
    """State-conditioned, sprite-compositing U-Net. ``forward`` returns (frame, change mask, content)."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        self.config = dict(DEFAULT_CONFIG, **dict(config or {}))
        ch, hidden = list(self.config["channels"]), int(self.config["hidden"])
        self.cond = nn.Sequential(
            nn.Linear(int(self.config["cond_dim"]), hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU()
        )
        self.enc = nn.ModuleList()
        cin = IN_CHANNELS
        for c in ch:
            self.enc.append(_FiLMBlock(cin, c, hidden))
            cin = c
        self.dec = nn.ModuleList()
        for i in range(len(ch) - 2, -1, -1):
            self.dec.append(_FiLMBlock(ch[i + 1] + ch[i], ch[i], hidden))
        self.out = nn.Conv2d(ch[0], 5, 3, padding=1)
        with torch.no_grad():
            self.out.weight.mul_(0.1)
            self.out.bias.zero_()
            self.out.bias[0] = -4.0  # mask starts near 0: the untrained net copies the first frame
            self.out.bias[4] = -3.0  # occlusion starts near 0: the sprite is drawn on top

    def forward(
        self,
        first: torch.Tensor,
        alpha_first: torch.Tensor,
        heat: torch.Tensor,
        sprite: torch.Tensor,
        cond: torch.Tensor,
    ):
        """``first`` (B, 3, H, W) the episode's first frame; ``alpha_first`` (B, H, W) the
        object's alpha in it; ``heat`` (B, 4, H, W) keypoint heatmaps at the first pose, now,
        1 and 2 steps ago; ``sprite`` (B, 4, H, W) premultiplied RGB and alpha at the object's
        current position; ``cond`` (B, 17) from :func:`condition_vector`."""
        h = self.cond(cond)
        x = torch.cat([first, alpha_first[:, None], heat, sprite], dim=1)
        skips = []
        for i, block in enumerate(self.enc):
            if i:
                x = F.avg_pool2d(x, 2)
            x = block(x, h)
            skips.append(x)
        for j, block in enumerate(self.dec):
            skip = skips[-2 - j]
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = block(torch.cat([x, skip], dim=1), h)
        out = self.out(x)
        mask = torch.sigmoid(out[:, :1])
        content = torch.sigmoid(out[:, 1:4])
        visible = 1 - torch.sigmoid(out[:, 4:5])
        # the object's first-frame footprint is always redrawn (by the content, which learns the
        # empty table there; the sprite covers it again while the object has not moved): a
        # learned mask left partly closed there drew a faint copy of the object where it started
        redraw = 1 - (1 - mask) * (1 - alpha_first[:, None])
        frame = (1 - redraw) * first + redraw * content
        frame = (1 - sprite[:, 3:4] * visible) * frame + visible * sprite[:, :3]
        return frame, mask, content


class LearnedTabletop(nn.Module):
    """The three networks of the learned tabletop, saved and loaded together (one sha256)."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        from kosmos_env.worlds.tabletop_learned.objects import ObjectDynamics, Segmenter

        self.config = dict(DEFAULT_CONFIG, **dict(config or {}))
        self.renderer = StateRenderer(self.config)
        self.segmenter = Segmenter(int(self.config["segmenter_width"]))
        self.dynamics = ObjectDynamics(int(self.config["dynamics_hidden"]))
        #: optional slip predictor (:mod:`.slip`): attached by training or by a file holding ``slip.*``
        #: tensors; it is built outside ``__init__`` so that its random initialisation never shifts
        #: the other networks'
        self.slip = None

    def attach_slip(self, hidden: int, threshold: float | None = None) -> None:
        from kosmos_env.worlds.tabletop_learned.slip import DEFAULT_THRESHOLD, SlipPredictor

        self.slip = SlipPredictor(hidden, DEFAULT_THRESHOLD if threshold is None else threshold)


def _checked_config(path, raw: Any, stored: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """The weights file's model config, once the networks it makes are known to fit ``stored`` (the
    file's tensor shapes) and :data:`MAX_PARAMETERS`; else one ValueError line naming the file."""
    try:
        config = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        config = None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: its 'config' metadata is not a JSON object; retrain with `kosmos-env train-world`")
    if not isinstance(config.get("channels", []), list) or len(config.get("channels", [])) > MAX_LAYERS:
        raise ValueError(f"{path}: config 'channels' must be a list of at most {MAX_LAYERS} sizes")
    slip = stored.get("slip.net.0.weight")
    try:
        with torch.device("meta"):  # shapes only: nothing is allocated, whatever the config asks for
            probe = LearnedTabletop(config)
            if slip is not None:
                probe.attach_slip(int(slip[0]))
        want = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
    except (TypeError, ValueError, KeyError, RuntimeError, OverflowError) as exc:
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: its model config cannot be built ({line})") from None
    n = sum(int(np.prod(s, dtype=np.int64)) for s in want.values())
    if n > MAX_PARAMETERS:
        raise ValueError(f"{path}: its model config makes {n:,} parameters, more than the {MAX_PARAMETERS:,} allowed")
    if want != dict(stored):
        diff = sorted(set(want) ^ set(stored)) or sorted(k for k in want if want[k] != stored[k])
        raise ValueError(f"{path}: its tensors do not fit its model config (first difference: {diff[0]})")
    return config


def save_weights(model: LearnedTabletop, path, extra_meta: Mapping[str, Any] | None = None) -> None:
    """Write the weights as safetensors; the model config and provenance go in its metadata."""
    from safetensors.torch import save_file

    meta = {"config": json.dumps(model.config, sort_keys=True), "format": FORMAT}
    meta.update({k: json.dumps(v, sort_keys=True) for k, v in dict(extra_meta or {}).items()})
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata=meta)


#: parameters a weights file's networks may hold (64 M, 256 MB of float32; the shipped file holds about
#: 0.2 M), and layers its ``channels`` may list: checked before anything is allocated
MAX_PARAMETERS = 64_000_000
MAX_LAYERS = 16


def load_weights(path) -> tuple[LearnedTabletop, dict[str, Any]]:
    """Build the networks from a safetensors file written by :func:`save_weights`.

    The networks its config asks for are first built on torch's ``meta`` device (no memory), and
    refused (one ValueError line) when they hold more than :data:`MAX_PARAMETERS` parameters or
    their tensor shapes are not exactly the file's (read from its header): a config asking for a
    huge layer beside small tensors never allocates it."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
        stored = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a Kosmos learned-tabletop weights file of format {FORMAT} "
            f"(metadata format {meta.get('format')!r}); retrain with `kosmos-env train-world`"
        )
    config = _checked_config(path, meta.get("config"), stored)
    model = LearnedTabletop(config)
    if "slip.net.0.weight" in stored:
        model.attach_slip(int(stored["slip.net.0.weight"][0]))
    state = load_file(str(path))
    model.load_state_dict(state)
    model.eval()
    info = {k: json.loads(v) for k, v in meta.items() if k not in ("format",)}
    return model, info
