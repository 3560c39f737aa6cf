"""PPO (Stable-Baselines3) inside the learned tabletop world, with the frame judge's progress reward.

pip install -e ".[rl]" && MUJOCO_GL=egl python examples/train_sb3.py

Success is counted at the horizon in training as in evaluation: the episode runs all its steps
(no ``terminate_on_success``), and with potential-based shaping its return is the frame judge's
P(success) on the last frame minus on the first.
"""

import gymnasium
import torch
from stable_baselines3 import PPO

import kosmos_env  # noqa: F401  (registers the env ids)
from kosmos_env.wrappers import wrap_rl_env

torch.set_num_threads(1)  # small networks on a busy CPU: more threads only wait on one another

reward = {"mode": "progress", "step_judge": {"type": "vision_frame"}}  # P(success) of each new frame
env = gymnasium.make("Kosmos-TabletopLearned-v1", reward=reward, task="carrot_on_plate")
env = wrap_rl_env(env)  # Dict of Boxes: image (64, 64, 3) uint8, state (7,), task one-hot; actions in [-1, 1]
print("spec hash:", env.unwrapped.spec_hash)  # the reward settings are part of it

model = PPO("MultiInputPolicy", env, n_steps=128, batch_size=64, seed=0, verbose=1)
model.learn(total_timesteps=1_000)
model.save("sb3_carrot.zip")  # evaluate it: kosmos-env eval --policy sb3:path=sb3_carrot.zip ...

obs, info = env.reset(seed=330000)
for _ in range(40):
    action, _ = model.predict(obs, deterministic=True)
    obs, reward, terminated, truncated, info = env.step(action)
    if terminated or truncated:
        break
print("outcome:", info["outcome"], "progress:", round(info["progress"], 2))
