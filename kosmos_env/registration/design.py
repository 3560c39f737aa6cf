"""Run exactly the registered design: build the campaign config from a registration, refuse
any deviation, and bind the registration to the campaign folder.

``kosmos-env eval --registration REG`` takes env, policies, tasks, seeds, repeats, judge and
spec overrides from the registration. A design flag also given on the command line must say
the same thing, or the run is refused before anything runs; so is an env spec whose hash is no
longer the registered one, or a policy whose ``content_hash()`` changed.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from kosmos_env.registration.protocol import policy_content_hash, policy_refs
from kosmos_env.registration.registry import Registration, RegistrationError
from kosmos_env.utils.seed_ranges import evaluation_seeds, overlap_line, seeds_text


class RegistrationDeviation(ValueError):
    """The requested or current design differs from the registered one."""


def registered_config(
    reg: Registration,
    *,
    env: str | None = None,
    policies: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    seeds: int | None = None,
    seed_offset: int | None = None,
    repeats: int | None = None,
    judge: Any = None,
    image_size: Sequence[int] | None = None,
    video: bool = True,
    check_policies: bool = True,
):
    """The :class:`~kosmos_env.campaign.design.CampaignConfig` of the registered design.

    The keyword arguments are what the command line gave (None = not given). Every one given
    must match the registration (``--seeds N`` with ``--seed-offset K`` means seeds K..K+N-1, K
    by default the first evaluation seed); the current spec hash and (``check_policies``) every
    policy's content hash must match too. All deviations are reported together. A registration
    whose seeds lie in the declared training or tuning range (one written before ``register``
    refused them) is refused too: a registered result must be on held-out scenes.
    """
    from kosmos_env.campaign.design import PolicyRef, make_config, parse_judge
    from kosmos_env.spec import load_spec

    p = reg.protocol
    refs = policy_refs(p)
    overrides = dict(p["env"]["overrides"])
    dev: list[str] = []
    if env is not None and env != p["env"]["id"]:
        dev.append(f"--env {env} (registered: {p['env']['id']})")
    if policies:
        given = [PolicyRef.parse(x).label for x in policies]
        if sorted(given) != sorted(r.label for r in refs):
            dev.append(f"--policy {given} (registered: {[r.label for r in refs]})")
    if tasks:
        want = list(tasks)
        if want == ["all"]:
            from kosmos_env.tasks import load_suite

            want = load_suite(load_spec(p["env"]["id"]).tasks["suite"]).names
        if sorted(want) != sorted(p["tasks"]):
            dev.append(f"--tasks {want} (registered: {p['tasks']})")
    if seeds is not None or seed_offset is not None:
        count = len(p["seeds"]) if seeds is None else int(seeds)
        asked = evaluation_seeds(count, seed_offset)
        if asked != list(p["seeds"]):
            flags = " ".join(
                f
                for f in (
                    seeds is not None and f"--seeds {seeds}",
                    seed_offset is not None and f"--seed-offset {seed_offset}",
                )
                if f
            )
            dev.append(f"{flags} = seeds {seeds_text(asked)} (registered seeds: {seeds_text(p['seeds'])})")
    if repeats is not None and int(repeats) != p["repeats"]:
        dev.append(f"--repeats {repeats} (registered: {p['repeats']})")
    if image_size is not None and [int(v) for v in image_size] != overrides.get("image_size"):
        dev.append(f"--image-size {list(image_size)} (registered overrides: {overrides or 'none'})")
    if judge is not None:
        spec_judge = load_spec(p["env"]["id"]).with_overrides(**overrides).judge
        if parse_judge(judge, spec_judge) != p["judge"]:
            dev.append(f"--judge {judge} (registered: {json.dumps(p['judge'], sort_keys=True)})")
    config = make_config(
        p["env"]["id"],
        refs,
        tasks=p["tasks"],
        seeds=list(p["seeds"]),
        repeats=p["repeats"],
        judge=p["judge"],
        video=video,
        spec_overrides=overrides,
    )
    if config.spec_hash != p["env"]["spec_hash"]:
        dev.append(
            f"the current spec of {p['env']['id']} with overrides {json.dumps(overrides, sort_keys=True)} "
            f"hashes to {config.spec_hash[:12]}..., the registered spec hash is {p['env']['spec_hash'][:12]}..."
        )
    if check_policies:
        for x, ref in zip(p["policies"], refs, strict=True):
            actual = policy_content_hash(ref.name, ref.kwargs)
            if actual != x["content_hash"]:
                dev.append(
                    f"policy {ref.label} now has content hash {actual[:12]}..., registered {x['content_hash'][:12]}..."
                )
    overlap = overlap_line(p["seeds"])
    if overlap:
        raise RegistrationError(
            f"refusing to run registration {reg.short} ({reg.name}): {overlap}; a registered study runs on "
            f"evaluation seeds only: register the protocol again with `seeds: N` (N evaluation seeds from "
            f"{evaluation_seeds(1)[0]}) or a list in the evaluation range"
        )
    if dev:
        raise RegistrationDeviation(
            f"refusing to run registration {reg.short} ({reg.name}): the design deviates "
            f"from the registered one: " + "; ".join(dev)
        )
    return config


def bind_registration(out_dir: str | os.PathLike, config, reg: Registration) -> None:
    """Open (or check) the campaign in ``out_dir`` and record the registration in its ledger.

    Refused: a folder that holds another registration, or a campaign that already finished
    episodes without one (its results were visible before the study was registered).
    """
    from kosmos_env.campaign.ledger import LEDGER_NAME, Ledger
    from kosmos_env.campaign.runner import open_campaign

    open_campaign(config, out_dir)
    with Ledger(os.path.join(os.fspath(out_dir), LEDGER_NAME), create=False) as ledger:
        meta = ledger.meta()
        stamp = json.loads(meta["registration"]) if meta.get("registration") else None
        if stamp is not None:
            if stamp.get("sha256") != reg.sha256:
                raise RegistrationError(
                    f"{out_dir} holds a campaign of registration {str(stamp.get('sha256'))[:12]}..., "
                    f"not {reg.short}: use a new --out"
                )
            return
        done = ledger.counts()["done"]
        if done:
            raise RegistrationError(
                f"{out_dir} already holds {done} finished episode(s) run without a registration; "
                f"a registration must come before any result: use a new --out"
            )
        ledger.set_meta("registration", json.dumps(reg.stamp(), sort_keys=True))
