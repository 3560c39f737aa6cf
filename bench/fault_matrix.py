"""The fault matrix of issue 31: every attack an attacker or a careless user tried, what should
happen, and whether it held today, each row decided by the test that reproduces the attack.

    python bench/fault_matrix.py            # runs every row's test, prints the matrix
    python bench/fault_matrix.py --markdown bench/results/fault_matrix/README.md

A row "held" only if its test ran and passed on this checkout; a row with no test says so (it is
not claimed). Each test builds the attack itself (a forged ledger, a NaN lease, an alias bomb, an
evil checkpoint ...) and asserts the refusal or the correct result, so the matrix cannot pass by
construction.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (attack, expected, test node ids or None when no test exists)
ROWS = [
    (
        "serve-policy shared by eval --workers 2: episodes share one policy state",
        "per-session state: N workers = 1 worker",
        [
            "tests/policies/test_server_sessions.py::test_two_workers_through_one_server_score_as_one_worker_and_in_process",
            "tests/policies/test_server_sessions.py::test_interleaved_episodes_keep_their_own_state",
        ],
    ),
    (
        "protocol asks openvla to hash a checkpoint (register builds the model to hash it)",
        "hash from files: no weights loaded, no checkpoint code run",
        ["tests/test_no_code_from_data.py"],
    ),
    (
        "ledger episode of `random` forged to success, outcome/score/judgment/truth edited to match",
        "verify re-runs the judges on the stored log: mismatch, non-zero exit",
        ["tests/campaign/test_verify_rederive.py::test_a_consistent_ledger_forgery_is_caught_by_its_own_robot_log"],
    ),
    (
        "stored robot log forged to match the forged verdict",
        "verify --replay: stored actions do not replay",
        ["tests/campaign/test_verify_rederive.py::test_a_forged_log_is_caught_by_replaying_the_stored_actions"],
    ),
    (
        "two episodes' artifact references swapped",
        "replay / policy re-run catches it",
        [
            "tests/campaign/test_verify_rederive.py::test_swapped_artifact_references_do_not_replay",
            "tests/campaign/test_verify_rederive.py::test_swapped_artifacts_are_caught_by_the_replay_and_by_rerunning_the_policy",
        ],
    ),
    (
        "env_id / world / judge edited in results.json with the manifest recomputed",
        "verify refuses",
        ["tests/campaign/test_verify_rederive.py::test_editing_env_world_or_judge_in_results_json_is_caught"],
    ),
    (
        "leaderboard: random at 100 % from the same actions, every hash recomputed",
        "not listed",
        [
            "tests/publish/test_leaderboard_rederive.py::test_random_forged_to_100_percent_with_every_hash_recomputed_is_refused"
        ],
    ),
    (
        "leaderboard: submission with every artifact removed",
        "refused with the reason",
        [
            "tests/publish/test_leaderboard_rederive.py::test_a_submission_without_its_artifacts_is_refused_with_the_reason"
        ],
    ),
    (
        "leaderboard: resubmission with a new id and one self-declared hash changed",
        "a duplicate by content",
        ["tests/publish/test_leaderboard_rederive.py::test_a_relabelled_resubmission_is_a_duplicate_by_content"],
    ),
    (
        "protocol naming openvla:...,trust_remote_code=true (register builds the policy)",
        "refused in one line; the checkpoint's code never runs",
        ["tests/test_remote_code_permission.py::test_a_protocol_asking_for_remote_code_is_refused_and_runs_nothing"],
    ),
    (
        "judge spec with trust_remote_code: true",
        "refused before any episode; no code runs",
        [
            "tests/test_remote_code_permission.py::test_a_judge_spec_asking_for_remote_code_is_refused_before_any_episode"
        ],
    ),
    (
        "--lease-seconds nan (stored as NULL, every later claim a TypeError)",
        "one line; a stored NULL lease is taken over and repaired",
        ["tests/test_bad_numbers.py::test_nan_lease_is_refused_and_a_stored_null_lease_is_repaired"],
    ),
    (
        "--env ../path reads a spec outside the registry; horizon 1e12; --seeds 1e9",
        "one line each, nothing created",
        ["tests/test_bad_numbers.py::test_env_ids_are_names_not_paths_and_sizes_are_bounded"],
    ),
    (
        "9x9 YAML alias bomb hangs register",
        "refused at once, one line",
        ["tests/test_bad_numbers.py::test_a_yaml_alias_bomb_is_refused_at_once"],
    ),
    (
        '--judge \'{"type":"state","bogus":1}\' ends in a traceback',
        "one line naming the setting",
        ["tests/test_bad_numbers.py::test_unknown_judge_settings_are_named"],
    ),
    (
        "corrupt vision-judge weights found after three attempts, blamed on the policy",
        "checked before the first episode, named as the judge's",
        ["tests/test_bad_numbers.py::test_corrupt_judge_weights_stop_the_campaign_before_any_episode_naming_the_judge"],
    ),
    (
        "verify on a read-only copy calls a valid ledger corrupt",
        "verifies read-only",
        ["tests/campaign/test_verify_rederive.py::test_verify_never_writes_and_a_read_only_copy_verifies"],
    ),
    (
        "a ledger failing PRAGMA integrity_check passes",
        "verify fails",
        ["tests/campaign/test_verify_rederive.py::test_a_ledger_failing_sqlites_integrity_check_fails_verify"],
    ),
    (
        "zero or negative physics_dt, negative camera fovy",
        "refused in one line",
        ["tests/test_bad_numbers.py::test_meaningless_tabletop_physics_and_camera_are_refused"],
    ),
    (
        "a task-suite path outside the package",
        "refused",
        ["tests/test_bad_numbers.py::test_a_task_suite_is_a_name_not_a_path"],
    ),
    ("a NaN price table", "refused", ["tests/test_bad_numbers.py::test_a_nan_price_is_refused"]),
    (
        "serve on a missing folder",
        "one line",
        ["tests/test_bad_numbers.py::test_serve_on_a_missing_folder_is_one_line"],
    ),
    (
        "huge integers in console URLs give HTTP 500",
        "4xx",
        ["tests/test_bad_numbers.py::test_console_url_integers_beyond_64_bits_are_4xx"],
    ),
    (
        "a list-typed dtype makes the policy server drop the connection",
        "a clear error status",
        ["tests/policies/test_server_sessions.py::test_list_typed_dtype_gets_a_400_not_a_dropped_connection"],
    ),
    (
        "Ray dashboard and runtime-env agents outlive a SIGKILLed parent for 30-90 s",
        "the head dies with the campaign",
        ["tests/campaign/test_ray_head_cleanup.py::test_sigkilled_campaign_takes_its_ray_head_down"],
    ),
]


def run_row(tests: list[str]) -> tuple[str, float]:
    missing = [t for t in tests if not (ROOT / t.split("::")[0]).is_file()]
    if missing:
        return f"no test ({missing[0].split('::')[0]} absent)", 0.0
    t0 = time.perf_counter()
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t0
    tail = (proc.stdout.strip().splitlines() or ["?"])[-1]
    return ("held" if proc.returncode == 0 else f"FAILED ({tail})"), seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", default=None, help="also write the matrix as Markdown to this file")
    args = ap.parse_args()
    lines = ["| attack | expected | observed | test |", "|---|---|---|---|"]
    held = 0
    for attack, expected, tests in ROWS:
        observed, seconds = ("not done: no test", 0.0) if tests is None else run_row(tests)
        held += observed == "held"
        where = "—" if tests is None else "<br>".join(f"`{t}`" for t in tests)
        lines.append(f"| {attack} | {expected} | {observed} | {where} |")
        print(f"[{observed.split(' ')[0]:>6}] {attack} ({seconds:.0f} s)", flush=True)
    summary = f"{held} of {len(ROWS)} attacks held on this checkout."
    print(summary)
    if args.markdown:
        out = Path(args.markdown)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            "# Fault matrix (issue 31)\n\nCommand: `python bench/fault_matrix.py --markdown "
            f"{args.markdown}`\n\n" + "\n".join(lines) + f"\n\n{summary}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
