"""Dataset cards for published campaigns: YAML metadata the Hub reads, and a human summary.

Two cards are written per publish:

- the repository card (``README.md`` at the dataset root): metadata for the Hub (license, tags,
  a ``configs`` entry whose glob covers every published campaign's ``episodes.parquet``, so the
  dataset viewer shows all of them) and the summary of the campaign published last;
- the campaign card (``results/<env>/<spec12>/<campaign>/README.md``): the same summary, kept
  next to the campaign forever, so older campaigns stay described after later publishes.

The summary ranks policies by the numbers recomputed from the per-episode rows (never the
submitted ones), with Wilson 95% intervals, the worst-case interval that counts undecided
episodes, and the command that reruns the campaign. It names the judge of every success number
(label and identity hash), leads with another stored judge's ranking when ``publish --judge``
chose one (:mod:`kosmos_env.publish.judge_choice`), and states the time and money per stage
with the judge's share of the bill.
"""

from __future__ import annotations

from typing import Any

from kosmos_env.publish.judge_choice import JudgeChoice, cost_markdown, judge_name
from kosmos_env.publish.validate import VerifiedSubmission

CARD_TAGS = ["kosmos-env", "robotics", "evaluation", "world-models", "benchmark-results"]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _ci(pair: list | None) -> str:
    return "–" if not pair else f"[{100 * pair[0]:.1f}, {100 * pair[1]:.1f}]"


def ranking_markdown(sub: VerifiedSubmission) -> str:
    """A Markdown table of the recomputed ranking (best first)."""
    agg = sub.aggregated
    lines = [
        "| rank | policy | success | Wilson 95% CI | worst-case 95% | n | discarded | abstained | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, label in enumerate(agg["ranking"], 1):
        s = agg["per_policy"][label]
        lines.append(
            f"| {i} | `{_md_escape(label)}` | {_pct(s['success_rate'])} | {_ci(s['wilson_95'])} | "
            f"{_ci(s['worst_case_95'])} | {s['n']} | {s['discarded']} | {s['abstained']} | {s['errors']} |"
        )
    return "\n".join(lines)


def per_task_markdown(sub: VerifiedSubmission) -> str:
    tasks = sub.campaign["tasks"]
    head = "| policy | " + " | ".join(f"`{_md_escape(t)}`" for t in tasks) + " |"
    lines = [head, "|---|" + "---:|" * len(tasks)]
    for label in sub.aggregated["ranking"]:
        cells = []
        for t in tasks:
            s = sub.aggregated["per_policy_task"][label][t]
            cells.append(f"{_pct(s['success_rate'])} {_ci(s['wilson_95'])}")
        lines.append(f"| `{_md_escape(label)}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rerun_command(sub: VerifiedSubmission) -> str:
    """The `kosmos-env eval` command that reruns this campaign's design."""
    c = sub.campaign
    parts = ["kosmos-env eval", f"--env {c['env_id']}"]
    parts += [f"--policy '{p['label']}'" for p in c["policies"]]
    parts.append("--tasks " + " ".join(c["tasks"]))
    seeds = list(c["seeds"])
    # the offset is always written: `eval`'s default first seed is not the same in every version
    first = min(seeds)
    contiguous = sorted(seeds) == list(range(first, first + len(seeds)))
    parts.append(
        f"--seeds {len(seeds)} --seed-offset {first}"
        if contiguous
        else f"--seeds {len(seeds)} --seed-offset {first}  # NOTE: this campaign used seeds {seeds}"
    )
    if c.get("repeats", 1) != 1:
        parts.append(f"--repeats {c['repeats']}")
    spec_judge = (c.get("spec") or {}).get("judge")
    if c.get("judge") and c["judge"] != spec_judge:
        parts.append(f"--judge '{_json(c['judge'])}'")
    overrides = c.get("spec_overrides") or {}
    if "image_size" in overrides:
        parts.append("--image-size {} {}".format(*overrides["image_size"]))
    parts.append("--out my-campaign")
    return " \\\n  ".join(parts)


def chosen_ranking_markdown(choice: JudgeChoice) -> str:
    """The ranking by a judge other than the campaign's own, from its stored verdicts."""
    lines = [
        "| rank | policy | success | Wilson 95% CI | successes / decided | abstained |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(choice.ranking, 1):
        lines.append(
            f"| {i} | `{_md_escape(r['policy'])}` | {_pct(r['success_rate'])} | {_ci(r['wilson_95'])} | "
            f"{r['successes']} / {r['decided']} | {r['abstained']} |"
        )
    return "\n".join(lines)


def _judge_sections(sub: VerifiedSubmission, choice: JudgeChoice | None) -> tuple[list[str], str]:
    """(the chosen judge's ranking section, title of the campaign's own ranking)."""
    own = choice.own if choice is not None else None
    own_name = f" by the campaign's own judge {judge_name(own)}" if own else ""
    if choice is None or choice.is_campaign_judge:
        return [], f"### Ranking{own_name}"
    rel = choice.verdicts_file[0] if choice.verdicts_file else "judgments/"
    section = [
        f"### Ranking by judge {judge_name(choice.judge)}",
        "",
        f"This judge re-judged the campaign's stored rollouts (`kosmos-env judge`); its verdicts are in "
        f"`{rel}` (hash-bound by manifest.json). Leaderboards rank the campaign's own judge (results.json), "
        "shown after this table.",
        "",
        *[f"- {n}" for n in choice.notes],
        "",
        chosen_ranking_markdown(choice),
        "",
    ]
    return section, f"### Ranking{own_name} (results.json)"


def summary_markdown(sub: VerifiedSubmission, repo_id: str, prefix: str, choice: JudgeChoice | None = None) -> str:
    c = sub.campaign
    chosen, own_title = _judge_sections(sub, choice)
    own_judge = f"{judge_name(choice.own)} (the campaign's own), " if choice else ""
    board = (
        "official: registered spec and judge"
        if sub.official
        else "**non-default**: spec overrides or another judge, never ranked with official results"
    )
    overrides = c.get("spec_overrides") or {}
    return "\n".join(
        [
            f"## {c['env_id']} · spec `{c['spec_hash'][:12]}` · campaign `{c['id']}`",
            "",
            f"- Env spec hash: `{c['spec_hash']}` ({board})",
            f"- Judge: {own_judge}`{_json(c.get('judge'))}`"
            + (f"; spec overrides: `{_json(overrides)}`" if overrides else ""),
            *(
                [f"- Success numbers below come first from judge {judge_name(choice.judge)}"]
                if choice is not None and not choice.is_campaign_judge
                else []
            ),
            f"- Design: {len(c['policies'])} policies × {len(c['tasks'])} tasks × {len(c['seeds'])} seeds × "
            f"{c['repeats']} repeats = {len(sub.rows)} episodes, paired (every policy sees the same initial scenes)",
            f"- Files: [`{prefix}`](https://huggingface.co/datasets/{repo_id}/tree/main/{prefix}) — results.json, "
            "episodes.parquet, manifest.json (sha256 of every file), selected rollout videos",
            f"- Written by kosmos-env {sub.results.get('package_version', '?')} on {c.get('written') or c.get('created', '?')}",
            "",
            *([_registered_section(sub)] if sub.campaign.get("registration") is not None else []),
            *(
                [
                    f"### Time and cost per stage (judge {judge_name(choice.judge)}'s share of the bill)",
                    "",
                    *cost_markdown(choice),
                    "",
                ]
                if choice is not None
                else []
            ),
            *chosen,
            own_title,
            "",
            "Success rate = successes / (successes + failures). Wilson 95% intervals; the worst-case interval "
            "counts every discarded, abstained or errored episode first as a failure, then as a success. "
            "Numbers were recomputed from the per-episode rows before publishing.",
            "",
            ranking_markdown(sub),
            "",
            "### Per task (success rate and Wilson 95% CI)",
            "",
            per_task_markdown(sub),
            "",
            "### Verify and rerun",
            "",
            "Download this folder and verify every hash and recompute every number (nothing is executed):",
            "",
            "```bash",
            f"hf download {repo_id} --repo-type dataset --include '{prefix}*' --local-dir sub",
            f"kosmos-env leaderboard build sub/{prefix} --out leaderboard",
            "```",
            "",
            "Rerun the campaign (same env version, same paired design):",
            "",
            "```bash",
            rerun_command(sub),
            "```",
            "",
        ]
    )


def _registered(sub: VerifiedSubmission) -> dict | None:
    """A pre-registered study's verdicts, recomputed from the rows (None if not registered)."""
    from kosmos_env.registration.report import registered_from_campaign

    return registered_from_campaign(sub.campaign, sub.rows)


def _registered_section(sub: VerifiedSubmission) -> str:
    from kosmos_env.registration.report import registered_markdown

    stamp = sub.campaign.get("registration")
    return registered_markdown(_registered(sub), stamp) if stamp is not None else ""


def campaign_card(sub: VerifiedSubmission, repo_id: str, prefix: str, choice: JudgeChoice | None = None) -> str:
    """README.md kept inside the campaign folder."""
    meta = {"kosmos_env": _campaign_meta(sub, prefix, choice)}
    return (
        _front_matter(meta)
        + f"# Kosmos-Env campaign `{sub.campaign_id}`\n\n"
        + summary_markdown(sub, repo_id, prefix, choice)
    )


def dataset_card(
    sub: VerifiedSubmission, repo_id: str, prefix: str, license: str = "cc-by-4.0", choice: JudgeChoice | None = None
) -> str:
    """README.md at the dataset root: Hub metadata plus the latest campaign's summary."""
    meta = {
        "pretty_name": f"Kosmos-Env results ({repo_id})",
        "license": license,
        "tags": list(CARD_TAGS),
        "task_categories": ["robotics"],
        "configs": [
            {"config_name": "episodes", "data_files": [{"split": "train", "path": "results/*/*/*/episodes.parquet"}]}
        ],
        "kosmos_env": {"latest": _campaign_meta(sub, prefix, choice)},
    }
    intro = "\n".join(
        [
            f"# Kosmos-Env results: {repo_id}",
            "",
            "Versioned, hash-bound evaluation results of robot manipulation policies in Kosmos-Env "
            "(world-model environments as Gymnasium envs). Each campaign lives under "
            "`results/<env id>/<first 12 hex of the env spec hash>/<campaign id>/` with its own README; results with "
            "different spec hashes are never ranked together.",
            "",
            "The summary below is of the campaign published last.",
            "",
            "",
        ]
    )
    return _front_matter(meta) + intro + summary_markdown(sub, repo_id, prefix, choice)


def _campaign_meta(sub: VerifiedSubmission, prefix: str, choice: JudgeChoice | None = None) -> dict[str, Any]:
    c = sub.campaign
    meta = {
        "env_id": c["env_id"],
        "spec_hash": c["spec_hash"],
        "campaign_id": c["id"],
        "path": prefix,
        "official": sub.official,
        "episodes": len(sub.rows),
        "ranking": [
            {
                "policy": label,
                "success_rate": _round(sub.aggregated["per_policy"][label]["success_rate"]),
                "wilson_95": _round(sub.aggregated["per_policy"][label]["wilson_95"]),
            }
            for label in sub.aggregated["ranking"]
        ],
    } | _registration_meta(sub)
    if choice is not None:
        from kosmos_env.publish.judge_choice import judge_shares

        meta["judge"] = {"label": choice.own["label"], "id": choice.own["id"]}  # whose verdicts "ranking" holds
        meta["judge_share"] = {
            "judge": judge_name(choice.judge),
            **{k: _round(v) for k, v in judge_shares(choice).items()},
        }
        if not choice.is_campaign_judge:
            meta["chosen_judge"] = {
                "label": choice.judge["label"],
                "id": choice.judge["id"],
                "verdicts": choice.verdicts_file[0] if choice.verdicts_file else None,
                "ranking": [
                    {
                        "policy": r["policy"],
                        "success_rate": _round(r["success_rate"]),
                        "wilson_95": _round(r["wilson_95"]),
                    }
                    for r in choice.ranking
                ],
            }
    return meta


def _registration_meta(sub: VerifiedSubmission) -> dict[str, Any]:
    res = _registered(sub)
    if res is None:
        return {}
    return {
        "registration": {
            "sha256": res["registration"],
            "study": res["name"],
            "registered_utc": res["registered_utc"],
            "verdict": res["verdict"],
            "bars": {m["name"]: m["verdict"] for m in res["metrics"]},
        }
    }


def _front_matter(meta: dict) -> str:
    import yaml

    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=False, width=1000) + "---\n\n"


def _json(data: Any) -> str:
    import json

    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _round(x: Any, digits: int = 4) -> Any:
    if x is None:
        return None
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    return round(float(x), digits)
