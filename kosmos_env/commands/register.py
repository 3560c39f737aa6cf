"""`kosmos-env register PROTOCOL.yaml`: freeze a campaign protocol before any result exists.
`kosmos-env register --study [design arguments] --out REG.json`: register a validity study.

With --study, the arguments are those of `kosmos-env study` that decide its numbers (world,
reference, policies, tasks, seeds, seed offset, horizons, gate, baselines, control, sweep,
n-boot, weights); the registration binds them with the world's weights sha256 and code version,
the judges' code and artifacts, the policies' content hashes, the evaluation seeds (which must
lie in the evaluation range of kosmos_env/study/seed_ranges.json) and the bars, stamped with the UTC
time. Then `kosmos-env study [the same arguments] --registration REG.json --out DIR`.

The protocol (YAML, read with yaml.safe_load) names the env id and its spec hash (with any
overrides), the policies with their content hashes, tasks, seeds, repeats, the judge, the
reference data (with its sha256) and every registered metric with its pass bar. It is
validated against the code and data as they are now (unknown fields, wrong types, a spec,
policy or reference hash that does not match are refused), and its canonical form is written
with its SHA-256 and the UTC time to a registration file, which is never overwritten. Then:
`kosmos-env eval --registration REG --out DIR` and `kosmos-env analyze DIR --registration REG`.
See kosmos_env/registration/protocol.py for the format and examples/protocol_example.yaml.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "register",
        help="freeze a study protocol (design, metrics, pass bars) and its SHA-256",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from kosmos_env.study.arguments import add_design_arguments

    p.add_argument(
        "protocol", metavar="PROTOCOL.yaml", nargs="?", default=None, help="a campaign protocol (omit with --study)"
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="REG.json",
        help="registration file to write (default: PROTOCOL.registration.json beside the protocol; with "
        "--study, study_registration.json); an existing file is never overwritten",
    )
    study = p.add_argument_group("validity study (--study)", "the design arguments of `kosmos-env study`")
    study.add_argument("--study", action="store_true", help="register a validity study instead of a campaign protocol")
    add_design_arguments(study)
    p.add_argument(
        "--hashes",
        action="store_true",
        help="print the current spec hash (with the protocol's overrides) and policy content hashes the "
        "protocol must declare, then stop (writes nothing)",
    )
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.registration import build_registration, default_registration_path, write_registration

    if args.study:
        if args.protocol:
            raise ValueError("give either PROTOCOL.yaml (a campaign) or --study (a validity study), not both")
        return _register_study(args)
    if not args.protocol:
        raise ValueError("nothing to register: give PROTOCOL.yaml, or --study with the study's design arguments")

    if args.hashes:
        print(json.dumps(current_hashes(args.protocol), indent=1))
        return 0
    reg = build_registration(args.protocol)
    out = write_registration(reg, args.out or default_registration_path(args.protocol))
    p = reg.protocol
    print(f"registered study {reg.name}: sha256 {reg.sha256} at {reg.registered_utc}")
    print(
        f"  {p['env']['id']} (spec {p['env']['spec_hash'][:12]}), {len(p['policies'])} policies x "
        f"{len(p['tasks'])} tasks x {len(p['seeds'])} seeds x {p['repeats']} repeats; "
        f"{len(p['metrics'])} registered metric(s)"
    )
    print(f"wrote {out}\nnext: kosmos-env eval --registration {out} --out DIR", file=sys.stderr)
    return 0


def _register_study(args: argparse.Namespace) -> int:
    from kosmos_env.study.arguments import registration_from_args
    from kosmos_env.study.registration import write_registration as write_study_registration

    out = args.out or "study_registration.json"
    cfg, body = registration_from_args(args)
    record = write_study_registration(body, out)
    n_seeds = sum(len(v) for v in record["evaluation_seeds"].values())
    print(f"registered validity study: sha256 {record['sha256']} at {record['registered_utc']}")
    print(
        f"  world {cfg.world} (weights {record['world'].get('weights', {}).get('sha256', 'none')[:12]}, code "
        f"{record['world']['code']['sha256'][:12]}), {len(cfg.policies)} policies, {n_seeds} evaluation seeds, "
        f"{len(record['baselines'])} baselines, {len(record['bars'])} bars"
    )
    print(f"wrote {out}\nnext: kosmos-env study <the same arguments> --registration {out} --out DIR", file=sys.stderr)
    return 0


def current_hashes(path: str) -> dict:
    """The env spec hash and policy content hashes as the code computes them now."""
    from kosmos_env.campaign.design import PolicyRef
    from kosmos_env.registration.protocol import ProtocolError, load_protocol_file, policy_content_hash
    from kosmos_env.spec import load_spec

    raw = load_protocol_file(path)
    env = raw.get("env") if isinstance(raw.get("env"), dict) else None
    if env is None or not isinstance(env.get("id"), str):
        raise ProtocolError("protocol.env.id is needed to compute the spec hash")
    out = {
        "env": {
            "id": env["id"],
            "overrides": env.get("overrides") or {},
            "spec_hash": load_spec(env["id"]).with_overrides(**(env.get("overrides") or {})).hash,
        },
        "policies": [],
    }
    for entry in raw.get("policies") or []:
        if isinstance(entry, dict) and isinstance(entry.get("policy"), str):
            ref = PolicyRef.parse(entry["policy"])
            out["policies"].append({"policy": ref.label, "content_hash": policy_content_hash(ref.name, ref.kwargs)})
    return out
