"""Write the policy-pool manifest of Kosmos-TabletopLearned-v2 (issue 41): which policies' simulator
rollouts train the world, and which are held out for ranking it.

    python bench/world_v2_pools.py            # writes bench/results/world_v2/policy_pools.json

The rule is by TRAINING LINEAGE, the network a checkpoint descends from:

- every image-conditioned checkpoint of rounds 2 and 3 and of the recipe pilots descends from one
  of three behaviour clones (``bench/results/train_in_world/registered/start_seed{0,1,2}``: BC
  seeds 0, 1, 2 on the same demonstrations). Everything descending from clone 2 trains the world;
  everything descending from clones 0 and 1 is held out;
- round 1 (``bench/results/train_in_world/arm_*``, its clone ``start_bc``, and the weak clone
  ``bc_clone_2000``: other demonstrations, scripted at skill 0.8) is held out whole. It holds the
  seven checkpoints of the earlier study's closed-loop subgroup, on which the frame judge ranked at
  Kendall 0.92 on simulator frames and 0.21 on v1's frames (issue 41): v2 must be measured there
  without having seen them;
- scripted and random policies: v1's mix trains the world; scripted at other skills and the
  deceptive policies are held out.

Identity is by weights, not by path: several pilot checkpoints ARE the registered checkpoints
(the same tensors, byte for byte; PPO with one torch thread is deterministic given its seeds), so
every file is hashed (:func:`kosmos_env.training.world_data.weights_digest`) and identical files
are one entry with ``aliases``. World-pool files that git ignores (the pilots') are copied to
``bench/results/world_v2/checkpoints/`` and committed; held-out pilot files are named with the
command that regenerates them.

``tuning_success``: true success at step 40 (simulator, deterministic policy) on 100 TUNING units
``325000 + 1000*task + [0, 25)``, read from the pilots' ``pilot.json`` where they measured it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIW = "bench/results/train_in_world"
PILOTS = "bench/results/train_recipe/pilots"
OUT = "bench/results/world_v2"
COPIES = f"{OUT}/checkpoints"
UPDATES = (12, 24, 36, 48)
LONG_UPDATES = (60, 72, 84, 96)
TUNING_UNITS = "325000 + 1000*task + [0, 25) (100 units)"

#: pilot name -> (flags of bench/train_recipe_pilot.py, recipe in words)
PILOT_RECIPES = {
    "clip01_long": (
        "--n-envs 8 --n-steps 128 --init-log-std -1.6 --critic-warmup 2 --clip-range 0.1 --ppo-steps 98304 "
        "--checkpoint-every 12",
        "PPO, oracle reward, clip 0.1, 8 envs x 128 steps (round 3's recipe), run on to 98,304 steps",
    ),
    "kl02_r2048": (
        "--n-envs 8 --n-steps 256 --init-log-std -1.6 --critic-warmup 2 --target-kl 0.02 --ppo-steps 49152",
        "PPO, oracle reward, clip 0.2, 8 envs x 256 steps, KL stop 0.02",
    ),
    "lr1e4": (
        "--n-envs 8 --n-steps 128 --init-log-std -1.6 --critic-warmup 2 --lr 1e-4 --ppo-steps 49152",
        "PPO, oracle reward, clip 0.2, lr 1e-4",
    ),
    "s10_d100_ppo_std_cw2": (
        "--critic-warmup 2 --ppo-steps 49152",
        "PPO, oracle reward, clip 0.2, 4 envs x 256 steps, init log-std -2.3",
    ),
}
R2 = "PPO, oracle reward, clip 0.2, 8 envs x 128 steps (round 2's registered recipe)"
R3 = "PPO, oracle reward, clip 0.1, 8 envs x 128 steps (round 3's registered recipe)"


def sh(*args: str) -> str:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout


def tracked(path: str) -> bool:
    return bool(sh("git", "ls-files", "--", path).strip())


def pilot_success(pilot: str, ckpt: str) -> dict | None:
    f = ROOT / PILOTS / pilot / "pilot.json"
    if not f.is_file():
        return None
    row = json.loads(f.read_text())["checkpoints"].get(ckpt)
    if row is None:
        return None
    return {"rate": row["success"], "units": row["n"], "seeds": TUNING_UNITS, "source": f"{PILOTS}/{pilot}/pilot.json"}


def main() -> int:
    from kosmos_env.hashing import sha256_file
    from kosmos_env.policies.checkpoint import read_checkpoint_meta
    from kosmos_env.training.world_data import pool_overlaps, weights_digest

    # (name, pool, lineage, group, recipe, paths of every copy (first: the spec's), tuning (pilot, ckpt) or None,
    #  regenerate command for an ignored file)
    rows: list[tuple] = []

    def clone(k: int, pool: str) -> None:
        rows.append(
            (
                f"bc_seed{k}",
                pool,
                f"clone{k}",
                "closed_loop",
                f"behaviour clone, BC seed {k}: scripted:skill=1.0 demonstrations 300000 + [0, 100) per task, 6000 steps",
                [f"{TIW}/registered/start_seed{k}.safetensors", f"{TIW}/round3/start_seed{k}.safetensors"],
                ("clip01_s%d" % k, "start"),
                None,
            )
        )

    for k, pool in ((0, "heldout"), (1, "heldout"), (2, "world")):
        clone(k, pool)
        for u in UPDATES:
            reg_pilot = "s10_d100_ppo_e8_ls16_cw2" if k == 0 else f"reg_s{k}"
            rows.append(
                (
                    f"oracle_clip02_s{k}_u{u}",
                    pool,
                    f"clone{k}",
                    "closed_loop",
                    R2,
                    [
                        f"{TIW}/registered/arm_D/seed_{k}/ppo_update_{u:04d}.safetensors",
                        f"{PILOTS}/{reg_pilot}/ppo/ppo_update_{u:04d}.safetensors",
                    ],
                    (reg_pilot, f"ppo_update_{u:04d}.safetensors"),
                    None,
                )
            )
        for u in UPDATES + LONG_UPDATES:
            paths = [f"{PILOTS}/clip01_long_s{k}/ppo/ppo_update_{u:04d}.safetensors"]
            if u <= 48:
                paths = [
                    f"{TIW}/round3/arm_D/seed_{k}/ppo_update_{u:04d}.safetensors",
                    f"{PILOTS}/clip01_s{k}/ppo/ppo_update_{u:04d}.safetensors",
                    *paths,
                ]
            rows.append(
                (
                    f"oracle_clip01_s{k}_u{u}",
                    pool,
                    f"clone{k}",
                    "closed_loop",
                    R3 if u <= 48 else PILOT_RECIPES["clip01_long"][1],
                    paths,
                    (f"clip01_long_s{k}", f"ppo_update_{u:04d}.safetensors"),
                    f"python bench/train_recipe_pilot.py --name clip01_long_s{k} --bc-seed {k} --seed {k} "
                    + PILOT_RECIPES["clip01_long"][0],
                )
            )
        for pilot, updates in (("kl02_r2048", (12, 24)), ("lr1e4", UPDATES)):
            for u in updates:
                rows.append(
                    (
                        f"oracle_{pilot.split('_')[0]}_s{k}_u{u}",
                        pool,
                        f"clone{k}",
                        "closed_loop",
                        PILOT_RECIPES[pilot][1],
                        [f"{PILOTS}/{pilot}_s{k}/ppo/ppo_update_{u:04d}.safetensors"],
                        (f"{pilot}_s{k}", f"ppo_update_{u:04d}.safetensors"),
                        f"python bench/train_recipe_pilot.py --name {pilot}_s{k} --bc-seed {k} --seed {k} "
                        + PILOT_RECIPES[pilot][0],
                    )
                )
    for u in UPDATES:
        rows.append(
            (
                f"oracle_4env_s0_u{u}",
                "heldout",
                "clone0",
                "closed_loop",
                PILOT_RECIPES["s10_d100_ppo_std_cw2"][1],
                [f"{PILOTS}/s10_d100_ppo_std_cw2/ppo/ppo_update_{u:04d}.safetensors"],
                ("s10_d100_ppo_std_cw2", f"ppo_update_{u:04d}.safetensors"),
                "python bench/train_recipe_pilot.py --name s10_d100_ppo_std_cw2 "
                + PILOT_RECIPES["s10_d100_ppo_std_cw2"][0],
            )
        )
    # round 1: its own clone (scripted skill 0.8 demonstrations), all held out
    shipped = {
        "start_bc": "bc_clone_6000",
        "arm_A/ppo_update_0012": "sim_judge_ppo_3072",
        "arm_A/ppo_update_0036": "sim_judge_ppo_9216",
        "arm_B/ppo_update_0012": "world_judge_ppo_3072",
        "arm_B/ppo_update_0048": "world_judge_ppo_12288",
        "arm_D/ppo_update_0036": "sim_oracle_ppo_9216",
    }
    r1_recipe = "behaviour clone of scripted:skill=0.8 on 300000 + 1000*task + [0, 100), 6000 steps (round 1)"
    rows.append(
        (
            "r1_bc",
            "heldout",
            "round1",
            "closed_loop",
            r1_recipe,
            [f"{TIW}/start_bc.safetensors", "policies/checkpoints/bc_clone_6000.safetensors"],
            None,
            None,
        )
    )
    rows.append(
        (
            "r1_bc_2000",
            "heldout",
            "round1",
            "closed_loop",
            "round 1's demonstrations and BC recipe, 2000 steps (policies/checkpoints/manifest.json)",
            ["policies/checkpoints/bc_clone_2000.safetensors"],
            None,
            None,
        )
    )
    arms = {
        "A": "PPO in the simulator, frame-judge reward",
        "B": "PPO in Kosmos-TabletopLearned-v1, frame-judge reward, gate off",
        "C": "PPO in Kosmos-TabletopLearned-v1, frame-judge reward, gate on",
        "D": "PPO in the simulator, oracle reward",
    }
    for arm, words in arms.items():
        for u in UPDATES:
            key = f"arm_{arm}/ppo_update_{u:04d}"
            paths = [f"{TIW}/{key}.safetensors"]
            if key in shipped:
                paths.append(f"policies/checkpoints/{shipped[key]}.safetensors")
            rows.append((f"r1_{arm}_u{u}", "heldout", "round1", "closed_loop", f"{words} (round 1)", paths, None, None))

    pools: dict[str, list] = {"world": [], "heldout": []}
    digests: dict[str, tuple[str, dict]] = {}
    for name, pool, lineage, group, recipe, paths, tuning, regenerate in rows:
        present = [p for p in paths if (ROOT / p).is_file()]
        if not present:
            print(f"error: {name}: none of {paths} exists", file=sys.stderr)
            return 2
        digest = weights_digest(ROOT / present[0])
        for p in present[1:]:
            if weights_digest(ROOT / p) != digest:
                print(f"error: {name}: {p} holds other weights than {present[0]}", file=sys.stderr)
                return 2
        if digest in digests:
            first_pool, first = digests[digest]
            if first_pool != pool:
                print(
                    f"error: {name} ({pool}) and {first['name']} ({first_pool}) are the same network", file=sys.stderr
                )
                return 2
            # the same network trained twice (round 1's arm C equals arm B: its gate never fired): one entry
            first["aliases"] += [
                {"path": p, "sha256": sha256_file(ROOT / p), "committed": tracked(p), "also_named": name}
                for p in present
            ]
            continue
        spec_path = paths[0]
        if pool == "world" and not tracked(spec_path):
            # the world trains on it: commit a copy where git keeps it
            spec_path = f"{COPIES}/{name}.safetensors"
            (ROOT / COPIES).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / paths[0], ROOT / spec_path)
        meta = read_checkpoint_meta(ROOT / spec_path)
        entry = {
            "name": name,
            "spec": f"ckpt:path={spec_path}",
            "path": spec_path,
            "group": group,
            "lineage": lineage,
            "recipe": recipe,
            "stage": meta["stage"],
            "env_steps": int(meta["env_steps"]),
            "weights_digest": digest,
            "sha256": sha256_file(ROOT / spec_path),
            "committed": tracked(spec_path) or spec_path.startswith(COPIES),
            "aliases": [
                {"path": p, "sha256": sha256_file(ROOT / p), "committed": tracked(p)} for p in present if p != spec_path
            ],
        }
        if tuning:
            success = pilot_success(*tuning)
            if success:
                entry["tuning_success"] = success
        if regenerate and not entry["committed"]:
            entry["regenerate"] = regenerate + " (MUJOCO_GL=egl, one torch thread; deterministic given its seeds)"
        pools[pool].append(entry)
        digests[digest] = (pool, entry)

    world_scripted = ["scripted:skill=1.0", "scripted:skill=0.8", "scripted:skill=0.6"]
    world_scripted += ["scripted:skill=0.4", "scripted:skill=0.2", "scripted:skill=0.0", "random"]
    for spec in world_scripted:
        kind = "random" if spec == "random" else "scripted"
        pools["world"].append({"name": spec, "spec": spec, "group": "honest", "lineage": spec, "recipe": kind})
    for skill in ("0.9", "0.7", "0.5", "0.3", "0.1"):
        spec = f"scripted:skill={skill}"
        pools["heldout"].append({"name": spec, "spec": spec, "group": "honest", "lineage": spec, "recipe": "scripted"})
    for spec in (
        "deceptive:mode=grasp_miss,rate=0.7",
        "deceptive:mode=wrong_target,rate=0.5",
        "deceptive:mode=knock_away,rate=0.7",
    ):
        pools["heldout"].append(
            {"name": spec, "spec": spec, "group": "deceptive", "lineage": spec, "recipe": "scripted"}
        )

    manifest = {
        "about": (
            "Policy pools of Kosmos-TabletopLearned-v2 (issue 41), written by bench/world_v2_pools.py. 'world': "
            "the policies whose simulator rollouts (training seeds only) train the world; 'heldout': candidates "
            "for the population it is evaluated on. No policy, weights file (by tensor digest, aliases included) "
            "or training lineage is in both (tests/training/test_world_data.py checks it)."
        ),
        "status": (
            "proposed; the world pool is frozen by the commit that records v2's training data, and may not change "
            "after any v2 result is seen. Held-out candidates may be added (never moved into 'world') until the "
            "study's protocol is committed."
        ),
        "lineage_rule": (
            "Lineage = the behaviour clone a network descends from. Rounds 2 and 3 and the recipe pilots all start "
            "from registered/start_seed{0,1,2} (BC seeds 0, 1, 2 on the SAME demonstrations, scripted:skill=1.0 on "
            "300000 + [0, 100) per task): clone 2's descendants train the world, clones 0 and 1's are held out. "
            "Round 1 (its own clone, scripted:skill=0.8 demonstrations) is held out whole: it holds the earlier "
            "study's seven closed-loop checkpoints, where v1's frames lost the signal (Kendall 0.21 against 0.92 on "
            "simulator frames). Shared by both pools, and not removable with these checkpoints: the scripted "
            "demonstrator every clone imitates, the network architecture and PPO code. Scripted policies: v1's mix "
            "trains the world; other skills and the deceptive policies are held out (one hand-written controller: "
            "distinct skills are distinct policies, not distinct lineages)."
        ),
        "identity": (
            "Several files hold the same network (same tensors): s10_d100_ppo_e8_ls16_cw2 = round 2 arm D seed 0, "
            "reg_s1/reg_s2 = round 2 arm D seeds 1/2, clip01_s* and clip01_long_s* (to 49,152 steps) = round 3 arm D, "
            "and round 1's arm C = its arm B at every checkpoint (the gate never fired, so the two trainings were "
            "one). Each network is one entry; its other files are 'aliases'."
        ),
        "excluded": [
            {
                "what": "bench/results/train_in_world/round3/arm_{A,B,C}/seed_2",
                "why": "clone 2's lineage, still training when the world pool was fixed: in neither pool",
            }
        ],
        "pending_heldout": [
            {
                "what": "bench/results/train_in_world/round3/arm_{A,B,C}/seed_{0,1}/ppo_update_*.safetensors",
                "why": "clones 0 and 1's lineage, still training when this was written: held-out candidates once committed",
            }
        ],
        "to_train": [
            {
                "pool": "heldout",
                "what": "behaviour clones at graded demonstration budgets, fresh lineages (new demonstration seeds and "
                "BC seeds, used by nothing else), for the low end of the success range",
                "commands": [
                    f"kosmos-env train-policy --stage bc --demo-skill 1.0 --demo-seeds {n} --demo-seed-start 310000 "
                    f"--seed {10 + i} --out bench/results/world_v2/heldout_bc/d{n}"
                    for i, n in enumerate((5, 10, 25, 50, 200))
                ],
            }
        ],
        "tuning_units": TUNING_UNITS,
        "pools": pools,
    }
    overlaps = pool_overlaps(manifest)
    if overlaps:
        print(f"error: pools overlap: {overlaps[0]}", file=sys.stderr)
        return 2
    out = ROOT / OUT / "policy_pools.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=1) + "\n")
    for pool, entries in pools.items():
        rates = [e["tuning_success"]["rate"] for e in entries if "tuning_success" in e]
        span = f"tuning success {min(rates):.2f}-{max(rates):.2f} over {len(rates)} measured" if rates else ""
        print(
            f"{pool}: {len(entries)} policies ({sum(e['group'] == 'closed_loop' for e in entries)} closed-loop) {span}"
        )
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
