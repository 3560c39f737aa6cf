"""report and analyze on a real (small) campaign: `kosmos-env eval` on the MuJoCo tabletop."""

from __future__ import annotations

import json
import re

import pytest

from kosmos_env import cli
from tests.conftest import requires_extra
from tests.support.campaign import tabletop_eval_argv

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "c"
    prices = ["--price-table", '{"accelerator_per_hour": {"cpu": 0.1, "h100": 2.5}, "world": "h100", "judge": "h100"}']
    rc = cli.main(tabletop_eval_argv(out, ["scripted:skill=1.0", "random"], *prices, seeds=3, video=True))
    assert rc == 0
    return out


@requires_extra("results")
def test_report_on_a_real_campaign(campaign, capsys):
    assert cli.main(["report", str(campaign)]) == 0
    results = json.loads((campaign / "results.json").read_text())
    html = (campaign / "report.html").read_text()
    sec = html[html.index("<h2>Ranking</h2>") : html.index("<h2>Success per policy")]
    # our recomputation ranks like the campaign runner's own aggregate
    assert re.findall(r'<td class="l">([^<]+)</td>', sec) == results["aggregated"]["ranking"]
    assert len(re.findall(r'<img class="plot"', html)) == 4
    assert html.count("data:image/gif;base64,") >= 2  # at least one rollout per policy
    assert "USD per 1000 rollouts" in html


def test_analyze_on_a_real_campaign(campaign, capsys):
    assert cli.main(["analyze", str(campaign), "--n-boot", "300", "--n-splits", "100"]) == 0
    out = capsys.readouterr().out
    a = json.loads((campaign / "analysis.json").read_text())
    agg = json.loads((campaign / "results.json").read_text())["aggregated"]["per_policy"]
    for p, s in agg.items():
        assert a["per_policy"][p]["success_rate"] == pytest.approx(s["success_rate"])
        assert a["per_policy"][p]["wilson"] == pytest.approx(s["wilson_95"])
    # the tabletop logs carry per-step ground truth, so the horizon section is computed
    h = a["horizon"]
    assert "skipped" not in h and h["horizons"][-1] == max(h["horizons"]) >= 5
    assert "horizon sensitivity" in out and "anytime-valid paired A/B" in out
