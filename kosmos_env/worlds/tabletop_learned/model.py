"""The next-frame network: an action-conditioned masked-residual U-Net over keypoint heatmaps.

Why this shape: a plain convolutional next-frame predictor trained for minutes on CPU does not
beat "copy the last frame", because almost every pixel stays the same and a blurry re-drawing
of the whole scene costs more than it gains. So the network predicts only *what changes*:

    x[t+1] = (1 − m) · x[t] + m · c

with a per-pixel mask ``m`` (initialised near 0, i.e. starting as the copy baseline) and new
content ``c``. What moves is the robot, and what the robot carries; where the robot is now and
where the action sends it is given as two keypoint heatmaps (from :mod:`.kinematics`), so the
network's job is local: erase the gripper here, draw it there, and move the object with it if it
was grasped. The action and the robot state also modulate every resolution (FiLM). A small
head predicts the measured gripper opening after the action (does something stop the fingers?).

Inputs per step: previous frame, current frame (both 64×64 RGB in [0, 1]), current and next
heatmaps, and the conditioning vector of :func:`condition_vector`. Training unrolls the network
on its own predictions for several steps (multi-step loss) so errors do not explode at rollout.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

COND_DIM = 20
DEFAULT_CONFIG = {"channels": [24, 40, 64, 96], "cond_dim": COND_DIM, "hidden": 128, "image_size": [64, 64]}


def condition_vector(action: np.ndarray, pos: np.ndarray, euler: np.ndarray, next_pos: np.ndarray,
                     gripper: np.ndarray, home: np.ndarray) -> np.ndarray:
    """(…, 20) float32: scaled action (7), position (3), sin/cos of the Euler angles (6),
    measured gripper (1), next position (3); positions relative to the home pose."""
    action = np.asarray(action, dtype=np.float32)
    scaled = np.concatenate([action[..., :3] * 20.0, action[..., 3:6] * 4.0, action[..., 6:7]], axis=-1)
    euler = np.asarray(euler, dtype=np.float32)
    return np.concatenate([
        scaled, (pos - home) * 5.0, np.sin(euler), np.cos(euler), np.asarray(gripper, np.float32)[..., None],
        (next_pos - home) * 5.0,
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
    """Masked-residual U-Net. ``forward`` returns (next frame, next measured gripper, mask)."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__()
        self.config = dict(DEFAULT_CONFIG, **dict(config or {}))
        ch, hidden = list(self.config["channels"]), int(self.config["hidden"])
        self.cond = nn.Sequential(nn.Linear(int(self.config["cond_dim"]), hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.enc = nn.ModuleList()
        cin = 8  # prev RGB, current RGB, two heatmaps
        for c in ch:
            self.enc.append(_FiLMBlock(cin, c, hidden))
            cin = c
        self.dec = nn.ModuleList()
        for i in range(len(ch) - 2, -1, -1):
            self.dec.append(_FiLMBlock(ch[i + 1] + ch[i], ch[i], hidden))
        self.out = nn.Conv2d(ch[0], 4, 3, padding=1)
        with torch.no_grad():
            self.out.weight.mul_(0.1)
            self.out.bias.zero_()
            self.out.bias[0] = -4.0  # mask starts near 0: the untrained net is the copy baseline
        self.gripper_head = nn.Sequential(nn.Linear(ch[-1] + hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1))

    def forward(self, prev: torch.Tensor, cur: torch.Tensor, heat_cur: torch.Tensor, heat_next: torch.Tensor,
                cond: torch.Tensor):
        h = self.cond(cond)
        x = torch.cat([prev, cur, heat_cur[:, None], heat_next[:, None]], dim=1)
        skips = []
        for i, block in enumerate(self.enc):
            if i:
                x = F.avg_pool2d(x, 2)
            x = block(x, h)
            skips.append(x)
        pooled = x.mean(dim=(2, 3))
        for j, block in enumerate(self.dec):
            skip = skips[-2 - j]
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
            x = block(torch.cat([x, skip], dim=1), h)
        out = self.out(x)
        mask = torch.sigmoid(out[:, :1])
        content = torch.sigmoid(out[:, 1:])
        frame = (1 - mask) * cur + mask * content
        # fingers reach an opening command; closing, they stop short where something is held:
        # measured = cmd + (1 − cmd)·s, s ∈ (0, 1) the predicted "held width" (≈ 0 when empty)
        cmd = cond[:, 6:7]
        held = torch.sigmoid(self.gripper_head(torch.cat([pooled, h], dim=1)) - 3.0)
        gripper = (cmd + (1 - cmd) * held).squeeze(1)
        return frame, gripper, mask


def save_weights(model: NextFrameNet, path, extra_meta: Mapping[str, Any] | None = None) -> None:
    """Write the weights as safetensors; the model config and provenance go in its metadata."""
    from safetensors.torch import save_file

    meta = {"config": json.dumps(model.config, sort_keys=True), "format": "kosmos-tabletop-learned-v1"}
    meta.update({k: json.dumps(v, sort_keys=True) for k, v in dict(extra_meta or {}).items()})
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(path), metadata=meta)


def load_weights(path) -> tuple[NextFrameNet, dict[str, Any]]:
    """Build the network from a safetensors file written by :func:`save_weights`."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    if meta.get("format") != "kosmos-tabletop-learned-v1":
        raise ValueError(f"{path} is not a Kosmos learned-tabletop weights file (metadata format {meta.get('format')!r})")
    model = NextFrameNet(json.loads(meta["config"]))
    model.load_state_dict(load_file(str(path)))
    model.eval()
    info = {k: json.loads(v) for k, v in meta.items() if k not in ("format",)}
    return model, info
