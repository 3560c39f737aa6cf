"""The leaderboard as one static, self-contained HTML page (no network, no external files).

Two sections, never mixed: **Verified by re-run** (boards whose entries the board earned by running
the policy on its own challenge seeds) and **Self-reported** (results checked against their own
evidence, whose policy nobody re-ran), each section's boards ranked apart. Per board: a sortable
table (click a header; ``index.html#sort=<column>[:asc|desc]`` sorts on load, which is how tests
drive the script headlessly) and an inline SVG plot of every entry's success rate with its Wilson
95% interval. Each row names the policy by the identity the board established (the submitter's
label beside it, as a label) and lists what was re-run, what was re-derived and what was taken on
trust. Below: every rejected submission with its reason. Every string from a submission is
HTML-escaped; submissions never reach the script as code.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1b1f24;max-width:1500px}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2.2rem}
table{border-collapse:collapse;margin:.8rem 0;font-size:.9rem}
th,td{padding:.3rem .6rem;border-bottom:1px solid #d0d7de;text-align:right}
th{cursor:pointer;background:#f6f8fa;user-select:none}th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
td.l,th.l{text-align:left}code{font-size:.85em}
.badge{display:inline-block;padding:0 .4rem;border-radius:.3rem;font-size:.8rem;margin-left:.4rem}
.official{background:#dafbe1;color:#116329}.nondefault{background:#fff1e5;color:#953800}
.tie{color:#953800}.sep{color:#116329}.muted{color:#57606a;font-size:.85rem}
.rejected td{text-align:left}
td.checks{text-align:left;font-size:.8rem;min-width:22rem;max-width:32rem}td.checks ul{margin:0 0 .2rem 1rem;padding:0}
.verified{background:#ddf4ff;color:#0a3069}.selfreported{background:#fff8c5;color:#7d4e00}
"""

_SCRIPT = r"""
(function () {
  function value(td) {
    var v = td.getAttribute('data-sort');
    if (v === null) { v = td.textContent; }
    if (v === '') { return null; }
    var n = Number(v);
    return isNaN(n) ? v.toLowerCase() : n;
  }
  function sortTable(table, col, desc) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = value(a.cells[col]), y = value(b.cells[col]);
      if (x === y) { return 0; }
      if (x === null) { return 1; }      // missing values always last
      if (y === null) { return -1; }
      var r;
      if (typeof x === typeof y) { r = x < y ? -1 : 1; } else { r = typeof x === 'number' ? -1 : 1; }
      return desc ? -r : r;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) {
      heads[i].setAttribute('aria-sort', i === col ? (desc ? 'descending' : 'ascending') : 'none');
    }
    table.setAttribute('data-sorted-by', heads[col].getAttribute('data-key') + ':' + (desc ? 'desc' : 'asc'));
  }
  var tables = document.querySelectorAll('table.leaderboard');
  tables.forEach(function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.addEventListener('click', function () {
        var desc = th.getAttribute('aria-sort') === 'ascending' ||
          (th.getAttribute('aria-sort') !== 'descending' && th.getAttribute('data-desc') === '1');
        sortTable(table, col, desc);
      });
    });
  });
  var m = /sort=([a-z_]+)(?::(asc|desc))?/.exec(window.location.hash);
  if (m) {
    tables.forEach(function (table) {
      var heads = table.tHead.rows[0].cells;
      for (var i = 0; i < heads.length; i++) {
        if (heads[i].getAttribute('data-key') === m[1]) { sortTable(table, i, m[2] !== 'asc'); }
      }
    });
  }
  document.body.setAttribute('data-sortable', 'ready');
})();
"""

# (key, header, left-aligned, sort descending on first click)
_COLUMNS = [
    ("rank", "Rank", False, False),
    ("policy", "Policy", True, False),
    ("success", "Success", False, True),
    ("wilson", "Wilson 95% CI", False, True),
    ("worst", "Worst-case 95%", False, True),
    ("n", "n", False, True),
    ("discarded", "Discarded", False, True),
    ("abstained", "Abstained", False, True),
    ("errors", "Errors", False, True),
    ("next", "vs next", False, False),
    ("judge_share", "Judge's share of the bill", False, True),
    ("campaign", "Campaign", True, False),
    ("checks", "Re-run / re-derived / taken on trust", True, False),
]
#: how the page names each standing (leaderboard.VERIFIED, leaderboard.SELF_REPORTED)
STANDINGS = {
    "verified_by_rerun": ("verified", "verified by re-run"),
    "self_reported": ("selfreported", "self-reported: not re-run"),
}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _ci(pair: list | None) -> str:
    return "–" if not pair else f"[{100 * pair[0]:.1f}, {100 * pair[1]:.1f}]"


def _num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


def _judge_share_cell(e: dict[str, Any]) -> str:
    """The campaign judge's share of the money (of the time without a price table), named in the title."""
    money = e.get("judge_share_money")
    share = money if money is not None else e.get("judge_share_time")
    what = "money" if money is not None else "time (no price table)"
    title = f"judge {e.get('judge_name', '?')}: share of the {what}, warm inference"
    return f'<td data-sort="{_num(share)}" title="{escape(title)}">{_pct(share)}</td>'


def _row(e: dict[str, Any]) -> str:
    if e["separable_from_next"] is None:
        nxt, nxt_sort = "–", ""
    elif e["separable_from_next"]:
        nxt, nxt_sort = '<span class="sep">separable</span>', "1"
    else:
        nxt, nxt_sort = '<span class="tie">not separable</span>', "0"
    diff = e.get("diff_95_to_next")
    nxt_title = f' title="95% CI of the difference: {escape(_ci(diff))}"' if diff else ""
    hub = f'<br><span class="muted">{escape(e["hub_model_id"])}</span>' if e.get("hub_model_id") else ""
    ident = e.get("identity") or {}
    if ident.get("digest"):
        hub += (
            f'<br><span class="muted identity" title="{escape(ident.get("what", ""))}">identity '
            f"<code>{escape(ident['digest'][:16])}</code>"
            f"{' (stated by its server)' if ident.get('stated_by') == 'server' else ''}</span>"
        )
    labels = [x for x in e.get("submitted_as") or [] if x != e["policy"]]
    if labels:
        hub += f'<br><span class="muted submitted-as">submitted as {escape(", ".join(labels))}</span>'
    cells = [
        f'<td data-sort="{e["rank"]}">{e["rank"]}</td>',
        f'<td class="l policy" data-sort="{escape(e["policy"])}"><code>{escape(e["policy"])}</code>{hub}</td>',
        f'<td data-sort="{_num(e["success_rate"])}">{_pct(e["success_rate"])}</td>',
        f'<td data-sort="{_num(e["wilson_95"][0] if e["wilson_95"] else None)}">{_ci(e["wilson_95"])}</td>',
        f'<td data-sort="{_num(e["worst_case_95"][0] if e["worst_case_95"] else None)}">{_ci(e["worst_case_95"])}</td>',
        f"<td>{e['n']}</td>",
        f"<td>{e['discarded']}</td>",
        f"<td>{e['abstained']}</td>",
        f"<td>{e['errors']}</td>",
        f'<td data-sort="{nxt_sort}"{nxt_title}>{nxt}</td>',
        _judge_share_cell(e),
        f'<td class="l" data-sort="{escape(e["campaign_id"])}"><code>{escape(e["campaign_id"])}</code></td>',
        _checks_cell(e.get("checks") or {}),
    ]
    standing = escape(e.get("standing", ""))
    return (
        f'<tr data-policy="{escape(e["policy"])}" data-rank="{e["rank"]}" data-standing="{standing}">'
        + "".join(cells)
        + "</tr>"
    )


def _checks_cell(checks: dict[str, list[str]]) -> str:
    """What the entry's numbers rest on: re-run here, re-derived from evidence, believed."""
    parts = []
    for key, title in (("re_run", "Re-run"), ("re_derived", "Re-derived"), ("on_trust", "Taken on trust")):
        lines = checks.get(key) or ["nothing"]
        items = "".join(f"<li>{escape(x)}</li>" for x in lines)
        parts.append(f'<b>{title}:</b><ul class="{key.replace("_", "-")}">{items}</ul>')
    return f'<td class="l checks">{"".join(parts)}</td>'


def _plot(entries: list[dict[str, Any]], idx: int) -> str:
    """Inline SVG: one row per entry, a dot at the success rate and a bar over its Wilson interval."""
    left, width, row_h, top = 260, 420, 24, 28
    height = top + row_h * len(entries) + 30
    parts = [
        f'<svg class="plot" id="plot-{idx}" xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" '
        f'height="{height}" role="img" aria-label="success rate with Wilson 95% intervals">'
    ]
    for t in range(0, 101, 20):
        x = left + width * t / 100
        parts.append(f'<line x1="{x}" y1="{top - 8}" x2="{x}" y2="{height - 26}" stroke="#d0d7de"/>')
        parts.append(f'<text x="{x}" y="{height - 10}" font-size="11" text-anchor="middle">{t}%</text>')
    for i, e in enumerate(entries):
        y = top + row_h * i + row_h / 2
        label = e["policy"] if len(e["policy"]) <= 38 else e["policy"][:37] + "…"
        parts.append(f'<text x="{left - 8}" y="{y + 4}" font-size="12" text-anchor="end">{escape(label)}</text>')
        if e["wilson_95"]:
            x0, x1 = (left + width * v for v in e["wilson_95"])
            parts.append(
                f'<line class="ci" x1="{x0:.1f}" y1="{y}" x2="{x1:.1f}" y2="{y}" stroke="#0969da" stroke-width="3"/>'
            )
        if e["success_rate"] is not None:
            cx = left + width * e["success_rate"]
            parts.append(
                f'<circle class="rate" cx="{cx:.1f}" cy="{y}" r="5" fill="#1b1f24"><title>'
                f"{escape(e['policy'])}: {_pct(e['success_rate'])} {_ci(e['wilson_95'])}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _board(board: dict[str, Any], idx: int) -> str:
    badge = (
        '<span class="badge official">official</span>'
        if board["official"]
        else '<span class="badge nondefault">non-default spec or judge</span>'
    )
    cls_name, words = STANDINGS.get(board.get("standing", "self_reported"), STANDINGS["self_reported"])
    badge += f'<span class="badge {cls_name}">{words}</span>'
    cls = ' class="l"'
    heads = "".join(
        f'<th data-key="{k}" data-desc="{int(d)}"{cls if left else ""}>{escape(h)}</th>' for k, h, left, d in _COLUMNS
    )
    rows = "".join(_row(e) for e in board["entries"])
    overrides = board.get("spec_overrides") or {}
    lines = [
        f'<section class="board" id="board-{idx}" data-standing="{escape(board.get("standing", ""))}">',
        f"<h2>{escape(board['env_id'])} · spec <code>{escape(board['spec_hash'][:12])}</code>{badge}</h2>",
        f'<p class="muted">spec hash <code>{escape(board["spec_hash"])}</code>; success judged by '
        f"<b>{escape(board['entries'][0].get('judge_name', '?') if board['entries'] else '?')}</b> "
        f"<code>{escape(json.dumps(board['judge'], sort_keys=True))}</code>"
        + (f"; overrides <code>{escape(json.dumps(overrides, sort_keys=True))}</code>" if overrides else "")
        + f"; campaigns: {escape(', '.join(board['campaigns']))}</p>",
    ]
    lines += [f'<p class="muted">{escape(n)}</p>' for n in board["notes"]]
    red = board.get("rederivation") or {}
    if red.get("rederived") or red.get("on_trust"):  # what the ranking rests on: recomputed, or believed
        lines.append(
            '<p class="muted rederivation">Re-derived here: '
            + escape("; ".join(red.get("rederived") or ["nothing"]))
            + ". Taken on trust: "
            + escape("; ".join(red.get("on_trust") or ["nothing"]))
            + ".</p>"
        )
    lines += [
        f'<table class="leaderboard" id="lb-{idx}" data-standing="{escape(board.get("standing", ""))}"><thead>'
        f"<tr>{heads}</tr></thead><tbody>{rows}</tbody></table>",
        _plot(board["entries"], idx),
        "</section>",
    ]
    return "\n".join(lines)


def _rejected(rejected: list[dict[str, Any]]) -> str:
    if not rejected:
        return '<h2>Rejected submissions</h2><p class="muted" id="no-rejections">none</p>'
    rows = "".join(
        f'<tr class="rejection" data-check="{escape(r["check"])}"><td><code>{escape(r["submission"])}'
        f"</code></td><td>{escape(r['check'])}</td><td>{escape(r['reason'])}</td></tr>"
        for r in rejected
    )
    return (
        '<h2>Rejected submissions</h2><table class="rejected" id="rejected"><thead><tr><th class="l">Submission'
        '</th><th class="l">Check</th><th class="l">Reason</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _section(boards: list[tuple[int, dict[str, Any]]], standing: str, data: dict[str, Any]) -> str:
    if standing == "verified_by_rerun":
        head = '<section class="standing" id="verified"><h2>Verified by re-run</h2>'
        intro = escape(
            "Every number below comes from episodes this board ran itself, on challenge seeds it drew from its "
            "own secret after the submission arrived; a policy is named by the identity the board established."
        )
        board = data.get("board") or {}
        if board.get("secret_commitment"):
            intro += (
                f" Challenge seeds: {escape(board.get('challenge', ''))}. The sha256 commitment to the secret is "
                f'<code class="commitment">{escape(board["secret_commitment"])}</code>.'
            )
        empty = (
            '<p class="muted" id="no-verified">No policy was re-run by this board. '
            "<code>kosmos-env leaderboard build</code> checks results alone; <code>kosmos-env leaderboard run</code> "
            "runs the submitted policies.</p>"
        )
        intro_html = f'<p class="muted">{intro}</p>'
    else:
        head = '<section class="standing" id="self-reported"><h2>Self-reported: not re-run</h2>'
        intro_html = (
            '<p class="muted">Results checked against their own evidence (every file\'s sha256, the env spec '
            "hash, the design, every number recomputed, outcomes re-derived from the stored artifacts). That "
            "shows the evidence is self-consistent, not which policy produced it: these entries are the "
            "submitters' claims, ranked only among themselves.</p>"
        )
        empty = '<p class="muted" id="no-self-reported">none</p>'
    body = "\n".join(_board(b, i) for i, b in boards) or empty
    return "\n".join([head, intro_html, body, "</section>"])


def render_html(data: dict[str, Any]) -> str:
    """The whole page as one string."""
    method = data.get("method", {})
    indexed = list(enumerate(data["boards"]))
    verified = [(i, b) for i, b in indexed if b.get("standing") == "verified_by_rerun"]
    others = [(i, b) for i, b in indexed if b.get("standing") != "verified_by_rerun"]
    runs = len(data.get("runs") or [])
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>Kosmos-Env leaderboard</title>",
            f"<style>{_CSS}</style></head><body>",
            "<h1>Kosmos-Env leaderboard</h1>",
            f'<p class="muted">Built {escape(data.get("built", ""))} by kosmos-env {escape(data.get("package_version", ""))}'
            f": {runs} polic{'y' if runs == 1 else 'ies'} re-run by the board, {len(data['accepted'])} self-reported "
            f"result bundle(s) accepted, {len(data['rejected'])} rejected. Every number was recomputed from per-episode "
            "rows after checking each file's sha256 and the env spec hash. "
            f"Success: {escape(method.get('success_rate', ''))}. Intervals: {escape(method.get('interval', ''))}. "
            f'"not separable": {escape(method.get("separable", ""))}. Episodes: {escape(method.get("episodes", ""))}.</p>',
            '<p id="no-boards">No submission was accepted.</p>' if not indexed else "",
            _section(verified, "verified_by_rerun", data),
            _section(others, "self_reported", data),
            _rejected(data["rejected"]),
            f"<script>{_SCRIPT}</script>",
            "</body></html>",
            "",
        ]
    )
