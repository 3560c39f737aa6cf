"""The renderer: an action-conditioned masked-residual U-Net that composites the object's sprite.

Why this shape: a plain convolutional next-frame predictor trained for minutes on CPU does not
beat "copy the last frame", because almost every pixel stays the same and a blurry re-drawing
of the whole scene costs more than it gains. So the network predicts only *what changes*:

    y = (1 − m) · x[t] + m · c              (robot moved, old object pixels erased)
    x[t+s] = (1 − a) · y + (1 − o) · P      (the object's sprite composited where it now is)

with a per-pixel mask ``m`` (initialised near 0, i.e. starting as the copy baseline), new content
``c``, the object's sprite ``P`` (premultiplied RGB cut from the first frame, shifted to the
object's predicted position; alpha ``A``), ``a = A · (1 − o)`` and a learned occlusion ``o``
(the fingers in front of the object, the basket's wall). The object is drawn from its sprite
every step, so a grasped object moves with the gripper and stays visible, and a placed one
stays placed, however long the rollout (the object state comes from :mod:`.objects`).

Where the robot is now and where the action sends it is given as two keypoint heatmaps (from
:mod:`.kinematics`); the action, the robot state, the measured gripper before and after, and
the number of actions per model call ``s`` modulate every resolution (FiLM). One network serves
``s`` = 1..4 actions per call (trained on all four): fewer calls cost less and are coarser.

Inputs per call: previous and current frame (64×64 RGB in [0, 1]), current and next heatmaps,
the sprite at the next position (P, A), the object's alpha at the current position, and the
conditioning vector of :func:`condition_vector`. Training unrolls the network on its own
predictions for several calls (multi-step loss) so errors do not explode at rollout.

The weights file holds three networks: ``renderer.*`` (this one), ``segmenter.*`` and
``dynamics.*`` (:mod:`.objects`).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

COND_DIM = 22
MAX_ACTIONS_PER_CALL = 4
IN_CHANNELS = 13  # prev RGB, current RGB, two heatmaps, sprite P (3) and A (1), current alpha
FORMAT = "kosmos-tabletop-learned-v2"
DEFAULT_CONFIG = {"channels": [12, 24, 32, 48], "cond_dim": COND_DIM, "hidden": 128, "image_size": [64, 64],
                  "segmenter_width": 16, "dynamics_hidden": 128}


def condition_vector(action: np.ndarray, pos: np.ndarray, euler: np.ndarray, next_pos: np.ndarray,
                     gripper: np.ndarray, home: np.ndarray, next_gripper: np.ndarray,
                     actions_per_call: np.ndarray) -> np.ndarray:
    """(…, 22) float32: scaled action (7; for several actions per call, their summed deltas and
    the last gripper command), position (3), sin/cos of the Euler angles (6), measured gripper
    (1), next position (3), next measured gripper (1), actions per call / 4 (1); positions
    relative to the home pose."""
    action = np.asarray(action, dtype=np.float32)
    scaled = np.concatenate([action[..., :3] * 20.0, action[..., 3:6] * 4.0, action[..., 6:7]], axis=-1)
    euler = np.asarray(euler, dtype=np.float32)
    return np.concatenate([
        scaled, (pos - home) * 5.0, np.sin(euler), np.cos(euler), np.asarray(gripper, np.float32)[..., None],
        (next_pos - home) * 5.0, np.asarray(next_gripper, np.float32)[..., None],
        np.asarray(actions_per_call, np.float32)[..., None] / MAX_ACTIONS_PER_CALL,
    ], axis=-1).astype(np.float32)


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


class NextFrameNet(nn.Module):
    """Masked-residual, sprite-compositing U-Net. ``forward`` returns (next frame, change mask)."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        self.config = dict(DEFAULT_CONFIG, **dict(config or {}))
        ch, hidden = list(self.config["channels"]), int(self.config["hidden"])
        self.cond = nn.Sequential(nn.Linear(int(self.config["cond_dim"]), hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
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
            self.out.bias[0] = -4.0  # mask starts near 0: the untrained net is the copy baseline
            self.out.bias[4] = -3.0  # occlusion starts near 0: the sprite is drawn on top

    def forward(self, prev: torch.Tensor, cur: torch.Tensor, heat_cur: torch.Tensor, heat_next: torch.Tensor,
                sprite_next: torch.Tensor, alpha_cur: torch.Tensor, cond: torch.Tensor):
        """``sprite_next`` (B, 4, H, W): premultiplied RGB and alpha at the next position;
        ``alpha_cur`` (B, H, W): the object's alpha where it is now."""
        h = self.cond(cond)
        x = torch.cat([prev, cur, heat_cur[:, None], heat_next[:, None], sprite_next, alpha_cur[:, None]], dim=1)
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
        frame = (1 - mask) * cur + mask * content
        frame = (1 - sprite_next[:, 3:4] * visible) * frame + visible * sprite_next[:, :3]
        return frame, mask


class LearnedTabletop(nn.Module):
    """The three networks of the learned tabletop, saved and loaded together (one sha256)."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        from kosmos_env.worlds.tabletop_learned.objects import ObjectDynamics, Segmenter

        self.config = dict(DEFAULT_CONFIG, **dict(config or {}))
        self.renderer = NextFrameNet(self.config)
        self.segmenter = Segmenter(int(self.config["segmenter_width"]))
        self.dynamics = ObjectDynamics(int(self.config["dynamics_hidden"]))


def save_weights(model: LearnedTabletop, path, extra_meta: Mapping[str, Any] | None = None) -> None:
    """Write the weights as safetensors; the model config and provenance go in its metadata."""
    from safetensors.torch import save_file

    meta = {"config": json.dumps(model.config, sort_keys=True), "format": FORMAT}
    meta.update({k: json.dumps(v, sort_keys=True) for k, v in dict(extra_meta or {}).items()})
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata=meta)


def load_weights(path) -> tuple[LearnedTabletop, dict[str, Any]]:
    """Build the networks from a safetensors file written by :func:`save_weights`."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} is not a Kosmos learned-tabletop weights file of format {FORMAT} "
                         f"(metadata format {meta.get('format')!r}); retrain with `kosmos-env train-world`")
    model = LearnedTabletop(json.loads(meta["config"]))
    model.load_state_dict(load_file(str(path)))
    model.eval()
    info = {k: json.loads(v) for k, v in meta.items() if k not in ("format",)}
    return model, info
