"""The object-centric half of the learned tabletop: find the object, track it, cut it out.

A next-frame network alone loses a grasped object within a few steps: nothing in its inputs
says the object exists once its pixels have blurred. So the world keeps a small learned
*object state* beside the picture:

- :class:`Segmenter` (a small conv net) predicts, from a frame and the task, where the object
  and the target are (per-pixel masks). On the first frame this gives the object's sprite (its
  pixels and alpha), its position (mask centre back-projected onto the plane the object rests
  on, through the published camera calibration) and the target's position.
- :class:`ObjectDynamics` (an MLP) steps that state with every action: the probability that the
  object is held after the action, its displacement when it is not held (falling after a
  release, being pushed), and the measured gripper opening (the fingers stop short of a
  held object). A held object moves rigidly with the commanded tool point; an object neither
  held nor moving stays exactly where it is.
- :class:`~.slip.SlipPredictor` (optional, a small MLP in its own module): while the object is
  held and the gripper stays commanded closed, the per-step hazard that it leaves the fingers
  anyway (commanded partly open past the object; squeezed out of an off-centre grasp); the
  drop that follows is a fixed rule (:mod:`.slip`).
- :func:`shift_layers` moves the sprite in the image by the projected displacement of the
  object; the renderer (:mod:`.model`) composites it, so the object's appearance never drifts.

Training supervision (object centre, finger contact, segmentation) comes from the simulator
(:mod:`.dataset`); at run time all of it is predicted.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

#: the tabletop suite's tasks, in the order of the networks' task index
TASKS = ("spoon_on_towel", "carrot_on_plate", "stack_green_on_yellow", "eggplant_in_basket")
N_TASKS = len(TASKS)
DYN_FEATURES = 16
#: a grasp can start only with the object centre this close to the tool point (m): the fingers
#: open to 0.04 m either side, and the longest object's half length is 0.045 m
REACH_XY = 0.06
REACH_Z = 0.04


class Segmenter(nn.Module):
    """Frame (B, 3, H, W) + task index → logits (B, 2, H, W): channel 0 object, 1 target."""

    def __init__(self, width: int = 16, n_tasks: int = N_TASKS):
        super().__init__()
        self.n_tasks = n_tasks
        c = width
        self.net = nn.Sequential(
            nn.Conv2d(3 + n_tasks, c, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, padding=2, dilation=2),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, padding=4, dilation=4),
            nn.SiLU(),
            nn.Conv2d(c, c, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(c, 2, 1),
        )

    def forward(self, images: torch.Tensor, task: torch.Tensor) -> torch.Tensor:
        b, _, h, w = images.shape
        onehot = F.one_hot(task.long(), self.n_tasks).float()[:, :, None, None].expand(b, self.n_tasks, h, w)
        return self.net(torch.cat([images, onehot], dim=1))


def dynamics_features(
    obj: torch.Tensor,
    tcp: torch.Tensor,
    tcp_next: torch.Tensor,
    cmd: torch.Tensor,
    grip: torch.Tensor,
    held: torch.Tensor,
    rest_z: torch.Tensor,
    target_xy: torch.Tensor,
    task: torch.Tensor,
) -> torch.Tensor:
    """(B, 16): object relative to the tool point, the commanded move, gripper command and
    opening, held probability, height above rest, offset from the target, task one-hot."""
    return torch.cat(
        [
            (obj - tcp) * 10.0,
            (tcp_next - tcp) * 20.0,
            cmd[:, None],
            grip[:, None],
            held[:, None],
            (obj[:, 2:3] - rest_z[:, None]) * 10.0,
            (obj[:, :2] - target_xy) * 10.0,
            F.one_hot(task.long(), N_TASKS).float(),
        ],
        dim=1,
    )


def run_rows(net: nn.Module, x: torch.Tensor, rowwise: bool) -> torch.Tensor:
    """``net(x)``, or with ``rowwise`` ``net`` on one row of ``x`` at a time: BLAS picks other kernels
    for one row than for many, so a row of a batch differs from the same row alone in the last bits;
    row by row, each lane of a batched world equals a world of one bit for bit (a hard switch at
    0.5 downstream could otherwise flip)."""
    if not rowwise or len(x) <= 1:
        return net(x)
    return torch.cat([net(x[i : i + 1]) for i in range(len(x))])


class ObjectDynamics(nn.Module):
    """One action's effect on the object state; see :meth:`step`."""

    def __init__(self, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(DYN_FEATURES, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 6)
        )

    def step(
        self, obj, tcp, tcp_next, cmd, grip, held, rest_z, target_xy, task, hard: bool = False, rowwise: bool = False
    ):
        """(next object centre, held, held logit, moves logit, next measured opening).

        Two learned switches decide how the object moves: *held* (it follows the tool point
        rigidly; once held it stays held until the gripper is commanded open) and, when not
        held, *moves* (it is falling after a release or being pushed: the predicted displacement
        applies); otherwise it stays exactly where it is, so a resting object never creeps. A
        grasp can only start within reach of the fingers. The measured opening is the command
        unless the object is held; then the network predicts where the fingers stop when the grasp
        starts, and the opening stays there while the grasp lasts. The switches are thresholded at 0.5 in the forward pass;
        ``hard=False`` (training) passes gradients through their probabilities
        (straight-through), so training sees the same discrete state the world runs with.
        ``rowwise`` runs the network one row at a time (:func:`run_rows`).
        """
        out = run_rows(
            self.net, dynamics_features(obj, tcp, tcp_next, cmd, grip, held, rest_z, target_xy, task), rowwise
        )
        held_logit, move_logit = out[:, 0], out[:, 1]
        p_held, p_move = torch.sigmoid(held_logit), torch.sigmoid(move_logit)
        h = (p_held > 0.5).float()
        m = (p_move > 0.5).float()
        if not hard:
            h = h + p_held - p_held.detach()
            m = m + p_move - p_move.detach()
        # a held object stays held while the gripper stays commanded closed: the network decides
        # when a grasp starts and what an opening gripper lets go of, not a flicker mid-carry
        # (a slip under closed fingers is the separate slip predictor's call, .slip, in the engine)
        keep = ((held > 0.5) & (cmd < 0.5)).float()
        # and a grasp can only start on an object between the fingers (within reach of the tool point)
        gap = tcp_next - obj
        reach = ((gap[:, :2].norm(dim=1) < REACH_XY) & (gap[:, 2].abs() < REACH_Z)).float()
        h = keep + (1 - keep) * reach * h
        free = out[:, 2:5] / 20.0
        nxt = obj + h[:, None] * (tcp_next - tcp) + ((1 - h) * m)[:, None] * free
        # nothing sinks into the table: the centre stays at or above its resting height
        nxt = torch.cat([nxt[:, :2], torch.maximum(nxt[:, 2:3], rest_z[:, None])], dim=1)
        # the fingers reach the commanded opening unless something held stops them short; where
        # they stop is predicted when the grasp starts, and they stay there while it lasts (the
        # objects are rigid: the simulator's opening is constant to 0.01 during a hold, and a
        # drifting prediction would read as "not settled" to the robot-log judge)
        stopped = keep * grip + (1 - keep) * torch.sigmoid(out[:, 5])
        grip_next = h * stopped + (1 - h) * cmd
        return nxt, h, held_logit, move_logit, grip_next


#: the object's region is where the segmenter's probability reaches this; its alpha is the
#: probability scaled so that this level is fully opaque
SPRITE_REGION_P = 0.3
SPRITE_OPAQUE_P = 0.5


def sprite_alpha(prob: np.ndarray) -> np.ndarray:
    """The object's sprite alpha (B, H, W) in [0, 1] from the segmenter's object probability (B, H, W).

    The raw probability is a poor alpha: it spreads a faint halo over the table and the target
    around the object (measured on held-out first frames: 107 pixels above 0.05 for a 30-pixel
    object, a third of them on the target), and it stays below 1 inside the object. Pasted at
    the object's new place, that halo drew the target's outline and a grey rim over whatever
    the object landed on (the yellow cube under the green one), and the object looked faded.
    So the alpha keeps only the connected region (probability >= ``SPRITE_REGION_P``) holding
    the most probability mass, and is the probability scaled so that ``SPRITE_OPAQUE_P`` and
    above is opaque (held-out first frames: 27 of the object's 30 pixels' worth of alpha kept,
    none on the target, the halo on the table from 21 to 11). A rule on the learned mask, not
    learned itself.
    """
    from scipy import ndimage

    prob = np.asarray(prob, dtype=np.float32)
    out = np.zeros_like(prob)
    for i, p in enumerate(prob.reshape(-1, *prob.shape[-2:])):
        labels, n = ndimage.label(p >= SPRITE_REGION_P)
        if n == 0:
            continue
        mass = ndimage.sum(p, labels, index=np.arange(1, n + 1))
        region = labels == 1 + int(np.argmax(mass))
        out.reshape(-1, *prob.shape[-2:])[i] = region * np.clip(p / SPRITE_OPAQUE_P, 0.0, 1.0)
    return out


def shift_layers(layers: torch.Tensor, shift_uv: torch.Tensor) -> torch.Tensor:
    """Translate image layers (B, C, H, W) by (du, dv) pixels (B, 2), bilinear, zero outside."""
    b, _, h, w = layers.shape
    theta = torch.zeros(b, 2, 3, dtype=layers.dtype)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = -2.0 * shift_uv[:, 0].to(layers.dtype) / w
    theta[:, 1, 2] = -2.0 * shift_uv[:, 1].to(layers.dtype) / h
    grid = F.affine_grid(theta, list(layers.shape), align_corners=False)
    return F.grid_sample(layers, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def mask_centre(prob: np.ndarray, threshold: float = 0.5) -> np.ndarray | None:
    """Probability-weighted pixel centre (u, v) of a mask (H, W), or None when nothing is found."""
    weights = np.where(prob >= threshold, prob, 0.0)
    total = float(weights.sum())
    if total < 1.0:
        return None
    v, u = np.mgrid[0 : prob.shape[0], 0 : prob.shape[1]]
    return np.array([(weights * (u + 0.5)).sum() / total, (weights * (v + 0.5)).sum() / total])


def locate(calibration, prob: np.ndarray, plane_z: float, fallback_xy: Sequence[float]) -> tuple[np.ndarray, bool]:
    """(centre on the plane z = ``plane_z`` (3,), found?) from a mask; ``fallback_xy`` when the mask is empty."""
    uv = mask_centre(prob)
    if uv is None:
        return np.array([*fallback_xy, plane_z], dtype=np.float64), False
    return calibration.backproject_to_plane(uv[None], plane_z)[0], True


def rest_heights(task_params: Mapping[str, Any]) -> tuple[float, float]:
    """(object centre height resting on the table, target centre height) from the public task suite."""
    from kosmos_env.tasks.shapes import object_half_height

    obj, target = task_params["object"], task_params["target"]
    return object_half_height(obj), (0.0 if target["shape"] == "basket" else object_half_height(target))
