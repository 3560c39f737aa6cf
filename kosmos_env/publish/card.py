"""Dataset cards for published campaigns: YAML metadata the Hub reads, and a human summary.

Two cards are written per publish:

- the repository card (``README.md`` at the dataset root): metadata for the Hub (license, tags,
  a ``configs`` entry whose glob covers every published campaign's ``episodes.parquet``, so the
  dataset viewer shows all of them) and the summary of the campaign published last;
- the campaign card (``results/<env>/<spec12>/<campaign>/README.md``): the same summary, kept
  next to the campaign forever, so older campaigns stay described after later publishes.

The summary ranks policies by the numbers recomputed from the per-episode rows (never the
submitted ones), with Wilson 95% intervals, the worst-case interval that counts undecided
episodes, and the command that reruns the campaign.
"""
from __future__ import annotations

from typing import Any

from kosmos_env.publish.validate import VerifiedSubmission

CARD_TAGS = ["kosmos-env", "robotics", "evaluation", "world-models", "benchmark-results"]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _ci(pair: list | None) -> str:
    return "–" if not pair else f"[{100 * pair[0]:.1f}, {100 * pair[1]:.1f}]"


def ranking_markdown(sub: VerifiedSubmission) -> str:
    """A Markdown table of the recomputed ranking (best first)."""
    agg = sub.aggregated
    lines = ["| rank | policy | success | Wilson 95% CI | worst-case 95% | n | discarded | abstained | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for i, label in enumerate(agg["ranking"], 1):
        s = agg["per_policy"][label]
        lines.append(f"| {i} | `{_md_escape(label)}` | {_pct(s['success_rate'])} | {_ci(s['wilson_95'])} | "
                     f"{_ci(s['worst_case_95'])} | {s['n']} | {s['discarded']} | {s['abstained']} | {s['errors']} |")
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
    parts.append(f"--seeds {len(seeds)}" if seeds == list(range(len(seeds))) else
                 f"--seeds {len(seeds)}  # NOTE: this campaign used seeds {seeds}")
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


def summary_markdown(sub: VerifiedSubmission, repo_id: str, prefix: str) -> str:
    c = sub.campaign
    board = "official: registered spec and judge" if sub.official else \
        "**non-default**: spec overrides or another judge, never ranked with official results"
    overrides = c.get("spec_overrides") or {}
    return "\n".join([
        f"## {c['env_id']} · spec `{c['spec_hash'][:12]}` · campaign `{c['id']}`",
        "",
        f"- Env spec hash: `{c['spec_hash']}` ({board})",
        f"- Judge: `{_json(c.get('judge'))}`" + (f"; spec overrides: `{_json(overrides)}`" if overrides else ""),
        f"- Design: {len(c['policies'])} policies × {len(c['tasks'])} tasks × {len(c['seeds'])} seeds × "
        f"{c['repeats']} repeats = {len(sub.rows)} episodes, paired (every policy sees the same initial scenes)",
        f"- Files: [`{prefix}`](https://huggingface.co/datasets/{repo_id}/tree/main/{prefix}) — results.json, "
        "episodes.parquet, manifest.json (sha256 of every file), selected rollout videos",
        f"- Written by kosmos-env {sub.results.get('package_version', '?')} on {c.get('written') or c.get('created', '?')}",
        "",
        *([_registered_section(sub)] if sub.campaign.get("registration") is not None else []),
        "### Ranking",
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
    ])


def _registered(sub: VerifiedSubmission) -> dict | None:
    """A pre-registered study's verdicts, recomputed from the rows (None if not registered)."""
    from kosmos_env.registration.report import registered_from_campaign

    return registered_from_campaign(sub.campaign, sub.rows)


def _registered_section(sub: VerifiedSubmission) -> str:
    from kosmos_env.registration.report import registered_markdown

    stamp = sub.campaign.get("registration")
    return registered_markdown(_registered(sub), stamp) if stamp is not None else ""


def campaign_card(sub: VerifiedSubmission, repo_id: str, prefix: str) -> str:
    """README.md kept inside the campaign folder."""
    meta = {"kosmos_env": _campaign_meta(sub, prefix)}
    return _front_matter(meta) + f"# Kosmos-Env campaign `{sub.campaign_id}`\n\n" + summary_markdown(sub, repo_id, prefix)


def dataset_card(sub: VerifiedSubmission, repo_id: str, prefix: str, license: str = "cc-by-4.0") -> str:
    """README.md at the dataset root: Hub metadata plus the latest campaign's summary."""
    meta = {
        "pretty_name": f"Kosmos-Env results ({repo_id})",
        "license": license,
        "tags": list(CARD_TAGS),
        "task_categories": ["robotics"],
        "configs": [{"config_name": "episodes",
                     "data_files": [{"split": "train", "path": "results/*/*/*/episodes.parquet"}]}],
        "kosmos_env": {"latest": _campaign_meta(sub, prefix)},
    }
    intro = "\n".join([
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
    ])
    return _front_matter(meta) + intro + summary_markdown(sub, repo_id, prefix)


def _campaign_meta(sub: VerifiedSubmission, prefix: str) -> dict[str, Any]:
    c = sub.campaign
    return {"env_id": c["env_id"], "spec_hash": c["spec_hash"], "campaign_id": c["id"], "path": prefix,
            "official": sub.official, "episodes": len(sub.rows),
            "ranking": [{"policy": label, "success_rate": _round(sub.aggregated["per_policy"][label]["success_rate"]),
                         "wilson_95": _round(sub.aggregated["per_policy"][label]["wilson_95"])}
                        for label in sub.aggregated["ranking"]]} | _registration_meta(sub)


def _registration_meta(sub: VerifiedSubmission) -> dict[str, Any]:
    res = _registered(sub)
    if res is None:
        return {}
    return {"registration": {"sha256": res["registration"], "study": res["name"],
                             "registered_utc": res["registered_utc"], "verdict": res["verdict"],
                             "bars": {m["name"]: m["verdict"] for m in res["metrics"]}}}


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
