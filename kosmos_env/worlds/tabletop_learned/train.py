"""Train the learned tabletop on recorded episodes, and measure it against copy-last-frame.

Four networks, trained in order (everything seeded; torch uses at most 2 threads):

1. the segmenter (object and target masks) on random frames, supervised by the simulator's
   segmentation;
2. the object dynamics (held probability, free displacement, measured gripper), unrolled over
   whole episodes on their own predictions, supervised by the simulator's object centre, finger
   contact and measured gripper;
3. the renderer, frame by frame (it draws each frame from the state and the episode's first
   frame, never from its own output), with the object's sprite placed at its true position (the
   dynamics are trained separately), and an L1 loss that up-weights the pixels that differ
   from the first frame.

4. the slip predictor (:mod:`.slip`), last, on the simulator's held steps, with its own seeded
   generator (it draws nothing from the earlier stages' random streams, so they are the same with
   or without it); :func:`train_slip_only` fits it alone over an existing weights file.

``TrainConfig.objects_from`` reuses the segmenter and dynamics of an existing weights file and
trains only the renderer (the renderer stage does not depend on how they were trained, except
through the segmenter's sprites).

Held-out evaluation (:func:`multistep_error`) runs the whole learned world (:mod:`.engine`) from
the first frame of every held-out episode, as the env does, and compares its frames with the
simulator's and with copying the first frame (the last true frame the world was given).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from kosmos_env.worlds.tabletop_learned.dataset import Episodes
from kosmos_env.worlds.tabletop_learned.kinematics import HeatmapRenderer, integrate, matrix_to_euler


@dataclass
class Prepared:
    """Model-ready arrays for a set of episodes (poses integrated from actions, not read from the sim)."""

    frames: np.ndarray  # (E, T+1, H, W, 3) uint8
    heat: np.ndarray  # (E, T+1, H, W) float16
    actions: np.ndarray  # (E, T, 7)
    pos: np.ndarray  # (E, T+1, 3) integrated commanded tool point
    euler: np.ndarray  # (E, T+1, 3)
    gripper: np.ndarray  # (E, T+1) measured opening
    object_pos: np.ndarray  # (E, T+1, 3) simulator
    object_uv: np.ndarray  # (E, T+1, 2) its projection
    target_xy: np.ndarray  # (E, 2) simulator, at reset
    held: np.ndarray  # (E, T+1) float: a finger touches the object and the gripper is commanded closed
    moves: np.ndarray  # (E, T) float: not held after action t, and the object moved by more than 2 mm
    masks: np.ndarray  # (E, T+1, H, W) uint8 bits
    task: np.ndarray  # (E,)
    rest_z: np.ndarray  # (E,) object centre height resting on the table
    task_params: list
    home: np.ndarray


def prepare(episodes: Episodes, world: Mapping[str, Any]) -> Prepared:
    from kosmos_env.tasks import load_suite
    from kosmos_env.worlds.tabletop.geometry import tabletop_calibration
    from kosmos_env.worlds.tabletop_learned.objects import TASKS, rest_heights

    h, w = episodes.frames.shape[2:4]
    render = HeatmapRenderer(world["camera"], (h, w))
    calibration = tabletop_calibration(world["camera"], (h, w))
    suite = load_suite("tabletop").tasks
    params = [suite[episodes.task_names[t]].params for t in episodes.task]
    E, T1 = episodes.frames.shape[:2]
    heat = np.zeros(episodes.frames.shape[:4], dtype=np.float16)
    pos = np.zeros((E, T1, 3), np.float32)
    euler = np.zeros((E, T1, 3), np.float32)
    for e in range(E):
        p, rot = integrate(world, episodes.actions[e])
        pos[e] = p
        euler[e] = np.stack([matrix_to_euler(r) for r in rot])
        heat[e] = np.stack([render(a, b) for a, b in zip(p, rot, strict=True)])
    closed = np.c_[np.zeros((E, 1)), episodes.actions[:, :, 6] < 0.5]
    held = (episodes.contact & (closed > 0)).astype(np.float32)
    step = np.linalg.norm(np.diff(episodes.object_pos, axis=1), axis=2)
    moves = ((step > 0.002) & (held[:, 1:] < 0.5)).astype(np.float32)
    uv = calibration.project(episodes.object_pos.reshape(-1, 3)).reshape(E, T1, 2).astype(np.float32)
    return Prepared(
        episodes.frames,
        heat,
        episodes.actions.astype(np.float32),
        pos,
        euler,
        episodes.gripper.astype(np.float32),
        episodes.object_pos.astype(np.float32),
        uv,
        episodes.target_pos[:, 0, :2].astype(np.float32),
        held,
        moves,
        episodes.masks,
        np.array([TASKS.index(episodes.task_names[t]) for t in episodes.task], np.int64),
        np.array([rest_heights(p)[0] for p in params], np.float32),
        params,
        np.asarray(world["home_tcp"], np.float32),
    )


@dataclass
class TrainConfig:
    steps: int = 2000
    batch: int = 16
    lr: float = 2e-3
    seed: int = 0
    change_weight: float = 4.0
    segmenter_steps: int = 400
    dynamics_steps: int = 1500
    threads: int = 2
    model: dict = field(default_factory=dict)
    #: a weights file whose segmenter and dynamics are reused (only the renderer is trained)
    objects_from: str | None = None
    #: the slip predictor (:mod:`.slip`), the last stage: full-batch steps (0: no slip predictor),
    #: hidden width, and the hazard threshold stored with it
    slip_steps: int = 500
    slip_hidden: int = 16
    slip_threshold: float = 0.3


def _images(a: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(a)).float().div_(255.0).movedim(-1, -3)


def train_segmenter(model, data: Prepared, cfg: TrainConfig, rng: np.random.Generator, progress: bool = True) -> list:
    import torch
    from tqdm import tqdm

    opt = torch.optim.AdamW(model.segmenter.parameters(), lr=3e-3, weight_decay=1e-4)
    E, T1 = data.frames.shape[:2]
    history = []
    for step in tqdm(range(cfg.segmenter_steps), desc="training segmenter", disable=not progress):
        e = rng.integers(0, E, 32)
        # half first frames (what the world segments), half any frame (robot in view)
        t = np.where(rng.random(32) < 0.5, 0, rng.integers(0, T1, 32))
        m = data.masks[e, t]
        target = torch.from_numpy(np.stack([m & 1, (m >> 1) & 1], axis=1).astype(np.float32))
        logits = model.segmenter(_images(data.frames[e, t]), torch.from_numpy(data.task[e]))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, pos_weight=torch.tensor(3.0))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == cfg.segmenter_steps - 1:
            history.append(("segmenter", step, float(loss.detach())))
    return history


def unroll_dynamics(dynamics, data: Prepared, ep: np.ndarray, hard: bool = False, start_obj=None):
    """Roll the object dynamics over whole episodes from the simulator's first object state."""
    import torch

    T = data.actions.shape[1]
    obj = torch.from_numpy(data.object_pos[ep, 0]) if start_obj is None else start_obj
    grip = torch.ones(len(ep))
    held = torch.zeros(len(ep))
    pos = torch.from_numpy(data.pos[ep])
    cmd = torch.from_numpy(data.actions[ep, :, 6])
    rest = torch.from_numpy(data.rest_z[ep])
    target = torch.from_numpy(data.target_xy[ep])
    task = torch.from_numpy(data.task[ep])
    objs, logits, move_logits, grips, helds = [], [], [], [], []
    for t in range(T):
        obj, held, logit, move_logit, grip = dynamics.step(
            obj, pos[:, t], pos[:, t + 1], cmd[:, t], grip, held, rest, target, task, hard=hard
        )
        objs.append(obj)
        logits.append(logit)
        move_logits.append(move_logit)
        grips.append(grip)
        helds.append(held)
    return (
        torch.stack(objs, 1),
        torch.stack(logits, 1),
        torch.stack(move_logits, 1),
        torch.stack(grips, 1),
        torch.stack(helds, 1),
    )


def train_dynamics(model, data: Prepared, cfg: TrainConfig, rng: np.random.Generator, progress: bool = True) -> list:
    import torch
    from tqdm import tqdm

    opt = torch.optim.AdamW(model.dynamics.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(cfg.dynamics_steps, 1))
    E = len(data.frames)
    history = []
    for step in tqdm(range(cfg.dynamics_steps), desc="training object dynamics", disable=not progress):
        ep = rng.integers(0, E, 32)
        objs, logits, move_logits, grips, _ = unroll_dynamics(model.dynamics, data, ep)
        target = torch.from_numpy(data.object_pos[ep, 1:])
        loss_pos = (((objs - target) * 100.0) ** 2).mean()  # cm²
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        loss_held = bce(logits, torch.from_numpy(data.held[ep, 1:]))
        loss_move = bce(move_logits, torch.from_numpy(data.moves[ep]))
        loss_grip = ((grips - torch.from_numpy(data.gripper[ep, 1:])) ** 2).mean() * 20.0
        loss = 0.1 * loss_pos + loss_held + loss_move + loss_grip
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.dynamics.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == cfg.dynamics_steps - 1:
            history.append(
                ("dynamics", step, float(loss_pos.detach()), float(loss_held.detach()), float(loss_grip.detach()))
            )
    return history


def first_frame_sprites(model, data: Prepared):
    """Each episode's object sprite from its first frame, as the world cuts it (:func:`~.objects.sprite_alpha`)."""
    import torch

    from kosmos_env.worlds.tabletop_learned.objects import sprite_alpha

    out = []
    with torch.no_grad():
        for i in range(0, len(data.frames), 128):
            img = _images(data.frames[i : i + 128, 0])
            prob = torch.sigmoid(model.segmenter(img, torch.from_numpy(data.task[i : i + 128])))[:, 0]
            alpha = torch.from_numpy(sprite_alpha(prob.numpy())[:, None])
            out.append(torch.cat([img * alpha, alpha], dim=1))
    return torch.cat(out)


def render_batch(data: Prepared, sprites, ep: np.ndarray, t: np.ndarray):
    """Renderer inputs and target for frame ``t`` of episodes ``ep``: the first frame, the
    object's first-frame alpha, heatmaps (first pose, now, 1 and 2 steps ago), the sprite at
    the simulator's object position, the conditioning vector; and the simulator's frame."""
    import torch

    from kosmos_env.worlds.tabletop_learned.model import condition_vector
    from kosmos_env.worlds.tabletop_learned.objects import shift_layers

    t1, t2 = np.maximum(t - 1, 0), np.maximum(t - 2, 0)
    first = _images(data.frames[ep, 0])
    target = _images(data.frames[ep, t])
    heat = torch.from_numpy(
        np.stack([data.heat[ep, 0], data.heat[ep, t], data.heat[ep, t1], data.heat[ep, t2]], axis=1).astype(np.float32)
    )
    command = np.where(t > 0, data.actions[ep, np.maximum(t - 1, 0), 6], 1.0)
    cond = condition_vector(
        data.pos[ep, t], data.euler[ep, t], data.pos[ep, t1], data.pos[ep, t2], data.gripper[ep, t], command, data.home
    )
    sp = sprites[torch.from_numpy(ep)]
    placed = shift_layers(sp, torch.from_numpy(data.object_uv[ep, t] - data.object_uv[ep, 0]))
    return first, sp[:, 3], heat, placed, torch.from_numpy(cond), target


def train_renderer(
    model,
    data: Prepared,
    sprites,
    cfg: TrainConfig,
    rng: np.random.Generator,
    progress: bool = True,
    log_every: int = 100,
) -> list:
    """Fit the renderer frame by frame: every (episode, step) is an independent example,
    because the renderer draws from the state and the first frame, never from its own output.
    The loss is L1 (sharper than squared error where the picture is uncertain), up-weighted
    on the pixels that differ from the first frame (the robot and the moved object), plus
    direct terms for the change mask (those pixels) and the content drawn there."""
    import torch
    from tqdm import tqdm

    params = list(model.renderer.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=1e-4)
    warm = max(1, cfg.steps // 20)  # linear warm-up, then cosine decay to 0
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1.0 + np.cos(np.pi * min(i, cfg.steps) / max(cfg.steps, 1)))
    )
    E, T1 = data.frames.shape[:2]
    history = []
    running = None
    bar = tqdm(range(cfg.steps), desc="training renderer", disable=not progress)
    for step in bar:
        ep = rng.integers(0, E, cfg.batch)
        t = rng.integers(1, T1, cfg.batch)
        first, alpha_first, heat, placed, cond, target = render_batch(data, sprites, ep, t)
        pred, mask, content = model.renderer(first, alpha_first, heat, placed, cond)
        changed = ((target - first).abs().amax(dim=1, keepdim=True) > 0.03).float()
        loss = ((1.0 + cfg.change_weight * changed) * (pred - target).abs()).mean()
        # the mask and the content are also supervised directly: with the frame loss alone the
        # mask closes everywhere in the first steps (copying the first frame beats untrained
        # content) and never reopens
        loss = loss + cfg.change_weight * (changed * (content - target).abs()).mean()
        loss = loss + torch.nn.functional.binary_cross_entropy(mask.clamp(1e-6, 1 - 1e-6), changed)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if step % log_every == 0 or step == cfg.steps - 1:
            history.append(("renderer", step, float(running)))
            bar.set_postfix(loss=f"{running:.5f}")
    return history


def train(train_data: Prepared, cfg: TrainConfig, progress: bool = True, after_stage=None):
    """Train a fresh :class:`~.model.LearnedTabletop`; returns (model, history).

    ``after_stage(name, model)`` is called after the segmenter and after the dynamics (to
    report on them before the long renderer stage)."""
    import torch

    from kosmos_env.worlds.tabletop_learned.model import LearnedTabletop

    torch.set_num_threads(max(1, min(2, cfg.threads)))
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = LearnedTabletop(cfg.model)
    model.train()
    if cfg.objects_from:
        history = [("objects_from", 0, load_object_networks(model, cfg.objects_from))]
    else:
        history = train_segmenter(model, train_data, cfg, rng, progress)
        history += train_dynamics(model, train_data, cfg, rng, progress)
    if after_stage is not None:
        model.eval()
        after_stage("dynamics", model)
        model.train()
    sprites = first_frame_sprites(model, train_data)
    history += train_renderer(model, train_data, sprites, cfg, rng, progress)
    if cfg.slip_steps > 0:
        history += train_slip(model, train_data, cfg)
    model.eval()
    return model, history


#: the slip stage seeds its own generator from the training seed plus this, so it draws nothing
#: from (and changes nothing in) the earlier stages' random streams
SLIP_SEED_OFFSET = 7919


def train_slip(model, data: Prepared, cfg: TrainConfig) -> list:
    """Fit the slip predictor (:mod:`.slip`) and attach it to ``model``; the other networks are untouched.

    The examples are every held step with the gripper commanded closed in the simulator's
    episodes (:func:`~.slip.slip_examples`); the loss is plain binary cross-entropy over all of
    them at once (full batch: no sampling, so the result depends only on the data and
    ``cfg.seed``). Its initialisation runs inside a forked torch generator, so the global
    random state the caller sees is unchanged."""
    import torch

    from kosmos_env.worlds.tabletop_learned.slip import slip_examples

    x, y, _ = slip_examples(data)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed + SLIP_SEED_OFFSET)
        model.attach_slip(cfg.slip_hidden, cfg.slip_threshold)
    if len(y) == 0:
        return [("slip", 0, float("nan"), 0, 0)]
    slip = model.slip
    slip.train()
    opt = torch.optim.Adam(slip.parameters(), lr=1e-2, weight_decay=1e-4)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(cfg.slip_steps):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(slip(xt), yt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    slip.eval()
    return [("slip", cfg.slip_steps - 1, float(loss.detach()), int(len(y)), int(y.sum()))]


def slip_error(model, data: Prepared) -> dict[str, Any]:
    """The slip predictor on the simulator's held steps of ``data`` (e.g. the held-out split):
    examples, true slips, and the predicted ones at the stored threshold (hits, false alarms)."""
    import torch

    from kosmos_env.worlds.tabletop_learned.slip import slip_examples

    x, y, _ = slip_examples(data)
    if model.slip is None or len(y) == 0:
        return {"examples": int(len(y)), "slips": int(y.sum()), "hits": 0, "false_alarms": 0}
    with torch.no_grad():
        p = torch.sigmoid(model.slip(torch.from_numpy(x))).numpy()
    pred = p > float(model.slip.threshold)
    return {
        "examples": int(len(y)),
        "slips": int(y.sum()),
        "hits": int((pred & (y > 0.5)).sum()),
        "false_alarms": int((pred & (y < 0.5)).sum()),
        "threshold": float(model.slip.threshold),
    }


def train_slip_only(weights_path, train_data: Prepared, cfg: TrainConfig):
    """Load every network of ``weights_path`` (kept bit for bit) and train a new slip predictor
    on ``train_data``; returns (model, history, the file's sha256, its metadata)."""
    import torch

    from kosmos_env.worlds.tabletop_learned.model import load_weights
    from kosmos_env.hashing import sha256_file

    torch.set_num_threads(max(1, min(2, cfg.threads)))
    model, info = load_weights(weights_path)
    history = train_slip(model, train_data, cfg)
    model.eval()
    return model, history, sha256_file(weights_path), info


def load_object_networks(model, path) -> str:
    """Copy the segmenter and dynamics weights of the weights file at ``path`` (any format
    version whose two networks have the current shapes) into ``model``; returns its sha256."""
    from safetensors.torch import load_file

    from kosmos_env.hashing import sha256_file

    state = load_file(str(path))
    for part in ("segmenter", "dynamics"):
        sub = {k[len(part) + 1 :]: v for k, v in state.items() if k.startswith(part + ".")}
        if not sub:
            raise ValueError(f"{path} holds no {part} weights; pass a learned-tabletop world.safetensors")
        getattr(model, part).load_state_dict(sub)
    return sha256_file(path)


def object_networks_problem(path) -> str | None:
    """Why ``path`` cannot lend its segmenter and dynamics (one line), or None."""
    from pathlib import Path

    if not Path(path).is_file():
        return "no such file"
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as fh:
            keys = list(fh.keys())
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same one-line answer
        return f"not a safetensors file ({type(exc).__name__})"
    missing = [p for p in ("segmenter", "dynamics") if not any(k.startswith(p + ".") for k in keys)]
    return f"holds no {' or '.join(missing)} weights" if missing else None


def multistep_error(
    model, data: Prepared, world: Mapping[str, Any], horizon: int = 20, actions_per_call: int = 1, threads: int = 2
) -> dict[str, Any]:
    """The whole learned world, open loop from each held-out episode's first frame, at steps 1..``horizon``.

    Per step: per-pixel MSE (frames in [0, 1]) of the generated frame and of copying the first
    frame (the last true frame the world saw), the object's centre error (cm) against the
    simulator, and the absolute error of the predicted measured gripper.
    """
    import torch

    from kosmos_env.worlds.tabletop_learned.engine import Engine, to_tensor

    torch.set_num_threads(max(1, min(2, threads)))
    E, T1 = data.frames.shape[:2]
    horizon = min(horizon, T1 - 1)
    engine = Engine(model, world, actions_per_call)
    model_err, copy_err, obj_err, grip_err = (np.zeros(horizon) for _ in range(4))
    for i in range(0, E, 64):
        ep = np.arange(i, min(i + 64, E))
        engine.start(data.frames[ep, 0], data.task[ep], [data.task_params[e] for e in ep])
        first = to_tensor(data.frames[ep, 0])
        for t in range(horizon):
            frames, grip, _ = engine.step(data.actions[ep, t], render=True if t + 1 == horizon else None)
            truth = to_tensor(data.frames[ep, t + 1])
            model_err[t] += ((to_tensor(frames) - truth) ** 2).mean(dim=(1, 2, 3)).sum().item()
            copy_err[t] += ((first - truth) ** 2).mean(dim=(1, 2, 3)).sum().item()
            obj_err[t] += np.linalg.norm(engine.obj.numpy() - data.object_pos[ep, t + 1], axis=1).sum() * 100.0
            grip_err[t] += np.abs(grip - data.gripper[ep, t + 1]).sum()
    return {
        "horizons": list(range(1, horizon + 1)),
        "model_mse": (model_err / E).tolist(),
        "copy_mse": (copy_err / E).tolist(),
        "object_cm": (obj_err / E).tolist(),
        "gripper_mae": (grip_err / E).tolist(),
        "n_rollouts": int(E),
        "n_episodes": int(E),
        "actions_per_call": int(actions_per_call),
    }


def object_error(model, data: Prepared, world: Mapping[str, Any], threads: int = 2) -> dict[str, Any]:
    """Object state and gripper of the learned world (no frames rendered) over whole held-out
    episodes from the first frame: mean object-centre error (cm), held-state accuracy and
    measured-gripper error per step, and the share of episodes whose object ends within 2 cm."""
    import torch

    from kosmos_env.worlds.tabletop_learned.engine import Engine

    torch.set_num_threads(max(1, min(2, threads)))
    E, T1 = data.frames.shape[:2]
    engine = Engine(model, world, 1)
    obj_err, held_acc, grip_err = (np.zeros(T1 - 1) for _ in range(3))
    final = []
    for i in range(0, E, 128):
        ep = np.arange(i, min(i + 128, E))
        engine.start(data.frames[ep, 0], data.task[ep], [data.task_params[e] for e in ep])
        for t in range(T1 - 1):
            _, grip, _ = engine.step(data.actions[ep, t], render=False)
            err = np.linalg.norm(engine.obj.numpy() - data.object_pos[ep, t + 1], axis=1) * 100.0
            obj_err[t] += err.sum()
            held_acc[t] += ((engine.held.numpy() > 0.5) == (data.held[ep, t + 1] > 0.5)).sum()
            grip_err[t] += np.abs(grip - data.gripper[ep, t + 1]).sum()
        final.append(err)
    final = np.concatenate(final)
    return {
        "object_cm": (obj_err / E).tolist(),
        "held_accuracy": (held_acc / E).tolist(),
        "gripper_mae": (grip_err / E).tolist(),
        "final_within_2cm": float((final < 2.0).mean()),
        "n_episodes": int(E),
    }


def format_object_table(result: Mapping[str, Any], steps=(1, 5, 10, 15, 20, 25, 30, 35, 40)) -> str:
    lines = ["step  object_cm  held_acc  gripper_mae", "----  ---------  --------  -----------"]
    for t in steps:
        if t <= len(result["object_cm"]):
            lines.append(
                f"{t:4d}  {result['object_cm'][t - 1]:9.2f}  {result['held_accuracy'][t - 1]:8.3f}  "
                f"{result['gripper_mae'][t - 1]:11.4f}"
            )
    lines.append(
        f"object within 2 cm of the simulator's at the last step: {result['final_within_2cm']:.3f} "
        f"of {result['n_episodes']} episodes"
    )
    return "\n".join(lines)


def format_error_table(result: Mapping[str, Any]) -> str:
    lines = [
        "horizon  model_mse   copy_mse    ratio  object_cm  gripper_mae",
        "-------  ----------  ----------  -----  ---------  -----------",
    ]
    for h, m, c, o, g in zip(
        result["horizons"],
        result["model_mse"],
        result["copy_mse"],
        result["object_cm"],
        result["gripper_mae"],
        strict=True,
    ):
        lines.append(f"{h:7d}  {m:10.6f}  {c:10.6f}  {m / c:5.3f}  {o:9.2f}  {g:11.4f}")
    return "\n".join(lines)


def timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0
