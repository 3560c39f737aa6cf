"""Hand-built robot logs (end-effector path, gripper command and measured opening) for the judge
tests: a builder that appends control steps, an approach, and a whole pick-and-place."""

from __future__ import annotations

import numpy as np

OBJ = 0.3  # measured opening when the fingers close on the object


class LogBuilder:
    """Append control steps: move the end effector and command / measure the gripper."""

    def __init__(self, start=(0.3, 0.0, 0.15)):
        self.ee = [np.array(start, float)]
        self.cmd = [1.0]
        self.meas = [1.0]

    def step(self, n=1, d=(0.0, 0.0, 0.0), cmd=None, meas=None):
        for _ in range(n):
            self.ee.append(self.ee[-1] + np.asarray(d, float))
            self.cmd.append(self.cmd[-1] if cmd is None else cmd)
            self.meas.append(self.meas[-1] if meas is None else meas)
        return self

    def close_on(self, width):
        # fingers take two steps to close, then settle on the object (or fully)
        self.step(cmd=0.0, meas=(1 + width) / 2)
        return self.step(n=3, meas=width)

    def open(self):
        return self.step(cmd=1.0, meas=0.7).step(n=2, meas=1.0)

    def log(self):
        return {"ee_pos": np.stack(self.ee), "gripper_cmd": np.array(self.cmd), "gripper_measured": np.array(self.meas)}


def approach(b):
    return b.step(n=5, d=(0.0, 0.0, -0.02))


def pick_and_place():
    b = approach(LogBuilder()).close_on(OBJ)
    b.step(n=3, d=(0, 0, 0.02)).step(n=4, d=(0.03, 0, 0)).open()
    return b.log()
