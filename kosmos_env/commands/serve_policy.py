"""``kosmos-env serve-policy NAME[:k=v,...]``: serve any policy adapter over the remote-policy protocol.

The policy is built once (``make_policy(NAME, **kwargs)``) and answers ``GET /v1/info``,
``POST /v1/reset`` and ``POST /v1/act`` (protocol version 1, documented in
``kosmos_env.policies.protocol``) until interrupted. The evaluator reaches it with
``--policy remote:url=http://HOST:PORT``. Binds 127.0.0.1 unless ``--host`` says otherwise:
the protocol has no authentication, so expose it beyond loopback only on a trusted network.
Every episode is a session with its own policy instance (built on demand, up to
``--max-sessions`` live at once, reused after an episode ends), so one server serves several
workers or lockstep lanes without mixing their episodes. Sessions are leased: a client renews
its session while its episode runs, and a session not renewed for ``--session-lease`` seconds
(30 by default: its client died, or reset and never came back) is ended and its slot freed. A
reset beyond ``--max-sessions`` is answered 503, which clients take as "wait": a freed slot goes
to the client that has waited longest. Every reply states the served policy's content hash
(header ``X-Kosmos-Policy-Hash``), so a client notices when a restarted server serves another
policy and never records its answers under the old one's hash.
"""

from __future__ import annotations

import argparse
import math
import sys


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "serve-policy",
        help="serve a policy adapter over HTTP (the remote-policy protocol)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "policy", metavar="NAME[:k=v,...]", help="policy to serve, e.g. scripted:skill=0.6 or openvla:model_path=/ckpt"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port to bind (0 picks a free one; default 8765)")
    p.add_argument("--max-mb", type=float, default=64.0, help="largest request accepted, MiB (default 64)")
    p.add_argument(
        "--request-timeout",
        type=float,
        default=60.0,
        help="seconds a connection may stay silent (a body that does not arrive, an idle keep-alive) "
        "before it is answered 408 or closed (default 60)",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=8,
        help="most episodes served at once, each with its own policy instance (default 8); "
        "one more waits (HTTP 503, retried by the client), never mixed with another's state",
    )
    p.add_argument(
        "--session-lease",
        "--session-idle",
        dest="session_lease",
        type=float,
        default=30.0,
        help="seconds a session lives without a request or a renewal from its client: a dead client's "
        "slot is free this long after it died (default 30; --session-idle is its older name)",
    )
    p.add_argument("--quiet", action="store_true", help="do not log each request")
    from kosmos_env.utils.threads import add_threads_argument

    add_threads_argument(p)
    from kosmos_env.plugins import add_global_flag_hints

    add_global_flag_hints(p)  # `eval --allow-import` says the flag goes before the command
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kosmos_env.policies import parse_policy_arg

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.max_mb <= 0:
        raise ValueError(f"--max-mb must be > 0, got {args.max_mb}")
    if not args.request_timeout > 0:
        raise ValueError(f"--request-timeout must be > 0 seconds, got {args.request_timeout}")
    if args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be at least 1, got {args.max_sessions}")
    if not (math.isfinite(args.session_lease) and args.session_lease > 0):
        raise ValueError(f"--session-lease must be a finite number of seconds > 0, got {args.session_lease}")
    name, kwargs = parse_policy_arg(args.policy)
    from kosmos_env.utils.threads import choose_threads, threads_applied

    with threads_applied(choose_threads(1, given=args.threads).threads):  # before the policy loads torch
        return _serve(args, name, kwargs)


def _serve(args: argparse.Namespace, name: str, kwargs: dict) -> int:
    from kosmos_env.policies import make_policy
    from kosmos_env.policies.protocol import PolicyServer
    from kosmos_env.policies.remote import policy_info

    policy = make_policy(name, **kwargs)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        server = PolicyServer(
            policy,
            policy_info(policy),
            host=args.host,
            port=args.port,
            max_bytes=int(args.max_mb * 1024 * 1024),
            log=log,
            request_timeout=args.request_timeout,
            factory=lambda: make_policy(name, **kwargs),  # one instance per concurrent session
            max_sessions=args.max_sessions,
            session_lease=args.session_lease,
        )
    except OSError as exc:
        policy.close()
        raise RuntimeError(f"cannot bind {args.host}:{args.port}: {exc}") from None
    # the URL line is machine-readable: scripts (and tests) wait for it
    print(f"serving {policy.name} ({policy.content_hash()[:12]}) at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        server.close_policies()
        policy.close()
    return 0
