"""Join a published table to a campaign: map its policy and task names onto the campaign's labels.

``--map "rt-1-x=scripted:skill=0.3;widowx_spoon_on_towel=spoon_on_towel"`` maps each name of the
CSV (policy or task column) to a campaign label. Entries are separated by ``;`` (or by ``,`` when
no ``;`` is given and no label contains a comma); each splits at its first ``=``, so labels like
``scripted:skill=0.3`` are kept whole. With a map, every CSV name must end on a campaign label,
mapped or as it stands; any that does not is one error naming them all.
"""

from __future__ import annotations

from typing import Iterable


def parse_name_map(text: str) -> dict[str, str]:
    sep = ";" if ";" in text else ","
    out: dict[str, str] = {}
    for item in (x.strip() for x in text.split(sep)):
        if not item:
            continue
        name, eq, label = item.partition("=")
        name, label = name.strip(), label.strip()
        if not eq or not name or not label:
            raise ValueError(f"--map entry {item!r} must look like csv_name=campaign_label")
        if name in out and out[name] != label:
            raise ValueError(f"--map maps {name!r} twice ({out[name]!r} and {label!r})")
        out[name] = label
    if not out:
        raise ValueError("--map is empty; give csv_name=campaign_label entries")
    return out


def apply_name_map(
    ref_rows: list[dict], mapping: dict[str, str], policies: Iterable[str], tasks: Iterable[str]
) -> list[dict]:
    """``ref_rows`` ({task, policy, reference}) with names mapped; every name must reach the campaign."""
    pols, tsks = set(policies), set(tasks)
    bad_targets = sorted(v for v in set(mapping.values()) if v not in pols | tsks)
    unused = sorted(k for k in mapping if k not in {r["policy"] for r in ref_rows} | {r["task"] for r in ref_rows})
    out, unmapped_p, unmapped_t = [], set(), set()
    for r in ref_rows:
        p = mapping.get(r["policy"], r["policy"])
        t = mapping.get(r["task"], r["task"])
        if p not in pols:
            unmapped_p.add(r["policy"])
        if t not in tsks:
            unmapped_t.add(r["task"])
        out.append(dict(r, policy=p, task=t))
    problems = []
    if unmapped_p:
        problems.append(f"policies {sorted(unmapped_p)} map to no campaign policy (campaign: {sorted(pols)})")
    if unmapped_t:
        problems.append(f"tasks {sorted(unmapped_t)} map to no campaign task (campaign: {sorted(tsks)})")
    if bad_targets:
        problems.append(f"--map targets {bad_targets} are not campaign labels")
    if unused:
        problems.append(f"--map names {unused} are not in the CSV")
    if problems:
        raise ValueError("reference names do not map: " + "; ".join(problems))
    seen = set()
    for r in out:
        key = (r["task"], r["policy"])
        if key in seen:
            raise ValueError(f"--map sends two CSV rows to the same (task, policy) = {key}")
        seen.add(key)
    return out
