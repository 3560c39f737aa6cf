"""Behaviour cloning: fit the network's Gaussian mean to demonstrated actions (in [-1, 1] space).

Mean-squared error on the action mean only; ``log_std`` stays at the configured value (it sets
PPO's initial exploration, and a likelihood loss would shrink it to the demos' noise). The state
normaliser is set once from the demos. Images get a random shift of a few pixels (pad by
repetition, crop back) so a few hundred frames do not pin the CNN to exact pixel positions.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kosmos_env.policies.checkpoint import NetConfig, build_net, image_to_input, save_checkpoint
from kosmos_env.training.demos import Demos, stacked_inputs


@dataclass
class BCConfig:
    steps: int = 1500
    batch: int = 64
    lr: float = 1e-3
    seed: int = 0
    threads: int = 1
    frame_stack: int = 1
    log_std: float = -1.0  # PPO's initial std exp(-1) = 0.37 of the [-1, 1] action range
    shift_px: int = 2  # random-shift augmentation; 0 turns it off
    successful_only: bool = False  # keep only the episodes the judge called a success
    encoder: str = "keypoints"
    channels: tuple[int, ...] = (32, 32, 32)
    keypoints: int = 16
    image_features: int = 128
    hidden: tuple[int, ...] = (128, 128)
    extra: dict[str, Any] = field(default_factory=dict)  # recorded in the checkpoint as given


def _random_shift(images, pad: int, gen):
    """Each image shifted by up to ``pad`` pixels (edges repeated), one offset per image."""
    import torch
    import torch.nn.functional as F

    if pad <= 0:
        return images
    n, _, h, w = images.shape
    padded = F.pad(images, (pad, pad, pad, pad), mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    rows = torch.arange(h)[None, :] + dy[:, None]  # (n, h)
    cols = torch.arange(w)[None, :] + dx[:, None]  # (n, w)
    idx_n = torch.arange(n)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[idx_n, rows[:, :, None], cols[:, None, :]]  # (n, h, w, c)
    return out.permute(0, 3, 1, 2).contiguous()


def imitation_mse(net, demos: Demos, frame_stack: int | None = None, batch: int = 256) -> float:
    """Mean squared error of ``net``'s action mean (clipped to [-1, 1], as it acts) against the
    demonstrated actions, over every step of ``demos``."""
    import torch

    k = int(frame_stack or net.cfg.frame_stack)
    images, states = stacked_inputs(demos, k)
    onehot = np.eye(net.cfg.n_tasks, dtype=np.float32)[demos.task]
    total, was_training = 0.0, net.training
    net.eval()
    with torch.no_grad():
        for i in range(0, len(demos), batch):
            mean, _ = net(
                image_to_input(images[i : i + batch]),
                torch.as_tensor(states[i : i + batch]),
                torch.as_tensor(onehot[i : i + batch]),
            )
            err = mean.clamp(-1.0, 1.0) - torch.as_tensor(demos.action[i : i + batch])
            total += float((err**2).mean(dim=1).sum())
    net.train(was_training)
    return total / max(1, len(demos))


def behaviour_clone(
    demos: Demos | str | Path, out_path: str | Path, config: BCConfig | None = None, *, progress: bool = True
) -> Path:
    """Train a fresh network on ``demos`` (a :class:`Demos` or its file) and write a ``bc`` checkpoint.

    The checkpoint records the demos' env id, spec hash and instruction list, the BC settings and
    the imitation error before and after training. Returns ``out_path``.
    """
    import torch
    from tqdm.auto import tqdm

    cfg = config or BCConfig()
    if isinstance(demos, (str, Path)):
        demos = Demos.load(demos)
    if cfg.successful_only:
        demos = demos.select_episodes(demos.success == 1)
    if len(demos) == 0:
        raise ValueError("behaviour cloning needs at least one demonstrated step (none left after filtering)")
    if cfg.steps < 1 or cfg.batch < 1:
        raise ValueError(f"BC steps and batch must be >= 1, got {cfg.steps} and {cfg.batch}")
    torch.set_num_threads(max(1, int(cfg.threads)))
    torch.manual_seed(cfg.seed)
    meta = demos.meta
    net_cfg = NetConfig(
        image_size=tuple(meta["image_size"]),
        frame_stack=cfg.frame_stack,
        n_tasks=len(meta["instructions"]),
        encoder=cfg.encoder,
        channels=tuple(cfg.channels),
        keypoints=cfg.keypoints,
        image_features=cfg.image_features,
        hidden=tuple(cfg.hidden),
        init_log_std=cfg.log_std,
    )
    net = build_net(net_cfg)
    images, states = stacked_inputs(demos, cfg.frame_stack)
    with torch.no_grad():  # state normaliser from the demos; a constant dimension keeps scale 1
        std = torch.as_tensor(states.std(axis=0))
        net.state_mean.copy_(torch.as_tensor(states.mean(axis=0)))
        net.state_std.copy_(torch.where(std > 1e-4, std, torch.ones_like(std)))
    mse_before = imitation_mse(net, demos, cfg.frame_stack)

    onehot = np.eye(net_cfg.n_tasks, dtype=np.float32)[demos.task]
    actions = torch.as_tensor(demos.action)
    # log_std is left where it was set: only the mean imitates
    params = [p for n, p in net.named_parameters() if n != "log_std" and not n.startswith(("vf_trunk", "value_head"))]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.steps)
    gen = torch.Generator().manual_seed(cfg.seed)
    net.train()
    t0, running = time.perf_counter(), None
    bar = tqdm(range(cfg.steps), desc="behaviour cloning", disable=not progress)
    for _ in bar:
        idx = torch.randint(0, len(demos), (min(cfg.batch, len(demos)),), generator=gen).numpy()
        img = _random_shift(image_to_input(images[idx]), cfg.shift_px, gen)
        mean, _ = net(img, torch.as_tensor(states[idx]), torch.as_tensor(onehot[idx]))
        loss = ((mean - actions[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        value = loss.item()
        running = value if running is None else 0.95 * running + 0.05 * value
        bar.set_postfix(loss=f"{running:.4f}")
    bar.close()
    net.eval()
    mse_after = imitation_mse(net, demos, cfg.frame_stack)
    settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()}
    out = save_checkpoint(
        net,
        out_path,
        {
            "env_id": meta["env_id"],
            "spec_hash": meta["spec_hash"],
            "reward": None,
            "seed": cfg.seed,
            "stage": "bc",
            "env_steps": 0,
            "update": 0,
            "instructions": meta["instructions"],
            "image_size": list(net_cfg.image_size),
            "frame_stack": cfg.frame_stack,
            "action_low": meta["action_low"],
            "action_high": meta["action_high"],
            "bc": {
                "settings": settings,
                "demo_policy": meta.get("policy"),
                "demo_env_kwargs": meta.get("env_kwargs"),
                "demo_episodes": int(len(np.unique(demos.episode))),
                "demo_steps": len(demos),
                "demo_success_rate": float(np.mean(demos.success == 1)) if demos.n_episodes else None,
                "imitation_mse_before": mse_before,
                "imitation_mse_after": mse_after,
                "train_seconds": round(time.perf_counter() - t0, 1),
            },
        },
    )
    return out
