"""The console's cross-run compare page says what it found (issue 42, item 4): one headline
sentence first (which run a policy does better in, or that no difference is detectable yet, with
its paired interval), every column labelled paired or unpaired, and signed numbers that keep
their sign. The headline is checked on built verdicts (the issue's [-0.23, -0.0036] among them),
the page through the app's HTTP interface on two real tabletop campaigns."""

from __future__ import annotations

import csv
import io
import re
import shutil
from html.parser import HTMLParser

import pytest

from kosmos_env.stats.verdict import paired_verdict
from tests.support.printed import assert_printed_as_it_is, visible_text

pytest.importorskip("fastapi", reason="the console extra is not installed (pip install 'kosmos-env[console]')")
pytest.importorskip("httpx", reason="the console extra is not installed (pip install 'kosmos-env[console]')")

from fastapi.testclient import TestClient  # noqa: E402

from kosmos_env.console.app import create_app  # noqa: E402
from kosmos_env.console.campaigns import folder_key  # noqa: E402
from kosmos_env.console.compare import compare_headline  # noqa: E402
from tests.support.publish_bundles import campaign  # noqa: E402

TOKEN = "compare-page-token-0123456789"
SIGNED = r"[+-]\d+\.\d+"


def _b_vs_a(n12: int, n21: int, n: int, policy: str = "p"):
    """The verdict of B's run against A's with ``n12`` pairs only B solved, ``n21`` only A did."""
    xb = [1] * n12 + [0] * n21 + [0] * (n - n12 - n21)
    xa = [0] * n12 + [1] * n21 + [0] * (n - n12 - n21)
    return paired_verdict(xb, xa, names=(f"{policy} in B", f"{policy} in A"))


def test_headline_keeps_the_sign_of_an_upper_end_of_minus_0_0036():
    v = _b_vs_a(0, 4, 40)  # B - A: -0.10 [-0.2305, -0.0036], the interval
    assert v.outcome == "b_better" and -0.005 < v.interval[1] < 0
    h = compare_headline([("scripted:skill=0.5", v)])
    assert h["outcome"] == "decided"
    assert h["text"] == (
        "Paired over the seeds both runs decided: scripted:skill=0.5 succeeds more often in A than in B "
        "(B - A -0.10 [-0.23, -0.004] over 40 paired seeds)."
    )
    assert "+0.00" not in h["text"]


def _one_sentence(text: str) -> bool:
    return text.endswith(".") and re.sub(r"\d+\.\d+", "", text).count(".") == 1


def test_headline_says_undecided_with_its_interval_and_counts_the_rest():
    same = _b_vs_a(3, 3, 20)
    h = compare_headline([("p", same)])
    assert h["outcome"] == "undecided" and "no detectable difference between the runs for p yet" in h["text"]
    assert re.search(rf"B - A {SIGNED} \[{SIGNED}, {SIGNED}\] over 20 paired seeds", h["text"])
    # four shared policies: the decided one by name with its interval, the three undecided counted
    shared = [("w", _b_vs_a(12, 0, 12)), ("x", same), ("y", same), ("z", same)]
    h = compare_headline(shared)
    assert "w succeeds more often in B than in A (B - A +1.00 [+0.52, +1.00] over 12 paired seeds)" in h["text"]
    assert "no detectable difference yet for the other 3 policies both ran" in h["text"]
    assert _one_sentence(h["text"]) and h["outcome"] == "decided"
    assert compare_headline([])["outcome"] == "none"


def test_headline_says_which_runs_best_policy_ranks_higher():
    best = paired_verdict([1] * 12, [0] * 12, names=("skill=1.0 (A)", "skill=0.7 (B)"))
    h = compare_headline([("random", _b_vs_a(0, 0, 12))], ("skill=1.0", "skill=0.7", best))
    assert h["text"].startswith(
        "Paired over the seeds both runs decided: A's best, skill=1.0, beats B's best, skill=0.7 "
        "(A - B +1.00 [+0.52, +1.00] over 12 paired seeds); no detectable difference between the runs for random yet"
    )
    assert _one_sentence(h["text"]) and h["outcome"] == "decided"
    worse = paired_verdict([0] * 12, [1] * 12, names=("skill=1.0 (A)", "skill=0.7 (B)"))
    assert (
        "B's best, skill=0.7, beats A's best, skill=1.0 (A - B -1.00 [-1.00, -0.52]"
        in (compare_headline([], ("skill=1.0", "skill=0.7", worse))["text"])
    )


class _Head(HTMLParser):
    """The header rows of table ``table_id``: per row, (label, colspan, data-pairing) per cell."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.inside, self.in_head, self.rows, self.cell = table_id, False, False, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.inside = a.get("id") == self.table_id
        elif self.inside and tag == "thead":
            self.in_head = True
        elif self.in_head and tag == "tr":
            self.rows.append([])
        elif self.in_head and tag == "th":
            self.cell = ["", int(a.get("colspan", 1)), a.get("data-pairing")]

    def handle_endtag(self, tag):
        if tag == "thead":
            self.in_head = False
        elif tag == "th" and self.cell is not None:
            self.rows[-1].append((self.cell[0].strip(), self.cell[1], self.cell[2]))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[0] += data


def column_pairing(html: str, table_id: str) -> dict[str, str | None]:
    """Column label -> the pairing of the group above it (the first header row, colspans expanded)."""
    p = _Head(table_id)
    p.feed(html)
    groups, labels = p.rows
    above = [pairing for _, span, pairing in groups for _ in range(span)]
    assert len(above) == len(labels), (groups, labels)
    return {label: pairing for (label, _, _), pairing in zip(labels, above, strict=True)}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Campaigns a (skill 1.0 and random, 3 seeds) and b (skill 0.7 and random, 4 seeds): same spec,
    random in both, the scripted policies in one each."""
    root = tmp_path_factory.mktemp("compare-page")
    for name in ("a", "b"):
        shutil.copytree(campaign(tmp_path_factory, name), root / name)
    return root


def test_compare_page_opens_with_a_headline_and_labels_paired_and_unpaired(two_runs):
    app = create_app([str(two_runs)], TOKEN, analysis_options={"n_boot": 200, "n_splits": 50})
    c = TestClient(app, base_url="http://127.0.0.1")
    query = {"a": folder_key(two_runs / "a"), "b": folder_key(two_runs / "b")}
    page = c.get("/compare", params=query)
    assert page.status_code == 200
    html = page.text
    text = visible_text(html)
    lines = text.splitlines()
    # the headline is the line under the title, one sentence on the shared policy with its interval
    title = next(i for i, line in enumerate(lines) if line.startswith("Side by side:"))
    headline = lines[title + 1]
    assert 'id="headline"' in html and html.index('id="headline"') < html.index('id="compare"')
    assert headline.startswith("Paired over the seeds both runs decided: ") and _one_sentence(headline)
    # the runs' best policies differ (skill 1.0 in A, skill 0.7 in B): which ranks higher comes first,
    # then random, which both ran
    assert re.search(
        r"A's best, scripted:skill=1\.0, (and|beats) B's best, scripted:skill=0\.7 |B's best, "
        r"scripted:skill=0\.7, beats A's best, scripted:skill=1\.0 ",
        headline,
    ), headline
    best = re.search(rf"\(A - B ({SIGNED}) \[({SIGNED}), ({SIGNED})\] over (\d+) paired seeds", headline).groups()
    cross = list(
        csv.DictReader(io.StringIO(c.get("/compare", params={**query, "table": "cross", "format": "csv"}).text))
    )
    row = next(r for r in cross if (r["a"], r["b"]) == ("scripted:skill=1.0", "scripted:skill=0.7"))
    assert int(best[3]) == int(row["n"])
    for printed, value in zip(best[:3], ("difference", "lower", "upper"), strict=True):
        assert_printed_as_it_is(printed, float(row[value]))
    assert re.search(rf"for random yet \(B - A {SIGNED} \[{SIGNED}, {SIGNED}\] over 3 paired seeds", headline)
    # every column but the policy's sits under a group that says paired or unpaired
    pairing = column_pairing(html, "compare")
    assert pairing.pop("policy") is None
    assert {k: v for k, v in pairing.items() if v == "unpaired"}.keys() == {"rate A", "Wilson A", "rate B", "Wilson B"}
    assert all(v == "paired" for k, v in pairing.items() if not k.startswith(("rate", "Wilson"))), pairing
    assert set(column_pairing(html, "cross").values()) <= {None, "paired"}
    # the signed cells are the downloaded numbers, signs kept
    rows = list(csv.DictReader(io.StringIO(c.get("/compare", params={**query, "format": "csv"}).text)))
    shared = [r for r in rows if r["b_minus_a"]]
    assert [r["policy"] for r in shared] == ["random"]
    row = next(line for line in lines if line.startswith("random ") and "paired seed" in line)
    diff, lo, hi = re.search(rf"({SIGNED})\s+\[({SIGNED}), ({SIGNED})\]", row).groups()
    for printed, value in zip((diff, lo, hi), ("b_minus_a", "lower", "upper"), strict=True):
        assert_printed_as_it_is(printed, float(shared[0][value]))
