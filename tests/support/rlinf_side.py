"""Runs inside the RLinf environment (scripts/build_rlinf_venv.sh) as the entry script of
``python -m kosmos_env.rlinf_launch``, never in the main one: a few RLinf PPO/GRPO updates on a
Kosmos env on the CPU, for tests/test_rlinf_run.py.

RLinf 0.3.0's rollout and FSDP actor workers need an accelerator (they ask ``torch_platform`` for
the current device, which is None on a CPU-only node), its env workers do not (RLinf runs them on
CPU nodes beside robots). So this runs what a CPU can of a real RLinf run:

- RLinf's ``validate_cfg`` on the example config (the driver-side ``kosmos`` registration),
  its ``Cluster`` (Ray) and placement, and its ``EnvWorker`` group launched as Ray actors in their
  own processes: each worker registers ``kosmos`` itself through ``RLINF_EXT_MODULE``, builds
  ``KosmosRLinfEnv`` with RLinf's ``get_env_cls`` and steps it with ``env_interact_step``
  (``prepare_actions`` included);
- in this process, the rollout and actor roles: RLinf's ``mlp_policy`` from ``rlinf.models.get_model``
  predicts the action chunks, the chunk results go through RLinf's ``EmbodiedRolloutResult``,
  ``convert_trajectories_to_batch`` and the actor's own batch reshaping, advantages come from
  ``calculate_adv_and_returns`` and the loss from ``policy_loss``, exactly as the FSDP actor calls
  them; the optimizer step is plain Adam (FSDP wraps the same module on GPUs).

Writes a JSON summary to ``--out`` that the test checks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--updates", type=int, default=2)
    parser.add_argument(
        "--env-workers", type=int, default=0, help="N > 0: N env worker processes on node 0 (a CPU node's placement)"
    )
    parser.add_argument("overrides", nargs="*", help="dotted config overrides, as Hydra's")
    args = parser.parse_args(argv)

    import torch
    from omegaconf import OmegaConf, open_dict

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = OmegaConf.load(args.config)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(args.overrides))
    if args.env_workers > 0:
        # on nodes without accelerators RLinf's resource ranks are node ranks: "0:0-1" is two
        # processes on node 0 (the GPU placement of the example config shares GPU 0)
        with open_dict(cfg):
            cfg.cluster.component_placement = {"actor,rollout": "0", "env": f"0:0-{args.env_workers - 1}"}

    from rlinf.algorithms.registry import calculate_adv_and_returns, policy_loss
    from rlinf.config import validate_cfg
    from rlinf.data.embodied_io_struct import ChunkStepResult, EmbodiedRolloutResult, convert_trajectories_to_batch
    from rlinf.models import get_model
    from rlinf.scheduler import Cluster
    from rlinf.utils.placement import HybridComponentPlacement
    from rlinf.workers.actor.fsdp_actor_worker import process_nested_dict_for_adv, process_nested_dict_for_train
    from rlinf.workers.env.env_worker import EnvWorker

    started = time.monotonic()
    cfg = validate_cfg(cfg)  # refuses an unknown env_type: passes only with the driver's registration
    cluster = Cluster()
    placement = HybridComponentPlacement(cfg, cluster)
    env_group = EnvWorker.create_group(cfg).launch(
        cluster, name=cfg.env.group_name, placement_strategy=placement.get_strategy("env")
    )
    env_group.init_worker().wait()
    n_workers = placement.get_world_size("env")
    n_chunk_steps = cfg.env.train.max_steps_per_rollout_epoch // cfg.actor.model.num_action_chunks
    alg = cfg.algorithm

    policy = get_model(cfg.actor.model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.actor.optim.lr)
    first_params = torch.cat([p.detach().flatten().clone() for p in policy.parameters()])

    def act(obs):
        return policy.predict_action_batch(env_obs=obs, mode="train", return_obs=True)

    summary: dict = {"env_workers": n_workers, "updates": []}
    for update in range(args.updates):
        results = [EmbodiedRolloutResult(max_episode_length=cfg.env.train.max_episode_steps) for _ in range(n_workers)]
        env_outputs = [stages[0] for stages in env_group.bootstrap_step().wait()]
        if update == 0:  # what the workers' envs answer: Kosmos instructions and 7-d states
            summary["task_descriptions"] = [list(o.obs["task_descriptions"]) for o in env_outputs]
            summary["states_shape"] = [list(o.obs["states"].shape) for o in env_outputs]
            summary["images_shape"] = [list(o.obs["main_images"].shape) for o in env_outputs]
        rewards_seen, dones_seen, env_infos = [], [], []
        for _ in range(n_chunk_steps):
            for rank in range(n_workers):
                out = env_outputs[rank]
                chunk_actions, res = act(out.obs)
                # as the rollout worker does: the value of a truncated episode's last frame, which
                # the env worker's compute_bootstrap_rewards adds to that step's reward
                bootstrap = None if out.final_obs is None else act(out.final_obs)[1]["prev_values"][:, :1]
                rewards = env_group.execute_on(rank).compute_bootstrap_rewards(out, bootstrap, None).wait()[0]
                results[rank].append_step_result(
                    ChunkStepResult(
                        actions=res["forward_inputs"]["action"],
                        prev_logprobs=res["prev_logprobs"],
                        prev_values=res["prev_values"],
                        forward_inputs=res["forward_inputs"],
                        dones=out.dones,
                        truncations=out.truncations,
                        terminations=out.terminations,
                        rewards=rewards,
                    )
                )
                new_out, env_info = env_group.execute_on(rank).env_interact_step(chunk_actions, 0).wait()[0]
                rewards_seen.append(new_out.rewards)
                dones_seen.append(new_out.dones)
                if env_info:
                    env_infos.append({k: v.tolist() for k, v in env_info.items()})
                env_outputs[rank] = new_out
        for rank in range(n_workers):  # the values after the last chunk close the GAE recursion
            out = env_outputs[rank]
            _, res = act(out.obs)
            bootstrap = None if out.final_obs is None else act(out.final_obs)[1]["prev_values"][:, :1]
            results[rank].append_step_result(
                ChunkStepResult(
                    prev_values=res["prev_values"],
                    dones=out.dones,
                    truncations=out.truncations,
                    terminations=out.terminations,
                    rewards=env_group.execute_on(rank).compute_bootstrap_rewards(out, bootstrap, None).wait()[0],
                )
            )
            # as EnvWorker.interact ends a rollout: the next one starts from these observations
            env_group.execute_on(rank).store_last_obs_and_intervened_info([out]).wait()

        trajectories = [t for r in results for t in r.to_splited_trajectories(1)]
        batch = process_nested_dict_for_adv(convert_trajectories_to_batch(trajectories), cfg.env.train.rollout_epoch)
        batch.update(
            calculate_adv_and_returns(
                task_type=cfg.runner.task_type,
                adv_type=alg.adv_type,
                rewards=batch["rewards"],
                dones=batch["dones"],
                values=batch.get("prev_values", None),
                gamma=alg.get("gamma", 1),
                gae_lambda=alg.get("gae_lambda", 1),
                group_size=alg.get("group_size", 8),
                reward_type=alg.reward_type,
                loss_mask=None,
                loss_mask_sum=None,
                normalize_advantages=alg.get("normalize_advantages", True),
            )
        )
        size = batch["prev_logprobs"].shape[0] * batch["prev_logprobs"].shape[1]
        shuffle = torch.randperm(size, generator=torch.Generator().manual_seed(cfg.actor.seed + update))
        train = process_nested_dict_for_train(batch, shuffle)

        losses = []
        for _ in range(alg.get("update_epoch", 1)):
            output = policy(
                forward_inputs=train["forward_inputs"],
                compute_logprobs=True,
                compute_entropy=False,
                compute_values=alg.adv_type == "gae",
            )
            loss, metrics = policy_loss(
                loss_type=alg.loss_type,
                logprob_type=alg.logprob_type,
                reward_type=alg.reward_type,
                single_action_dim=cfg.actor.model.action_dim,
                logprobs=output["logprobs"],
                values=output.get("values", None),
                old_logprobs=train["prev_logprobs"],
                advantages=train["advantages"],
                returns=train.get("returns", None),
                prev_values=train.get("prev_values", None),
                clip_ratio_high=alg.clip_ratio_high,
                clip_ratio_low=alg.clip_ratio_low,
                value_clip=alg.get("value_clip", None),
                huber_delta=alg.get("huber_delta", None),
                loss_mask=None,
                loss_mask_sum=None,
                max_episode_steps=cfg.env.train.max_episode_steps,
                task_type=cfg.runner.task_type,
                critic_warmup=False,
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.actor.optim.clip_grad)
            optimizer.step()
            losses.append(float(loss.detach()))

        rewards = torch.cat(rewards_seen)
        summary["updates"].append(
            {
                "chunk_steps": n_chunk_steps,
                "rewards_shape": list(batch["rewards"].shape),
                "advantages_shape": list(batch["advantages"].shape),
                "reward_chunk_shape": list(rewards_seen[0].shape),
                "reward_sum": float(rewards.sum()),
                "reward_nonzero": int((rewards != 0).sum()),
                "episodes_ended": int(torch.cat(dones_seen)[:, -1].sum()),
                "env_infos": env_infos,
                "losses": losses,
                "metrics": {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))},
            }
        )

    last_params = torch.cat([p.detach().flatten() for p in policy.parameters()])
    summary["param_change"] = float((last_params - first_params).abs().max())
    summary["wall_s"] = round(time.monotonic() - started, 1)
    with open(args.out, "w") as fh:
        json.dump(summary, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
