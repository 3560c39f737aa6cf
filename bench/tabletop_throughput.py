"""Tabletop env step rate against its own physics-plus-render floor and against Pusher-v5.

Rates per image size, all measured in this run on this machine (so the ratios mean something
even when the absolute numbers do not):

- ``tabletop``: ``Kosmos-Tabletop-v1`` env.step (world control + physics + render + gate +
  judge bookkeeping), random actions;
- ``world``: the world's own ``step`` inside those env steps (no gate, no env bookkeeping);
- ``floor``: the time those same steps spent inside their own ``mj_step`` calls and the
  renderer (``update_scene`` + ``render``), timed inside the tabletop run itself;
- ``Pusher-v5``: Gymnasium's Pusher step + ``render()`` (rgb_array) at the same size, as shipped
  (its model asks for a 4096-pixel shadow map and 4x multisampling);
- ``Pusher lite``: the same Pusher with the tabletop's render settings (no shadow map, no
  multisampling), so that the comparison does not rest on Pusher's costlier render settings.

Fair measurement: every env renders with its own GL context current. Gymnasium's Pusher makes
its context current only when its renderer is created, so in a process that also renders the
tabletop it would draw with the tabletop's context: black frames, about 10x faster than its
real render (the numbers this script printed before it made Pusher's context current). Each
env is warmed up with the same calls it is timed on (step + render) and runs the same number of
steps; the rounds interleave tabletop and Pusher so that load hits both alike. On a loaded
machine one preempted step can weigh more than a hundred clean ones, so rates come from the
median per-step time, and step/floor is also given from process CPU time (all threads).
The Pushers run in a separate (spawned) process, called in turn with the tabletop's rounds: in
one process, once Pusher-v5 (4096-pixel shadow map, 4x multisampling) had rendered at 128x128,
the tabletop's later rounds measured 2-5x slower per step than its first round while the
floor got no slower (main's code and the bit-identical trimmed code alike), so the 128x128
step/floor depended on the comparison env, not on the tabletop.
With Mesa's software rasteriser (llvmpipe), ``LP_NUM_THREADS=0`` draws on the calling thread:
then no rasteriser thread burns CPU outside the timed calls or waits to be scheduled inside
them, and the CPU ratio is the cleanest split of a step's cost (Pusher's 4096-pixel shadow pass
is slower that way, so take the Pusher ratios from a run with the default threads).

Targets: tabletop at most 1.5x the floor's time per step; at least 5x Pusher-v5's rate.

    python bench/tabletop_throughput.py [--steps 100] [--rounds 5] [--sizes 64 128] [--out bench/results/tabletop_throughput.txt]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import kosmos_env  # noqa: E402,F401
import kosmos_env.worlds.tabletop.world as world_module  # noqa: E402

from _report import load_average, save  # bench/_report.py: the script's folder is on sys.path


def random_actions(env, steps: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    low, high = env.action_space.low, env.action_space.high
    return rng.uniform(low, high, size=(steps, *low.shape)).astype(np.float32)


def make_pusher(size: int, lite: bool):
    """Pusher-v5 rendering rgb_array frames at ``size``; ``lite``: the tabletop's render settings."""
    env = gymnasium.make("Pusher-v5", render_mode="rgb_array", width=size, height=size)
    if lite:  # read when its render context is created, i.e. at the first render()
        env.unwrapped.model.vis.quality.shadowsize = 0
        env.unwrapped.model.vis.quality.offsamples = 0
    return env


def render_pusher(env) -> np.ndarray:
    """``env.render()`` with Pusher's own GL context current (see the module docstring)."""
    viewer = env.unwrapped.mujoco_renderer.viewer
    if viewer is not None:
        viewer.make_context_current()
    return env.render()


def pusher_times(env, actions: np.ndarray) -> np.ndarray:
    """Wall seconds of each of Pusher's step + render (warmed up with both, resets excluded)."""
    env.reset(seed=0)
    for a in actions[:10]:  # warm up with what is timed (context creation, first compile)
        _, _, terminated, truncated, _ = env.step(a)
        render_pusher(env)
        if terminated or truncated:
            env.reset()
    env.reset(seed=0)
    times = np.empty(len(actions))
    for i, a in enumerate(actions):
        start = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(a)
        frame = render_pusher(env)
        times[i] = time.perf_counter() - start
        if terminated or truncated:
            env.reset()
    # a frame drawn with another env's GL context comes out black: never time that by mistake
    if not frame.any():
        raise RuntimeError("Pusher-v5 rendered a black frame: its GL context was not current")
    return times


_PUSHERS: dict[tuple[int, bool], object] = {}  # in the Pusher process: (size, lite) -> env


def pusher_round(size: int, lite: bool, steps: int) -> np.ndarray:
    """One round of Pusher step + render times, run in the Pusher process (envs kept between rounds)."""
    if (size, lite) not in _PUSHERS:
        _PUSHERS[(size, lite)] = make_pusher(size, lite)
    env = _PUSHERS[(size, lite)]
    return pusher_times(env, random_actions(env, steps))


def close_pushers() -> None:
    for env in _PUSHERS.values():
        env.close()
    _PUSHERS.clear()


class _Timed:
    """Accumulates the wall and process-CPU seconds spent inside wrapped callables while ``active``."""

    def __init__(self):
        self.seconds = 0.0
        self.cpu = 0.0
        self.active = False

    def wrap(self, fn):
        def timed(*args, **kwargs):
            if not self.active:
                return fn(*args, **kwargs)
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.cpu += time.process_time() - start_cpu

        return timed


class _MujocoWithTimedStep:
    """The mujoco module as the tabletop world sees it, with ``mj_step`` timed."""

    def __init__(self, timer: _Timed):
        self.mj_step = timer.wrap(mujoco.mj_step)

    def __getattr__(self, name):
        return getattr(mujoco, name)


def tabletop_times(env, actions: np.ndarray) -> dict[str, np.ndarray]:
    """Per-step seconds of the env step, the world step and the floor, all from one run.

    The world step is the world's own ``step`` (control, physics, render, robot log) without
    the env around it (action checks, the action-consistency gate, episode bookkeeping).

    The floor is the time the same step spent inside its own ``mj_step`` calls plus the
    renderer's ``update_scene`` and ``render``: the physics and the frame a step cannot avoid.
    Wall seconds per step (``step``, ``world``, ``floor``) and process CPU seconds (all threads,
    so the software rasteriser's too: ``step_cpu``, ``floor_cpu``). Resets are excluded.
    """
    floor, world_time = _Timed(), _Timed()
    world = env.unwrapped.world
    env.reset(seed=0)  # builds the scene and its renderer
    for a in actions[:10]:  # warm up (context creation, first compile)
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:  # the gate may end an episode of random actions early
            env.reset()
    renderer = world.renderer
    renderer.update_scene = floor.wrap(type(renderer).update_scene.__get__(renderer))
    renderer.render = floor.wrap(type(renderer).render.__get__(renderer))
    saved = world_module.mujoco
    world_module.mujoco = _MujocoWithTimedStep(floor)
    world.step = world_time.wrap(type(world).step.__get__(world))
    out = {k: np.empty(len(actions)) for k in ("step", "world", "floor", "step_cpu", "floor_cpu")}
    try:
        env.reset(seed=0)
        for i, a in enumerate(actions):
            f0, fc0, w0 = floor.seconds, floor.cpu, world_time.seconds
            floor.active = world_time.active = True
            start, start_cpu = time.perf_counter(), time.process_time()
            _, _, terminated, truncated, _ = env.step(a)
            out["step"][i] = time.perf_counter() - start
            out["step_cpu"][i] = time.process_time() - start_cpu
            floor.active = world_time.active = False
            out["world"][i] = world_time.seconds - w0
            out["floor"][i] = floor.seconds - f0
            out["floor_cpu"][i] = floor.cpu - fc0
            if terminated or truncated:
                env.reset()
    finally:
        world_module.mujoco = saved
        del renderer.update_scene, renderer.render, world.step
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="timed steps per env per round (same for all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1 or min(args.sizes) < 8:
        parser.error("--steps and --rounds must be >= 1 and --sizes >= 8")
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}, "
        f"mujoco {mujoco.__version__}, gymnasium {gymnasium.__version__}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}, "
        f"LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS')}",
        f"load average before: {load_average()}",
        f"{args.rounds} interleaved rounds of {args.steps} steps per env (tabletop, Pusher-v5, Pusher lite; the Pushers "
        "in a process of their own); "
        "rates from median per-step wall times over all rounds",
        f"{'size':>9} {'tabletop/s':>11} {'world/s':>9} {'floor/s':>9} {'Pusher-v5/s':>12} {'lite/s':>8} "
        f"{'step/floor':>11} {'world/floor':>12} {'step/floor cpu':>15} {'tabletop/Pusher':>16} {'tabletop/lite':>14}",
    ]
    rounds_text: list[str] = []
    # the Pushers' GL contexts live in their own process (see the module docstring)
    pusher_pool = multiprocessing.get_context("spawn").Pool(1)
    for size in args.sizes:
        tabletop = gymnasium.make("Kosmos-Tabletop-v1", image_size=(size, size))
        pushers = {"pusher": False, "lite": True}  # name -> lite, measured in the Pusher process
        t_actions = random_actions(tabletop, args.steps)
        rounds: list[dict[str, np.ndarray]] = []
        for _ in range(args.rounds):
            timed = tabletop_times(tabletop, t_actions)
            for name, lite in pushers.items():
                timed[name] = pusher_pool.apply(pusher_round, (size, lite, args.steps))
            rounds.append(timed)
        tabletop.close()
        pusher_pool.apply(close_pushers)
        pooled = {k: np.concatenate([r[k] for r in rounds]) for k in rounds[0]}
        med = {k: float(np.median(v)) for k, v in pooled.items()}
        cpu_ratio = pooled["step_cpu"].sum() / pooled["floor_cpu"].sum()
        lines.append(
            f"{size:>4}x{size:<4} {1 / med['step']:>11.1f} {1 / med['world']:>9.1f} {1 / med['floor']:>9.1f} "
            f"{1 / med['pusher']:>12.1f} {1 / med['lite']:>8.1f} {med['step'] / med['floor']:>10.2f}x "
            f"{med['world'] / med['floor']:>11.2f}x {cpu_ratio:>14.2f}x "
            f"{med['pusher'] / med['step']:>15.2f}x {med['lite'] / med['step']:>13.2f}x"
        )

        def per_round(num: str, den: str, fmt: str) -> str:
            return ", ".join(format(np.median(r[num]) / np.median(r[den]), fmt) + "x" for r in rounds)

        rounds_text.append(
            f"{size}x{size} per round: step/floor {per_round('step', 'floor', '.2f')}; "
            f"world/floor {per_round('world', 'floor', '.2f')}; "
            f"tabletop/Pusher {per_round('pusher', 'step', '.1f')}; "
            f"tabletop/lite {per_round('lite', 'step', '.2f')}"
        )
    pusher_pool.close()
    pusher_pool.join()
    lines.extend(rounds_text)
    lines.append(f"load average after: {load_average()}")
    lines.append("step/floor and world/floor: median env step or world step time over the median time its own")
    lines.append("mj_step + render took; step/floor cpu: the same from process CPU seconds (all threads), which")
    lines.append("load on the machine disturbs less. Targets: step/floor <= 1.5x; tabletop/Pusher >= 5x.")
    lines.append("The env step adds the action-consistency gate; the world step is the simulator alone.")
    text = "\n".join(lines)
    print(text)
    save(text, args.out)


if __name__ == "__main__":
    main()
