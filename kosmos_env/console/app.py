"""The console's web app (FastAPI): pages, live events, artifacts by hash, and the cancel control.

Everything but ``POST /c/{key}/cancel`` is read-only. That request must carry the token
printed at start-up in the ``X-Console-Token`` header (compared in constant time); a cross-site
form cannot set a header, so the token also stops request forgery. When the server listens on
loopback only, requests whose Host header is not a loopback name are refused too (a DNS-
rebinding page cannot read the console).

Routes: ``/`` campaigns; ``/c/{key}`` live view, ``/c/{key}/live.json`` and
``/c/{key}/events`` (server-sent events) its numbers; ``/c/{key}/episodes`` browser and
``/c/{key}/episodes/{n}`` one episode; ``/c/{key}/analysis``; ``/c/{key}/table`` policy x task;
``/c/{key}/pair?a=&b=`` two policies seed by seed; ``/c/{key}/disagree?j1=&j2=`` where two judges
differ; ``/compare?a=&b=``; ``/c/{key}/artifacts/{sha256}.{ext}`` an artifact by content hash;
``/favicon.ico``. Every table page answers ``?format=csv`` and ``?format=parquet`` with its rows;
the analysis page, which holds several tables, answers them with ``&table=<name>`` (each table links
its own downloads).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from kosmos_env.console import campaigns as cz
from kosmos_env.console import episode_view as ev

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 100
SQLITE_INT_MAX = 2**63 - 1  # integers from URLs go to SQLite, whose integers are signed 64-bit
OUTCOME_CHOICES = ("success", "failure", "discarded", "abstained", "error", "pending", "leased")
LIVE_QUEUE = (
    "pending",
    "leased",
    "rolled_out",
    "judging",
    "done",
    "success",
    "failure",
    "discarded",
    "abstained",
    "error",
)
LIVE_STAGES = ("policy", "world", "gate", "judge", "io", "overhead", "total")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
#: the tab icon, inline (no file, no 404): a ring around a dot in the console's blue
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><circle cx="16" cy="16" r="13" '
    'fill="none" stroke="#4c72b0" stroke-width="4"/><circle cx="16" cy="16" r="5" fill="#1d2433"/></svg>'
)


def host_name(header: str) -> str:
    """The name part of a Host header (``[::1]:8000`` -> ``[::1]``, ``localhost:80`` -> ``localhost``)."""
    h = header.strip().lower()
    if h.startswith("["):
        return h[: h.find("]") + 1]
    return h.rsplit(":", 1)[0] if ":" in h else h


class Verifier:
    """Runs ``verify_campaign`` (read-only) on finished campaigns in one background thread and
    caches each verdict until the campaign's files change."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple, str, str]] = {}  # key -> (signature, status, note)
        self._busy: set[str] = set()

    @staticmethod
    def _signature(ref: cz.CampaignRef, done: int) -> tuple:
        sig: list[Any] = [done]
        for name in ("manifest.json", "results.json"):
            try:
                st = (ref.path / name).stat()
                sig.append((st.st_mtime_ns, st.st_size))
            except OSError:
                sig.append(None)
        return tuple(sig)

    def status(self, ref: cz.CampaignRef, done: int) -> tuple[str, str]:
        """("verified" | "failed" | "pending", a short note); starts a check when none is current."""
        sig = self._signature(ref, done)
        with self._lock:
            cached = self._cache.get(ref.key)
            if cached and cached[0] == sig:
                return cached[1], cached[2]
            if ref.key not in self._busy:
                self._busy.add(ref.key)
                threading.Thread(target=self._run, args=(ref, sig), daemon=True, name=f"verify:{ref.key}").start()
        return "pending", "verifying artifacts and bundle…"

    def _run(self, ref: cz.CampaignRef, sig: tuple) -> None:
        from kosmos_env.campaign.verify import verify_campaign

        try:
            report = verify_campaign(ref.path, max_listed=3, read_only=True)
            if report.ok:
                status, note = (
                    "verified",
                    f"verified: {report.checked.get('artifacts', 0)} artifacts hash to their names",
                )
            else:
                status, note = "failed", "; ".join(report.problems[:2])
        except Exception as exc:  # a broken folder is a finding, never a crash of the console
            status, note = "failed", f"verification could not run: {exc}"
        with self._lock:
            self._cache[ref.key] = (sig, status, note)
            self._busy.discard(ref.key)


class Console:
    """The app's state: where campaigns are, the token, caches."""

    def __init__(
        self,
        roots: Sequence[str | Path],
        token: str,
        *,
        reference: str | Path | None = None,
        bind_note: str = "",
        poll_seconds: float = 1.0,
        analysis_options: dict | None = None,
    ):
        import jinja2

        self.roots = [str(r) for r in roots]
        self.token = token
        self.reference = None if reference is None else str(reference)
        self.bind_note = bind_note
        self.poll_seconds = float(poll_seconds)
        self.analysis_options = dict(analysis_options or {})
        self.verifier = Verifier()
        self._analysis: dict[tuple, dict] = {}
        self._analysis_lock = threading.Lock()
        self._versions: dict[str, tuple[tuple, str | None]] = {}
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True, undefined=jinja2.StrictUndefined
        )

    # -- helpers ------------------------------------------------------------------------
    def refs(self) -> list[cz.CampaignRef]:
        return cz.discover(self.roots)

    def ref(self, key: str) -> cz.CampaignRef | None:
        if not (isinstance(key, str) and len(key) == 12 and all(c in "0123456789abcdef" for c in key)):
            return None
        return next((r for r in self.refs() if r.key == key), None)

    def render(self, name: str, status: int = 200, **context) -> HTMLResponse:
        html = self.templates.get_template(name).render(bind_note=self.bind_note, **context)
        return HTMLResponse(html, status_code=status)

    def error(self, title: str, message: str, status: int) -> HTMLResponse:
        return self.render("error.html", status=status, title=title, message=message)

    def package_version(self, ref: cz.CampaignRef) -> str | None:
        """The kosmos-env version in the campaign's results.json (written when it finished), cached
        until the file changes; None when there is none."""
        path = ref.path / "results.json"
        try:
            st = path.stat()
        except OSError:
            return None
        sig = (st.st_mtime_ns, st.st_size)
        cached = self._versions.get(ref.key)
        if cached and cached[0] == sig:
            return cached[1]
        try:
            version = json.loads(path.read_text(encoding="utf-8")).get("package_version")
        except (OSError, ValueError, AttributeError):
            version = None
        version = None if version is None else str(version)
        self._versions[ref.key] = (sig, version)
        return version

    def token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode("utf-8"))

    def summary_row(self, ref: cz.CampaignRef) -> dict[str, Any]:
        row: dict[str, Any] = {"key": ref.key, "name": ref.name, "error": ref.error}
        if ref.error:
            return row
        try:
            s = cz.read_summary(ref)
        except cz.CampaignError as exc:
            row["error"] = str(exc)
            return row
        verification, note = (None, "")
        if s.complete:
            verification, note = self.verifier.status(ref, s.done)
        row.update(
            campaign_id=s.campaign_id,
            env_id=s.env_id,
            spec_hash=s.spec_hash,
            done=s.done,
            planned=s.planned,
            percent=round(100.0 * s.done / s.planned, 1) if s.planned else 0.0,
            design=f"{len(s.policies)}×{len(s.tasks)}×{s.seeds}×{s.repeats} = {s.planned}",
            state=s.state(verification),
            verification_note=note,
            success=[{"policy": p, **v} for p, v in s.success_so_far().items()],
        )
        return row

    def analysis(self, ref: cz.CampaignRef, judge: str | None = None) -> tuple[dict | None, int, str]:
        """(analysis dict or None, episodes it covers, error text); cached per done count and judge
        (``judge``: whose verdicts, see kosmos_env.report.judge_view; None = the campaign's own)."""
        import json

        from kosmos_env.campaign import judgments
        from kosmos_env.campaign.bundle import build_results
        from kosmos_env.campaign.cost import PriceTable
        from kosmos_env.campaign.readonly import ReadOnlyLedger
        from kosmos_env.report.analysis import analyze_bundle
        from kosmos_env.report.bundle import bundle_from_data

        with ReadOnlyLedger(ref.ledger_path) as ledger:
            done = ledger.counts()["done"]
            rejudged = sum(j["episodes"] for j in judgments.judges(ledger))  # re-judging changes another judge's page
            key = (ref.key, done, self.reference, judge, rejudged)
            with self._analysis_lock:
                if key in self._analysis:
                    return self._analysis[key], done, ""
            if done == 0:
                return None, 0, "No finished episode yet: nothing to analyse."
            stored = ledger.meta().get("price_table")
            try:  # the campaign's price table, so the page states the judge's share of the bill in money too
                prices = PriceTable.from_dict(json.loads(stored)) if stored else None
            except ValueError:
                prices = None
            results = build_results(ledger, prices)
        try:
            bundle = bundle_from_data(ref.path, ref.ledger_path, results)
            a = analyze_bundle(bundle, reference=self.reference, judge=judge, **self.analysis_options)
        except (ValueError, FileNotFoundError) as exc:
            return None, done, f"The analysis could not be computed: {exc}"
        with self._analysis_lock:
            self._analysis = {k: v for k, v in self._analysis.items() if k[0] != ref.key or k[3] != judge}
            self._analysis[key] = a
        return a, done, ""


def create_app(
    roots: Sequence[str | Path],
    token: str,
    *,
    reference: str | Path | None = None,
    loopback_only: bool = True,
    bind_note: str = "bound to 127.0.0.1 only",
    poll_seconds: float = 1.0,
    analysis_options: dict | None = None,
) -> FastAPI:
    """The console app over the campaign folders under ``roots`` (see module doc)."""
    if not token or len(token) < 16:
        raise ValueError("the console token must be at least 16 characters")
    con = Console(
        roots,
        token,
        reference=reference,
        bind_note=bind_note,
        poll_seconds=poll_seconds,
        analysis_options=analysis_options,
    )
    app = FastAPI(title="Kosmos-Env console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.console = con
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    if loopback_only:

        @app.middleware("http")
        async def only_loopback_hosts(request: Request, call_next):
            if host_name(request.headers.get("host") or "") not in LOOPBACK_HOSTS:
                return Response(
                    "refused: the console only answers requests addressed to this machine's loopback name",
                    status_code=421,
                    media_type="text/plain",
                )
            return await call_next(request)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; img-src 'self' data:; media-src 'self'; "
            "style-src 'self' 'unsafe-inline'; script-src 'self'"
        )
        return response

    def lookup(key: str) -> tuple[cz.CampaignRef | None, HTMLResponse | None]:
        ref = con.ref(key)
        if ref is None:
            return None, con.error("Unknown campaign", f"No campaign {key!r} under {', '.join(con.roots)}.", 404)
        if ref.error:
            return None, con.error(f"Campaign {ref.name} cannot be read", ref.error, 500)
        return ref, None

    def summary_or_error(ref: cz.CampaignRef):
        try:
            return cz.read_summary(ref), None
        except cz.CampaignError as exc:
            return None, con.error(f"Campaign {ref.name} cannot be read", str(exc), 500)

    def campaign_or_error(key: str):
        """(ref, summary, None) for a readable campaign, else (None, None, the error page)."""
        ref, err = lookup(key)
        if err:
            return None, None, err
        s, err = summary_or_error(ref)
        return (None, None, err) if err else (ref, s, None)

    @app.get("/", response_class=HTMLResponse)
    def campaigns_page(format: str = ""):
        rows = [con.summary_row(r) for r in con.refs()]
        if format:
            from kosmos_env.console.views import table_response

            flat = []
            for r in rows:
                base = {
                    k: r.get(k)
                    for k in ("key", "name", "campaign_id", "env_id", "spec_hash", "state", "done", "planned", "error")
                }
                for p in r.get("success") or [{}]:
                    flat.append(
                        {
                            **base,
                            "policy": p.get("policy"),
                            "successes": p.get("successes"),
                            "decided": p.get("decided"),
                            "rate": p.get("rate"),
                            "wilson_lower": (p.get("wilson") or [None, None])[0],
                            "wilson_upper": (p.get("wilson") or [None, None])[1],
                        }
                    )
            cols = [
                "key",
                "name",
                "campaign_id",
                "env_id",
                "spec_hash",
                "state",
                "done",
                "planned",
                "policy",
                "successes",
                "decided",
                "rate",
                "wilson_lower",
                "wilson_upper",
                "error",
            ]
            return table_response("campaigns", cols, flat, format)
        comparable = [r for r in rows if not r.get("error")]
        return con.render(
            "campaigns.html",
            rows=rows,
            roots=con.roots,
            comparable=comparable if len(comparable) >= 2 else [],
            refresh_ms=int(max(1.0, 4 * con.poll_seconds) * 1000),
        )

    @app.get("/c/{key}", response_class=HTMLResponse)
    def campaign_page(key: str):
        ref, s, err = campaign_or_error(key)
        if err:
            return err
        verification = con.verifier.status(ref, s.done)[0] if s.complete else None
        return con.render(
            "campaign.html",
            s=s,
            key=key,
            state=s.state(verification),
            judge=cz.judge_name(s.judge),
            percent=round(100.0 * s.done / s.planned, 1) if s.planned else 0.0,
            queue_states=LIVE_QUEUE,
            stages=LIVE_STAGES,
        )

    live_cache: dict[str, tuple[tuple, float, dict]] = {}

    def ledger_signature(ref: cz.CampaignRef) -> tuple:
        sig = []
        for suffix in ("", "-wal"):
            try:
                st = (ref.path / (cz.LEDGER_NAME + suffix)).stat()
                sig.append((st.st_mtime_ns, st.st_size))
            except OSError:
                sig.append(None)
        return tuple(sig)

    def live(ref: cz.CampaignRef) -> dict:
        """The live numbers, shared by every client of this campaign: recomputed when the ledger's
        files changed, and at least every 5 s (a worker that died changes nothing on disk)."""
        sig, now = ledger_signature(ref), time.monotonic()
        cached = live_cache.get(ref.key)
        if cached and cached[0] == sig and now - cached[1] < 5.0:
            return cached[2]
        d = cz.live_stats(ref)
        if d["queue"]["done"] == d["planned"] and d["planned"]:
            verification = con.verifier.status(ref, d["queue"]["done"])[0]
            d["state"] = "failed verification" if verification == "failed" else "finished"
        live_cache[ref.key] = (sig, now, d)
        return d

    @app.get("/c/{key}/live.json")
    def live_json(key: str):
        ref, err = lookup(key)
        if err:
            return JSONResponse({"error": "unknown or unreadable campaign"}, status_code=err.status_code)
        try:
            return JSONResponse(live(ref))
        except cz.CampaignError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)

    @app.get("/c/{key}/events")
    async def events(key: str, request: Request):
        ref, err = lookup(key)
        if err:
            return JSONResponse({"error": "unknown or unreadable campaign"}, status_code=err.status_code)

        async def stream():
            last, last_sent = None, 0.0
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                try:
                    d = await run_in_threadpool(live, ref)
                    text = json.dumps(
                        {k: v for k, v in d.items() if k != "now"}, sort_keys=True, allow_nan=False, default=str
                    )
                except (cz.CampaignError, ValueError) as exc:
                    text = json.dumps({"error": str(exc)})
                if text != last:
                    yield f"data: {text}\n\n"
                    last, last_sent = text, time.monotonic()
                elif time.monotonic() - last_sent > 15:
                    yield ": keep-alive\n\n"
                    last_sent = time.monotonic()
                await asyncio.sleep(con.poll_seconds)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )

    def parse_filters(seed: str, outcome: str) -> tuple[int | None, HTMLResponse | None]:
        seed_val = None
        if seed.strip():
            try:
                seed_val = int(seed)
            except ValueError:
                return None, con.error("Bad filter", f"seed must be an integer, got {seed!r}", 400)
            if not 0 <= seed_val <= SQLITE_INT_MAX:  # SQLite integers are 64-bit: larger ones overflow (HTTP 500)
                return None, con.error("Bad filter", f"seed must be between 0 and {SQLITE_INT_MAX}", 400)
        if outcome and outcome not in OUTCOME_CHOICES:
            return None, con.error(
                "Bad filter", f"unknown outcome {outcome!r}; choose from {', '.join(OUTCOME_CHOICES)}", 400
            )
        return seed_val, None

    def filter_query(policy: str, task: str, seed: str, outcome: str) -> str:
        from urllib.parse import urlencode

        q = {k: v for k, v in (("policy", policy), ("task", task), ("seed", seed), ("outcome", outcome)) if v}
        return ("?" + urlencode(q)) if q else ""

    @app.get("/c/{key}/episodes", response_class=HTMLResponse)
    def episodes_page(
        key: str, policy: str = "", task: str = "", seed: str = "", outcome: str = "", page: int = 1, format: str = ""
    ):
        ref, s, err = campaign_or_error(key)
        if err:
            return err
        seed_val, err = parse_filters(seed, outcome)
        if err:
            return err
        if format:
            from kosmos_env.console.views import table_response

            rows, _ = cz.list_episodes(
                ref,
                policy=policy or None,
                task=task or None,
                seed=seed_val,
                outcome=outcome or None,
                offset=0,
                limit=SQLITE_INT_MAX,
            )
            return table_response(f"{ref.name}-episodes", list(cz.EPISODE_COLUMNS), rows, format)
        page = max(1, page)
        if page > SQLITE_INT_MAX // PAGE_SIZE:
            return con.error("Bad page", f"page must be between 1 and {SQLITE_INT_MAX // PAGE_SIZE}", 400)
        offset = (page - 1) * PAGE_SIZE
        rows, total = cz.list_episodes(
            ref,
            policy=policy or None,
            task=task or None,
            seed=seed_val,
            outcome=outcome or None,
            offset=offset,
            limit=PAGE_SIZE,
        )
        from urllib.parse import urlencode

        fq = filter_query(policy, task, seed, outcome)

        def url(p: int) -> str:
            return f"/c/{key}/episodes" + (fq + "&" if fq else "?") + urlencode({"page": p})

        return con.render(
            "episodes.html",
            s=s,
            key=key,
            rows=rows,
            total=total,
            offset=offset,
            f={"policy": policy, "task": task, "seed": seed_val, "outcome": outcome},
            outcome_choices=OUTCOME_CHOICES,
            prev_url=url(page - 1) if page > 1 else None,
            next_url=url(page + 1) if offset + len(rows) < total else None,
            fq=fq,
            download=f"/c/{key}/episodes" + (fq + "&" if fq else "?") + "format=",
        )

    @app.get("/c/{key}/episodes/{ord_}", response_class=HTMLResponse)
    def episode_page(key: str, ord_: int, policy: str = "", task: str = "", seed: str = "", outcome: str = ""):
        ref, s, err = campaign_or_error(key)
        if err:
            return err
        if not 0 <= ord_ <= SQLITE_INT_MAX:
            return con.error("Unknown episode", f"campaign {ref.name} has no episode #{ord_}", 404)
        seed_val, err = parse_filters(seed, outcome)
        if err:
            return err
        e = cz.read_episode(ref, ord_)
        if e is None:
            return con.error("Unknown episode", f"campaign {ref.name} has no episode #{ord_}", 404)
        video = None
        parts = ev.split_relpath(e.get("video"))
        if parts and ev.store_path(ref.path, *parts) is not None:
            video = {
                "url": f"/c/{key}/artifacts/{parts[0]}.{parts[1]}",
                "mime": ev.MEDIA_TYPES[parts[1]],
                "note": f"{parts[1].upper()} from the campaign's store, served by its content hash.",
            }
        actions_svg, actions_note = ev.actions_svg(ref.path, e)
        log_svgs, log_note = ev.log_svgs(ref.path, e)
        distance_svg, distance_note = ev.distance_svg(ref.path, e)
        gate_head, gate_rows, gate_note = ev.gate_table(e)
        fq = filter_query(policy, task, seed, outcome)
        near = cz.neighbours(
            ref, ord_, policy=policy or None, task=task or None, seed=seed_val, outcome=outcome or None
        )
        config = e.get("config") or {}
        instruction = ev.instruction(config, str(e.get("task")))
        return con.render(
            "episode.html",
            s=s,
            key=key,
            e=e,
            video=video,
            judgment=ev.judgment_view(e),
            actions_svg=actions_svg,
            actions_note=actions_note,
            log_svgs=log_svgs,
            log_note=log_note,
            distance_svg=distance_svg,
            distance_note=distance_note,
            gate_head=gate_head,
            gate_rows=gate_rows,
            gate_note=gate_note,
            provenance=ev.provenance(e, config, con.package_version(ref), cz.run_rows(ref)),
            artifacts=ev.artifact_status(ref.path, e),
            near=near,
            fq=fq,
            verdicts=ev.verdict_rows(e, cz.episode_judgments(ref, e["episode_id"])),
            steps=int(e.get("steps") or 0),
            fps=ev.render_fps(config),
            instruction=instruction,
            filters=[v for v in (policy, task, seed, outcome) if v],
        )

    @app.get("/c/{key}/artifacts/{name}")
    def artifact(key: str, name: str):
        ref = con.ref(key)
        if ref is None or ref.error:
            return JSONResponse({"error": "unknown campaign"}, status_code=404)
        sha, dot, ext = name.partition(".")
        if not dot or not ev.SHA256_RE.match(sha) or ext not in ev.MEDIA_TYPES:
            return JSONResponse(
                {"error": "artifacts are served by content hash only: /artifacts/<64 hex>.<ext>"}, status_code=400
            )
        try:
            known = cz.artifact_relpath(ref, sha)
        except cz.CampaignError:
            known = None
        path = ev.store_path(ref.path, sha, ext)
        if known is None or path is None or ev.split_relpath(known[0]) != (sha, ext):
            return JSONResponse({"error": "no such artifact in this campaign's store"}, status_code=404)
        return FileResponse(path, media_type=ev.MEDIA_TYPES[ext], headers={"Cache-Control": "max-age=86400, immutable"})

    @app.get("/c/{key}/analysis", response_class=HTMLResponse)
    def analysis_page(key: str, judge: str = "", format: str = "", table: str = ""):
        ref, s, err = campaign_or_error(key)
        if err:
            return err
        a, n_done, message = con.analysis(ref, judge or None)
        if format:  # one of the page's tables as a download, cell for cell what the page shows
            from fastapi.responses import PlainTextResponse

            from kosmos_env.console.views import table_response
            from kosmos_env.report.analysis_tables import analysis_tables

            if a is None:
                return PlainTextResponse(message + "\n", status_code=409)
            tables = analysis_tables(a)
            if table not in tables:
                return PlainTextResponse(
                    f"unknown table {table!r}; this analysis has {', '.join(tables)}\n", status_code=404
                )
            t = tables[table]
            rows = [dict(zip(t.columns, r, strict=True)) for r in t.rows]
            return table_response(f"{ref.name}-{table}", t.columns, rows, format)
        html = None
        if a is not None:
            from urllib.parse import urlencode

            from kosmos_env.report.analysis_html import render_analysis_html

            def download(name: str, fmt: str) -> str:
                query = {**({"judge": judge} if judge else {}), "table": name, "format": fmt}
                return f"/c/{key}/analysis?{urlencode(query)}"

            html = render_analysis_html(a, download=download)
        return con.render(
            "analysis.html",
            s=s,
            key=key,
            analysis_html=html,
            analysis_error=message,
            n_done=n_done,
            reference=con.reference,
            judges=cz.stored_judges(ref),
            chosen=(a or {}).get("judge"),
        )

    @app.get("/compare", response_class=HTMLResponse)
    def compare_page(a: str = "", b: str = "", format: str = "", table: str = "per_policy"):
        from kosmos_env.console.compare import compare_campaigns

        refs = []
        for k in (a, b):
            ref, err = lookup(k)
            if err:
                return err
            refs.append(ref)
        if refs[0].key == refs[1].key:
            return con.error("Nothing to compare", "choose two different campaigns", 400)
        try:
            context = compare_campaigns(*refs)
        except cz.CampaignError as exc:
            return con.error("Cannot compare", str(exc), 409)
        if format:
            from kosmos_env.console.views import table_response

            name = f"compare-{refs[0].name}-vs-{refs[1].name}"
            if table == "cross":
                return table_response(name + "-head-to-head", context["cross_columns"], context["cross"], format)
            if table != "per_policy":
                return con.error("Unknown table", "table must be per_policy or cross", 400)
            return table_response(name, context["per_policy_columns"], [r["csv"] for r in context["rows"]], format)
        return con.render("compare.html", **context)

    @app.get("/c/{key}/table", response_class=HTMLResponse)
    def table_page(key: str, judge: str = "", format: str = ""):
        from kosmos_env.console.views import judge_choices, policy_task_table, table_response

        ref, s, err = campaign_or_error(key)
        if err:
            return err
        choices = judge_choices(ref)
        if judge and judge not in {c["id"] for c in choices}:
            return con.error("Unknown judge", f"campaign {ref.name} has no stored verdicts of judge {judge!r}", 404)
        t = policy_task_table(ref, judge or None)
        if format:
            return table_response(f"{ref.name}-policy-by-task", t["columns"], t["rows"], format)
        return con.render(
            "table.html",
            s=s,
            key=key,
            t=t,
            judges=choices,
            judge=judge or "campaign",
            qs=(f"?judge={judge}&" if judge else "?"),
        )

    @app.get("/c/{key}/pair", response_class=HTMLResponse)
    def pair_page(
        key: str,
        a: str = "",
        b: str = "",
        task: str = "",
        seed: str = "",
        repeat: str = "0",
        measure: str = "success",
        format: str = "",
    ):
        from urllib.parse import urlencode

        from kosmos_env.console.views import pair_view, table_response

        ref, s, err = campaign_or_error(key)
        if err:
            return err
        if len(s.policies) < 2:
            return con.error("Nothing to pair", f"campaign {ref.name} ran one policy; pairing needs two", 400)
        a = a or s.policies[0]
        b = b or next(p for p in s.policies if p != a)
        if measure not in ("success", "score"):
            return con.error("Bad measure", "measure must be success or score", 400)
        try:
            pv = pair_view(ref, a, b, measure)
        except ValueError as exc:
            return con.error("Unknown policy", str(exc), 404)
        if format:
            return table_response(f"{ref.name}-pairs", pv["columns"], pv["rows"], format)
        chosen = None
        if pv["rows"]:
            want = [
                r
                for r in pv["rows"]
                if (not task or r["task"] == task)
                and (not seed or str(r["seed"]) == seed)
                and str(r["repeat"]) == (repeat or "0")
            ]
            first_diff = next((r for r in pv["rows"] if r["differ"]), pv["rows"][0])
            chosen = want[0] if want else first_diff
        sides = []
        if chosen:
            for label, o in ((a, chosen["ord_a"]), (b, chosen["ord_b"])):
                e = cz.read_episode(ref, o) if o is not None else None
                video = None
                if e:
                    parts = ev.split_relpath(e.get("video"))
                    if parts and ev.store_path(ref.path, *parts) is not None:
                        video = {"url": f"/c/{key}/artifacts/{parts[0]}.{parts[1]}", "mime": ev.MEDIA_TYPES[parts[1]]}
                sides.append(
                    {
                        "policy": label,
                        "e": e,
                        "video": video,
                        "verdicts": ev.verdict_rows(e, cz.episode_judgments(ref, e["episode_id"])) if e else [],
                    }
                )
        base = {"a": a, "b": b, "measure": measure}
        pair_steps = max([int(side["e"].get("steps") or 0) for side in sides if side["e"]] or [0])
        config = next((side["e"].get("config") for side in sides if side["e"]), None) or {}
        return con.render(
            "pair.html",
            s=s,
            key=key,
            pv=pv,
            chosen=chosen,
            sides=sides,
            a=a,
            b=b,
            measure=measure,
            pair_steps=pair_steps,
            fps=ev.render_fps(config),
            link=lambda r: (
                f"/c/{key}/pair?" + urlencode({**base, "task": r["task"], "seed": r["seed"], "repeat": r["repeat"]})
            ),
            download=f"/c/{key}/pair?" + urlencode(base) + "&format=",
        )

    @app.get("/c/{key}/disagree", response_class=HTMLResponse)
    def disagree_page(key: str, j1: str = "", j2: str = "", format: str = ""):
        from urllib.parse import urlencode

        from kosmos_env.console.views import disagreements, judge_choices, table_response

        ref, s, err = campaign_or_error(key)
        if err:
            return err
        choices = judge_choices(ref)
        if len(choices) < 2:
            return con.render(
                "disagree.html", s=s, key=key, choices=choices, d=None, j1="campaign", j2="", download="", names={}
            )
        j1 = j1 or choices[0]["id"]
        j2 = j2 or next(c["id"] for c in choices if c["id"] != j1)
        try:
            d = disagreements(ref, j1, j2)
        except (ValueError, cz.CampaignError) as exc:
            return con.error("Unknown judge", str(exc), 404)
        if format:
            return table_response(f"{ref.name}-disagreements", d["columns"], d["rows"], format)
        names = {c["id"]: c["label"] for c in choices}
        return con.render(
            "disagree.html",
            s=s,
            key=key,
            choices=choices,
            d=d,
            j1=j1,
            j2=j2,
            names=names,
            download=f"/c/{key}/disagree?" + urlencode({"j1": j1, "j2": j2}) + "&format=",
        )

    @app.get("/favicon.ico")
    def favicon():
        return Response(FAVICON_SVG, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    @app.post("/c/{key}/cancel")
    def cancel(key: str, request: Request):
        if not con.token_ok(request.headers.get("x-console-token")):
            return JSONResponse(
                {"message": "refused: a valid console token is needed (printed when the console started)"},
                status_code=403,
            )
        ref, err = lookup(key)
        if err:
            return JSONResponse({"message": "unknown or unreadable campaign"}, status_code=err.status_code)
        from kosmos_env.campaign.control import request_cancel
        from kosmos_env.campaign.ledger import Ledger, make_owner

        s, err = summary_or_error(ref)
        if err:
            return JSONResponse({"message": "unreadable campaign"}, status_code=500)
        if s.complete:
            return JSONResponse({"message": "the campaign is already finished; nothing to cancel"}, status_code=409)
        with Ledger(ref.ledger_path, create=False) as ledger:  # the one write the console makes
            new = request_cancel(ledger, f"console {make_owner('console')}")
        return JSONResponse(
            {
                "message": "cancel recorded: running episodes finish, nothing new starts; rerun the "
                "same kosmos-env eval command to resume"
                if new
                else "the campaign was already cancelled",
                "cancelled": True,
            }
        )

    return app
