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
    (
        "verify: consistent forgery with re-hashed robot logs, bundle rebuilt",
        "plain verify (salted sample) catches it",
        ["tests/campaign/test_verify_sample.py::test_plain_verify_catches_a_forgery_with_rehashed_robot_logs"],
    ),
    (
        "verify: all evidence swapped between two policies (simulator)",
        "plain verify catches it",
        ["tests/campaign/test_verify_sample.py::test_plain_verify_catches_all_evidence_swapped_between_two_policies"],
    ),
    (
        "verify: forged episodes placed outside a predictable replay sample",
        "the sample is salted by the verifier, printed, and its escape chance printed",
        [
            "tests/campaign/test_verify_sample.py::test_the_salt_repeats_a_sample_and_other_salts_draw_others",
            "tests/campaign/test_verify_sample.py::test_verify_prints_the_escape_chances_of_its_sample",
        ],
    ),
    (
        "verify: evidence swapped between policies on the learned world",
        "verify --rerun catches it; plain verify says it is taken on trust and names --rerun",
        [
            "tests/campaign/test_verify_sample.py::test_rerun_on_the_learned_world_catches_evidence_swapped_between_policies"
        ],
    ),
    (
        "verify: price, cost, timing, worker and version fields rewritten, manifest re-hashed",
        "caught against the ledger; labelled self-reported",
        [
            "tests/campaign/test_verify_sample.py::test_results_cost_timing_worker_and_version_fields_are_checked_and_labelled_self_reported"
        ],
    ),
    (
        "verify --replay of a downloaded campaign contacts the remote URL in its ledger",
        "no connection without --allow-network",
        ["tests/campaign/test_verify_sample.py::test_verify_contacts_no_remote_policy_unless_allowed"],
    ),
    (
        "ckpt: file whose JSON asks for a 6e6-wide layer next to small tensors",
        "one line, no network built (shapes checked on the meta device)",
        [
            "tests/policies/test_checkpoint_bounds.py::test_a_6e6_wide_layer_is_refused_before_the_network_is_built",
            "tests/policies/test_checkpoint_bounds.py::test_a_network_over_the_parameter_budget_is_refused_from_its_shapes_alone",
        ],
    ),
    (
        "learned-world weights whose config asks for a huge layer",
        "refused from its shapes alone",
        [
            "tests/worlds/test_learned_weights_bounds.py::test_a_huge_layer_in_the_config_is_refused_from_its_shapes_alone"
        ],
    ),
    (
        "sb3: zip whose net_arch asks for widths its policy.pth lacks",
        "refused before SB3 builds the policy",
        [
            "tests/policies/test_sb3_policy.py::test_layer_widths_the_weights_do_not_have_are_refused_before_the_policy_is_built"
        ],
    ),
    (
        "train-policy --env ../specs/evil, --demo-seed-start -5, --threads 100000",
        "one line, exit 2",
        [
            "tests/commands/test_train_policy.py::test_bad_arguments_are_one_line_and_exit_2",
            "tests/commands/test_threads_flag.py::test_bad_threads_get_one_line_and_no_work",
        ],
    ),
    (
        "console CSV download with =HYPERLINK(...) / @SUM(...) cells",
        "text cells quoted, numbers untouched, parquet as stored",
        [
            "tests/console/test_downloads_and_read_only.py::test_policy_labels_that_are_formulas_download_as_text",
            "tests/console/test_downloads_and_read_only.py::test_only_text_that_a_spreadsheet_would_run_is_quoted",
        ],
    ),
    (
        "compare --judges on an edited stored verdict",
        "refused in one line (--no-verify to override)",
        [
            "tests/commands/test_compare.py::test_compare_judges_refuses_an_edited_verdict_and_says_how_to_compare_anyway"
        ],
    ),
    (
        "unknown or misspelt world key in a spec",
        "refused when the env is built, known keys listed",
        [
            "tests/worlds/test_world_settings.py::test_gymnasium_make_refuses_an_unknown_world_key_as_it_refuses_an_unknown_gate_key"
        ],
    ),
    (
        "eval resuming a corrupt ledger",
        "one line naming the file and what to do",
        [
            "tests/campaign/test_corrupt_ledger.py::test_a_file_that_is_not_a_database_is_one_line",
            "tests/campaign/test_corrupt_ledger.py::test_a_damaged_page_past_the_header_is_one_line",
        ],
    ),
    (
        "console on a valid campaign on a read-only mount",
        "served, nothing written",
        ["tests/console/test_downloads_and_read_only.py::test_a_campaign_on_a_read_only_mount_is_served"],
    ),
    (
        "leaderboard: random filed with scripted:skill=1.0's evidence, every hash recomputed, even --replay all",
        "build lists it self-reported; leaderboard run ranks random by the board's own episodes on its challenge seeds",
        [
            "tests/publish/test_leaderboard_run.py::test_swapped_evidence_is_not_verified_and_the_board_lists_its_own_episodes"
        ],
    ),
    (
        "leaderboard: scripted oracle relabelled openvla-7b-ft",
        "named by its content hash (a remote one by its server's stated hash, said to be on trust); results apart",
        [
            "tests/publish/test_leaderboard_run.py::test_a_relabelled_oracle_is_listed_by_its_identity_and_its_results_apart",
            "tests/publish/test_leaderboard_run.py::test_a_remote_oracle_is_named_by_its_server_and_its_identity_taken_on_trust",
        ],
    ),
    (
        "leaderboard: forged log plus results.json padded to steer the replay sample",
        "never listed as verified; the sample seed is the build's or the board's secret",
        ["tests/publish/test_leaderboard_run.py::test_a_sample_steered_forgery_is_never_listed_as_verified"],
    ),
    (
        "leaderboard: resubmission sharing episodes with an earlier one",
        "each episode counted once",
        ["tests/publish/test_leaderboard_run.py::test_a_partially_overlapping_resubmission_counts_each_episode_once"],
    ),
    (
        "leaderboard run: submission names module:Class, trust_remote_code, unpickle, a pickle file, an escaping path, credentials in a URL",
        "one line, nothing imported",
        ["tests/publish/test_leaderboard_run.py::test_a_bad_submission_is_refused_in_one_line_before_anything_runs"],
    ),
    (
        "leaderboard run: LeRobot processor step naming a module path; Hub revision given as a branch",
        "refused",
        [
            "tests/publish/test_leaderboard_run.py::test_a_lerobot_folder_runs_only_through_lerobot_registries",
            "tests/publish/test_leaderboard_run.py::test_a_hub_repo_at_a_pinned_commit_runs_from_a_mirror_and_is_the_same_policy_as_its_file",
        ],
    ),
    (
        "published tree without some videos: the replay sample picks an omitted one",
        "replays what the tree holds",
        [
            "tests/publish/test_leaderboard_rederive.py::test_a_published_tree_that_omits_a_video_replays_the_episodes_it_holds"
        ],
    ),
    (
        "policy server restarted mid-run serving another policy",
        "no episode under the old hash; in-flight episodes back to pending; eval stops in one line",
        [
            "tests/policies/test_remote_identity.py::test_server_switched_mid_campaign_contributes_no_episode_and_stops_it_in_one_line",
            "tests/policies/test_remote_identity.py::test_server_switched_mid_lockstep_campaign_stops_it_untainted",
            "tests/policies/test_remote_identity.py::test_ray_actor_answers_a_switched_server_with_a_fatal_error",
        ],
    ),
    (
        "server replies that do not state the policy's hash (an old or foreign server)",
        "every reply carries X-Kosmos-Policy-Hash; a changed or missing hash is refused, sticky",
        [
            "tests/policies/test_remote_identity.py::test_every_reply_states_the_served_policys_hash",
            "tests/policies/test_remote_identity.py::test_a_pinned_client_refuses_another_policys_replies_and_keeps_refusing",
            "tests/policies/test_remote_identity.py::test_a_server_that_does_not_state_its_hash_on_every_reply_is_refused",
        ],
    ),
    (
        "--max-sessions 1 with eval --workers 2 (503 counted as policy errors)",
        "503 waited for, first come first served; all episodes complete, none in error",
        [
            "tests/policies/test_remote_identity.py::test_a_full_server_with_two_workers_is_waited_for_never_a_policy_error",
            "tests/policies/test_remote_identity.py::test_a_freed_slot_goes_to_the_longest_waiting_session",
            "tests/policies/test_remote_identity.py::test_a_waiting_reset_says_so_and_gives_up_as_infrastructure_after_busy_wait",
        ],
    ),
    (
        "killed eval leaves its sessions open; ten resets never ended hold every slot",
        "sessions are leased (30 s default) and expire; a live idle client keeps its own",
        [
            "tests/policies/test_remote_identity.py::test_a_killed_clients_session_frees_its_slot_and_a_live_idle_one_keeps_its_own",
            "tests/policies/test_remote_identity.py::test_resets_that_never_act_expire_and_the_default_lease_is_short",
        ],
    ),
    (
        "a progress judge answers something that does not parse (a cut-off or contradictory answer)",
        "abstention: the step earns 0, the potential is kept, info counts it; never a made-up progress",
        [
            "tests/test_reward_progress_judge.py::test_make_with_a_random_judge_from_a_folder_runs_and_every_abstention_keeps_the_potential",
            "tests/judges/test_vlm_progress.py::test_answers_that_do_not_parse_name_the_problem",
        ],
    ),
    (
        "reward.step_judge names a judge that scores neither frames nor progress",
        "one SpecError line naming the judge",
        [
            "tests/test_reward_progress_judge.py::test_a_step_judge_that_scores_neither_frames_nor_progress_is_one_clear_error"
        ],
    ),
    (
        "judge-check --progress with a judge that scores no progress",
        "one line, exit 2",
        ["tests/checks/test_progress_readiness.py::test_a_judge_that_scores_no_progress_is_one_clear_error"],
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
