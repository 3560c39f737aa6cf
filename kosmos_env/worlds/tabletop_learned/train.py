"""Train the next-frame network on recorded episodes, and measure it against copy-last-frame.

Training unrolls the network on its own predictions (frames and gripper fed back) for a
curriculum of 2 → 4 → 5 steps, with a per-pixel loss that up-weights the pixels that change.
Everything is seeded; torch uses at most 2 threads. Held-out evaluation rolls the model open
loop for up to 10 steps from true frames of held-out episodes and compares its per-pixel MSE
with copying the conditioning frame.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from kosmos_env.worlds.tabletop_learned.dataset import Episodes
from kosmos_env.worlds.tabletop_learned.kinematics import HeatmapRenderer, integrate

GRIPPER_COL = 16  # index of the measured gripper in the conditioning vector


@dataclass
class Prepared:
    """Model-ready arrays for a set of episodes (poses integrated from actions, not read from the sim)."""

    frames: np.ndarray  # (E, T+1, H, W, 3) uint8
    heat: np.ndarray  # (E, T+1, H, W) float16
    cond: np.ndarray  # (E, T, 20) float32, measured gripper of step t at GRIPPER_COL
    gripper: np.ndarray  # (E, T+1) float32


def prepare(episodes: Episodes, world: Mapping[str, Any]) -> Prepared:
    from kosmos_env.worlds.tabletop_learned.kinematics import matrix_to_euler
    from kosmos_env.worlds.tabletop_learned.model import condition_vector

    h, w = episodes.frames.shape[2:4]
    render = HeatmapRenderer(world["camera"], (h, w))
    home = np.asarray(world["home_tcp"], dtype=np.float32)
    heat = np.zeros(episodes.frames.shape[:4], dtype=np.float16)
    cond = np.zeros((*episodes.actions.shape[:2], 20), dtype=np.float32)
    for e in range(len(episodes)):
        pos, rot = integrate(world, episodes.actions[e])
        euler = np.stack([matrix_to_euler(r) for r in rot])
        heat[e] = np.stack([render(p, r) for p, r in zip(pos, rot)])
        cond[e] = condition_vector(episodes.actions[e], pos[:-1], euler[:-1], pos[1:], episodes.gripper[e, :-1], home)
    return Prepared(episodes.frames, heat, cond, episodes.gripper.astype(np.float32))


def _batch(data: Prepared, ep: np.ndarray, start: np.ndarray, k: int):
    """Torch tensors for rollouts of ``k`` steps from ``start`` in episodes ``ep``."""
    import torch

    idx = start[:, None] + np.arange(k + 1)[None]  # frames start .. start+k
    frames = data.frames[ep[:, None], idx]  # (B, k+1, H, W, 3)
    prev = data.frames[ep, np.maximum(start - 1, 0)]
    heat = data.heat[ep[:, None], idx].astype(np.float32)
    cond = data.cond[ep[:, None], start[:, None] + np.arange(k)[None]]
    grip = data.gripper[ep[:, None], idx]

    def img(a):
        return torch.from_numpy(a).float().div_(255.0).movedim(-1, -3)

    return img(prev), img(frames), torch.from_numpy(heat), torch.from_numpy(cond), torch.from_numpy(grip)


def unroll(model, prev, frames0, heat, cond, grip0, k: int):
    """Roll the model ``k`` steps on its own outputs; returns predicted frames (B, k, 3, H, W) and grippers (B, k)."""
    import torch

    cur, g = frames0, grip0
    out_f, out_g = [], []
    for t in range(k):
        c = cond[:, t].clone()
        c[:, GRIPPER_COL] = g
        nxt, g_next, _ = model(prev, cur, heat[:, t], heat[:, t + 1], c)
        out_f.append(nxt)
        out_g.append(g_next)
        prev, cur, g = cur, nxt, g_next
    return torch.stack(out_f, 1), torch.stack(out_g, 1)


@dataclass
class TrainConfig:
    steps: int = 2400
    batch: int = 16
    lr: float = 2e-3
    seed: int = 0
    curriculum: tuple = ((0.35, 2), (0.75, 4), (1.0, 5))  # (fraction of steps, unroll length)
    change_weight: float = 4.0
    gripper_weight: float = 2.0
    threads: int = 2
    model: dict = field(default_factory=dict)


def train(train_data: Prepared, cfg: TrainConfig, progress: bool = True, log_every: int = 100):
    """Train a fresh :class:`NextFrameNet`; returns (model, history of (step, loss))."""
    import torch
    from tqdm import tqdm

    from kosmos_env.worlds.tabletop_learned.model import NextFrameNet

    torch.set_num_threads(max(1, min(2, cfg.threads)))
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = NextFrameNet(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=max(cfg.steps, 1), pct_start=0.05)
    E, T1 = train_data.frames.shape[:2]
    T = T1 - 1
    history = []
    model.train()
    bar = tqdm(range(cfg.steps), desc="training learned tabletop", disable=not progress)
    running = None
    for step in bar:
        frac = (step + 1) / max(cfg.steps, 1)
        k = next(length for until, length in cfg.curriculum if frac <= until + 1e-9)
        k = min(k, T)
        ep = rng.integers(0, E, cfg.batch)
        start = rng.integers(0, T - k + 1, cfg.batch)
        prev, frames, heat, cond, grip = _batch(train_data, ep, start, k)
        pred_f, pred_g = unroll(model, prev, frames[:, 0], heat, cond, grip[:, 0], k)
        target = frames[:, 1:]
        changed = ((target - frames[:, :-1]).abs().amax(dim=2, keepdim=True) > 0.03).float()
        weight = 1.0 + cfg.change_weight * changed
        loss_f = (weight * (pred_f - target) ** 2).mean()
        loss_g = ((pred_g - grip[:, 1:]) ** 2).mean()
        loss = loss_f + cfg.gripper_weight * loss_g
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % log_every == 0 or step == cfg.steps - 1:
            history.append((step, float(running), k))
            bar.set_postfix(loss=f"{running:.5f}", k=k)
    model.eval()
    return model, history


def multistep_error(model, data: Prepared, horizon: int = 10, stride: int = 5, threads: int = 2) -> dict[str, Any]:
    """Open-loop error vs copy-last-frame at horizons 1..``horizon`` on held-out episodes.

    From every start s = 0, stride, … (with s + horizon inside the episode), the model sees the
    true frames s−1 and s and the true actions, and predicts ``horizon`` frames on its own
    outputs. Error is per-pixel MSE in [0, 1] units; ``copy`` copies frame s.
    """
    import torch

    torch.set_num_threads(max(1, min(2, threads)))
    E, T1 = data.frames.shape[:2]
    starts = np.arange(0, T1 - horizon, stride)
    ep = np.repeat(np.arange(E), len(starts))
    st = np.tile(starts, E)
    model_err = np.zeros(horizon)
    copy_err = np.zeros(horizon)
    grip_err = np.zeros(horizon)
    n = 0
    with torch.no_grad():
        for i in range(0, len(ep), 64):
            prev, frames, heat, cond, grip = _batch(data, ep[i:i + 64], st[i:i + 64], horizon)
            pred_f, pred_g = unroll(model, prev, frames[:, 0], heat, cond, grip[:, 0], horizon)
            target = frames[:, 1:]
            b = len(prev)
            model_err += ((pred_f - target) ** 2).mean(dim=(2, 3, 4)).sum(0).numpy()
            copy_err += ((frames[:, :1] - target) ** 2).mean(dim=(2, 3, 4)).sum(0).numpy()
            grip_err += (pred_g - grip[:, 1:]).abs().sum(0).numpy()
            n += b
    return {
        "horizons": list(range(1, horizon + 1)),
        "model_mse": (model_err / n).tolist(),
        "copy_mse": (copy_err / n).tolist(),
        "gripper_mae": (grip_err / n).tolist(),
        "n_rollouts": int(n),
        "n_episodes": int(E),
    }


def format_error_table(result: Mapping[str, Any]) -> str:
    lines = ["horizon  model_mse   copy_mse    ratio  gripper_mae", "-------  ----------  ----------  -----  -----------"]
    for h, m, c, g in zip(result["horizons"], result["model_mse"], result["copy_mse"], result["gripper_mae"]):
        lines.append(f"{h:7d}  {m:10.6f}  {c:10.6f}  {m / c:5.3f}  {g:11.4f}")
    return "\n".join(lines)


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0
