"""Registered results: check a campaign against its registration, compute the registered
metrics, and say PASS or FAIL for every bar, with the interval each bar was checked with.

The study's verdict is PASS when every bar passes, FAIL when any fails, and INCOMPLETE
(with the bars still computed, as provisional) when the campaign has not finished every
planned episode. A failed study is reported exactly like a passed one.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from kosmos_env.registration.registry import Registration, RegistrationError, registration_from_dict

REGISTERED_TITLE = "REGISTERED RESULTS"
EXPLORATORY_TITLE = "EXPLORATORY (not registered)"
EXPLORATORY_NOTE = (
    "Every number below was not registered before the study ran: it is exploratory, chosen or read "
    "after looking, and is no evidence for or against the registered hypothesis."
)


def check_campaign(campaign: Mapping[str, Any], reg: Registration) -> list[str]:
    """Refuse (RegistrationError) a campaign that was not run under ``reg`` or whose design differs.

    Returns notes (e.g. a policy whose content hash the campaign did not record).
    """
    p = reg.protocol
    stamp = campaign.get("registration")
    if not isinstance(stamp, Mapping):
        raise RegistrationError(
            f"campaign {campaign.get('id')} was not run under a registration (results.json has no "
            f"campaign.registration); run it with kosmos-env eval --registration"
        )
    if stamp.get("sha256") != reg.sha256:
        raise RegistrationError(
            f"campaign {campaign.get('id')} was run under registration "
            f"{str(stamp.get('sha256'))[:12]}..., not {reg.short} ({reg.name})"
        )
    dev = []
    for key, want in (
        ("env_id", p["env"]["id"]),
        ("spec_hash", p["env"]["spec_hash"]),
        ("tasks", p["tasks"]),
        ("seeds", p["seeds"]),
        ("repeats", p["repeats"]),
        ("judge", p["judge"]),
    ):
        if campaign.get(key) != want:
            dev.append(f"{key}: {campaign.get(key)!r} (registered {want!r})")
    labels = [x.get("label") for x in campaign.get("policies") or []]
    if sorted(labels) != sorted(x["policy"] for x in p["policies"]):
        dev.append(f"policies: {labels} (registered {[x['label'] for x in p['policies']]})")
    notes = []
    recorded = {x.get("label"): x.get("content_hash") for x in campaign.get("policies") or []}
    for x in p["policies"]:
        got = recorded.get(x["policy"])
        if got is None:
            notes.append(f"the campaign recorded no content hash for {x['policy']} (no episode of it ran)")
        elif got != x["content_hash"]:
            dev.append(
                f"policy {x['policy']} ran with content hash {got[:12]}... (registered {x['content_hash'][:12]}...)"
            )
    if dev:
        raise RegistrationError(
            f"campaign {campaign.get('id')} deviates from registration {reg.short}: " + "; ".join(dev)
        )
    return notes


def evaluate_registration(reg: Registration, rows: Sequence[Mapping[str, Any]], *, complete: bool = True) -> dict:
    """Compute every registered metric on the episode rows and check its bar; a JSON-ready dict."""
    from kosmos_env.campaign.design import PolicyRef
    from kosmos_env.registration.metrics import METRICS, Cube, evaluate_metric
    from kosmos_env.registration.expr import parse_expr

    p = reg.protocol
    labels = [x["policy"] for x in p["policies"]]
    cube = Cube.from_rows(rows, labels, p["tasks"])
    reference = None
    ref_rows = reg.reference_rows()
    if ref_rows is not None:
        reference = {(r["task"], PolicyRef.parse(r["policy"]).label): r["reference"] for r in ref_rows}
    needs_boot = any(m["bar"]["interval"] == "bootstrap" for m in p["metrics"])
    boot = cube.bootstrap(p["analysis"]["n_boot"], p["analysis"]["seed"]) if needs_boot and cube.units else None
    results = []
    for m in p["metrics"]:
        if boot is None and m["bar"]["interval"] == "bootstrap":
            r = {
                "name": m["name"],
                "expr": m["expr"],
                "estimate": None,
                "interval": None,
                "bar": m["bar"],
                "checked_value": None,
                "verdict": "FAIL",
                "reason": "the campaign has no episode of the registered design",
            }
        else:
            r = evaluate_metric(m, cube, boot, reference).to_dict()
        r["higher_is_better"] = METRICS[parse_expr(m["expr"]).name].higher_is_better
        results.append(r)
    passed = all(r["verdict"] == "PASS" for r in results)
    verdict = "INCOMPLETE" if not complete else ("PASS" if passed else "FAIL")
    return {
        "registration": reg.sha256,
        "name": reg.name,
        "registered_utc": reg.registered_utc,
        "hypothesis": p.get("hypothesis", ""),
        "verdict": verdict,
        "bars_passed": sum(r["verdict"] == "PASS" for r in results),
        "bars": len(results),
        "complete": bool(complete),
        "n_episodes": len(rows),
        "metrics": results,
        "analysis": dict(p["analysis"]),
    }


def registered_from_bundle(bundle, reg: Registration) -> dict:
    """Check ``bundle`` (a :class:`kosmos_env.report.bundle.Bundle`) against ``reg`` and evaluate it."""
    notes = check_campaign(bundle.campaign, reg)
    out = evaluate_registration(reg, bundle.rows, complete=bundle.campaign.get("complete", True) is not False)
    out["notes"] = notes
    return out


def registered_from_campaign(campaign: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict | None:
    """For a published bundle: the registration stamped in ``campaign`` (verified) and its results, or
    None when the campaign has no registration."""
    stamp = campaign.get("registration")
    if stamp is None:
        return None
    reg = registration_from_dict(dict(stamp), "results.json campaign.registration")
    check_campaign(campaign, reg)
    return evaluate_registration(reg, rows, complete=campaign.get("complete", True) is not False)


# ----------------------------------------------------------------------------- text


def _num(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def bar_text(bar: Mapping[str, Any]) -> str:
    """``lower bound of wilson 95% interval >= 0.8`` style description of a bar."""
    lvl = f"{100 * bar['level']:g}%"
    what = "estimate" if bar["bound"] == "estimate" else f"{bar['bound']} bound of {bar['interval']} {lvl} interval"
    return f"{what} {bar['op']} {bar['value']:g}"


def registered_text(res: Mapping[str, Any]) -> str:
    """The REGISTERED RESULTS section for the terminal."""
    from kosmos_env.report.text import format_table

    head = f"{REGISTERED_TITLE}: study {res['name']}, registration sha256 {res['registration']}"
    lines = [head, "=" * len(head), f"registered {res['registered_utc']}; {res['n_episodes']} episodes"]
    if res.get("hypothesis"):
        lines.append(f"hypothesis: {res['hypothesis'].strip()}")
    rows = []
    for m in res["metrics"]:
        iv = m.get("interval")
        ivs = "n/a" if not iv else f"[{_num(iv['lower'])}, {_num(iv['upper'])}] {iv['method']} {100 * iv['level']:g}%"
        rows.append(
            [m["name"], m["expr"], _num(m["estimate"]), ivs, bar_text(m["bar"]), _num(m["checked_value"]), m["verdict"]]
        )
    lines += [
        "",
        format_table(
            ["metric", "definition", "estimate", "interval", "bar", "checked", "verdict"], rows, left=(0, 1, 3, 4)
        ),
    ]
    for m in res["metrics"]:
        if m.get("reason"):
            lines.append(f"  {m['name']}: {m['reason']}")
        if m.get("random_floor") is not None:
            lines.append(f"  {m['name']}: random-ranking floor {m['random_floor']:.3f}")
        boot = m.get("bootstrap") or {}
        if "share_order_holds" in boot:
            lines.append(
                f"  {m['name']}: order holds in {100 * boot['share_order_holds']:.1f}% of "
                f"{boot['defined']} bootstrap resamples"
            )
    for n in res.get("notes") or []:
        lines.append(f"  note: {n}")
    verdict = res["verdict"]
    tail = f"STUDY VERDICT: {verdict} ({res['bars_passed']}/{res['bars']} registered bars passed)"
    if verdict == "INCOMPLETE":
        tail += "; the campaign has not finished every planned episode, so the bars above are provisional"
    lines += ["", tail]
    return "\n".join(lines)


def exploratory_header() -> str:
    return f"{EXPLORATORY_TITLE}\n{'=' * len(EXPLORATORY_TITLE)}\n{EXPLORATORY_NOTE}"


def registered_markdown(res: Mapping[str, Any] | None, stamp: Mapping[str, Any] | None) -> str:
    """The dataset card section of a registered study (empty for an unregistered campaign)."""
    if stamp is None:
        return ""
    lines = [
        "### Pre-registered study",
        "",
        f"- Registration sha256: `{stamp.get('sha256')}` (study `{(stamp.get('protocol') or {}).get('name')}`, "
        f"registered {stamp.get('registered_utc')})",
    ]
    if res is None:
        lines += ["- The registered results could not be recomputed; see the notes of this publish.", ""]
        return "\n".join(lines)
    lines += [
        f"- **Study verdict: {res['verdict']}** ({res['bars_passed']}/{res['bars']} registered bars passed). "
        "Failed studies are published exactly like passed ones.",
        "",
        "| metric | definition | estimate | interval | bar | verdict |",
        "|---|---|---:|---|---|---|",
    ]
    for m in res["metrics"]:
        iv = m.get("interval")
        ivs = "–" if not iv else f"[{_num(iv['lower'])}, {_num(iv['upper'])}] {iv['method']} {100 * iv['level']:g}%"
        expr = str(m["expr"]).replace("|", "\\|")
        lines.append(
            f"| {m['name']} | `{expr}` | {_num(m['estimate'])} | {ivs} | {bar_text(m['bar'])} | **{m['verdict']}** |"
        )
    lines += ["", "Every other number on this card is exploratory (not registered).", ""]
    return "\n".join(lines)
