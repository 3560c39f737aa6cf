// Live campaign view: the server pushes the ledger's numbers as server-sent events; this
// script only writes them into the page with textContent / DOM calls (never as HTML).
(function () {
  "use strict";
  var key = document.getElementById("live-script").getAttribute("data-key");
  var SVGNS = "http://www.w3.org/2000/svg";
  function set(id, text) { var el = document.getElementById(id); if (el) { el.textContent = text; } }
  function fmt(x, d) { return (x === null || x === undefined) ? "\u2013" : Number(x).toFixed(d); }
  function duration(s) {
    if (s === null || s === undefined) { return "\u2013"; }
    s = Math.round(s);
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + " h " : "") + (h || m ? m + " min " : "") + sec + " s";
  }
  function svg(tag, attrs) {
    var el = document.createElementNS(SVGNS, tag);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    return el;
  }
  function drawRanking(rows) {
    var box = document.getElementById("ranking");
    var W = 900, LW = 300, PW = 380, RH = 26, H = 30 + RH * Math.max(rows.length, 1);
    function short(label) { return label.length <= 40 ? label : "\u2026" + label.slice(label.length - 39); }
    var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "chart", id: "ranking-svg",
                           "font-family": "system-ui,sans-serif", "font-size": "12"});
    function x(v) { return LW + Math.max(0, Math.min(1, v)) * PW; }
    for (var g = 0; g <= 4; g++) {
      root.appendChild(svg("line", {x1: x(g / 4), x2: x(g / 4), y1: 4, y2: H - 22, stroke: "#e4e7ec"}));
      var t = svg("text", {x: x(g / 4), y: H - 6, "text-anchor": "middle", fill: "#5b6475"});
      t.textContent = (g / 4).toFixed(2); root.appendChild(t);
    }
    rows.forEach(function (r, i) {
      var y = 8 + RH * i + RH / 2;
      var lab = svg("text", {x: LW - 8, y: y + 4, "text-anchor": "end", fill: "#1d2433"});
      lab.textContent = (i + 1) + ". " + short(r.policy);
      var tip = svg("title", {}); tip.textContent = r.policy; lab.appendChild(tip); root.appendChild(lab);
      var txt;
      if (r.rate === null) { txt = "no decided episode yet"; }
      else {
        root.appendChild(svg("line", {x1: x(r.wilson[0]), x2: x(r.wilson[1]), y1: y, y2: y, stroke: "#1d2433", "stroke-width": 1.5}));
        root.appendChild(svg("line", {x1: x(r.wilson[0]), x2: x(r.wilson[0]), y1: y - 5, y2: y + 5, stroke: "#1d2433"}));
        root.appendChild(svg("line", {x1: x(r.wilson[1]), x2: x(r.wilson[1]), y1: y - 5, y2: y + 5, stroke: "#1d2433"}));
        root.appendChild(svg("circle", {cx: x(r.rate), cy: y, r: 5, fill: "#4c72b0"}));
        txt = r.rate.toFixed(2) + " [" + r.wilson[0].toFixed(2) + ", " + r.wilson[1].toFixed(2) + "]  " + r.successes + "/" + r.decided;
      }
      var val = svg("text", {x: LW + PW + 10, y: y + 4, fill: "#1d2433"});
      val.textContent = txt; root.appendChild(val);
    });
    box.replaceChildren(root);
  }
  function drawHistory(rows) {
    // two small panels against minutes since the first run started: success rate so far
    // (successes / decided, 0..1) and episodes finished per minute in each slice
    var box = document.getElementById("history");
    if (!box || !rows.length) { return; }
    var W = 560, H = 130, L = 46, R = 10, T = 18, B = 26, PW = W - L - R, PH = H - T - B;
    var tMax = Math.max(rows[rows.length - 1].t, 1e-6);
    function panel(id, title, values, yMax, fmtY) {
      var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "chart", id: id,
                             "font-family": "system-ui,sans-serif", "font-size": "11"});
      var head = svg("text", {x: L, y: 12, fill: "#1d2433"}); head.textContent = title; root.appendChild(head);
      root.appendChild(svg("rect", {x: L, y: T, width: PW, height: PH, fill: "#fafbfc", stroke: "#e4e7ec"}));
      [0, 0.5, 1].forEach(function (f) {
        var y = T + PH - f * PH;
        root.appendChild(svg("line", {x1: L, x2: L + PW, y1: y, y2: y, stroke: "#eef0f3"}));
        var lab = svg("text", {x: L - 4, y: y + 4, "text-anchor": "end", fill: "#5b6475"});
        lab.textContent = fmtY(f * yMax); root.appendChild(lab);
      });
      var pts = [];
      rows.forEach(function (r, i) {
        if (values[i] === null) { return; }
        pts.push((L + r.t / tMax * PW).toFixed(1) + "," + (T + PH - Math.min(values[i] / yMax, 1) * PH).toFixed(1));
      });
      if (pts.length) {
        root.appendChild(svg("polyline", {points: pts.join(" "), fill: "none", stroke: "#4c72b0", "stroke-width": 2}));
        pts.forEach(function (p) {  // a dot per slice: one slice alone still shows
          var xy = p.split(",");
          root.appendChild(svg("circle", {cx: xy[0], cy: xy[1], r: 2.5, fill: "#4c72b0"}));
        });
      }
      var xl = svg("text", {x: L + PW, y: H - 6, "text-anchor": "end", fill: "#5b6475"});
      xl.textContent = (tMax < 120 ? tMax.toFixed(1) + " s" : (tMax / 60).toFixed(1) + " min") + " since start";
      root.appendChild(xl);
      var x0 = svg("text", {x: L, y: H - 6, fill: "#5b6475"}); x0.textContent = "0"; root.appendChild(x0);
      return root;
    }
    var rate = rows.map(function (r) { return r.decided ? r.successes / r.decided : null; });
    var thr = rows.map(function (r) { return r.per_minute; });
    var peak = Math.max.apply(null, thr.concat([1e-9]));
    var last = rows[rows.length - 1];
    var wrap = document.createElement("div"); wrap.className = "grid2";
    wrap.appendChild(panel("history-success", "success so far (all policies): " + last.successes + "/" + last.decided,
                           rate, 1, function (v) { return v.toFixed(1); }));
    wrap.appendChild(panel("history-throughput", "episodes finished per minute", thr, peak,
                           function (v) { return v >= 10 ? String(Math.round(v)) : v.toFixed(1); }));
    box.replaceChildren(wrap);
  }
  function update(d) {
    set("done", d.queue.done); set("planned", d.planned);
    var bar = document.getElementById("done-bar");
    if (bar) { bar.style.width = (d.planned ? 100 * d.queue.done / d.planned : 0) + "%"; }
    var st = document.getElementById("state");
    if (st) { st.textContent = d.state; st.className = "state s-" + d.state.replace(/ /g, "-"); }
    ["pending", "leased", "done"].forEach(function (q) { set("q-" + q, d.queue[q]); });
    ["rolled_out", "judging"].forEach(function (q) { set("q-" + q, d.stage_queue[q]); });
    ["success", "failure", "discarded", "abstained", "error"].forEach(function (o) { set("q-" + o, d.outcomes[o]); });
    set("rate", d.rollouts_per_hour === null ? "\u2013" : Math.round(d.rollouts_per_hour).toString());
    set("run-info", d.run ? (d.run.episodes + (d.run.episodes === 1 ? " episode" : " episodes") + " this run, " + d.run.workers + " worker(s), " + d.run.executor) : "");
    if (d.warming_up) {
      set("eta", "warming up");
      set("warmup", "loading models: no episode finished yet" + (d.run ? " (run started " + new Date(d.run.started * 1000).toLocaleTimeString() + ")" : ""));
    } else {
      set("eta", d.running ? (d.eta_seconds === null ? "\u2013 (from the 2nd episode)" : duration(d.eta_seconds)) : (d.remaining ? "not running" : "done"));
      set("warmup", d.warmup_seconds === null || d.warmup_seconds === undefined ? "" :
          "warm-up " + (d.warmup_seconds < 10 ? d.warmup_seconds.toFixed(1) + " s" : duration(d.warmup_seconds)) + " before the first episode, not counted in the rate");
    }
    var running = d.state === "running";
    var box = document.getElementById("control-box"), absent = document.getElementById("cancel-absent");
    if (box) { box.hidden = !running; }
    if (absent) { absent.hidden = running; }
    drawHistory(d.history || []);
    if (d.verdict) {
      set("verdict", d.verdict.headline || "verdict: none");
      var vl = document.getElementById("verdict");
      if (vl) { vl.className = "verdict verdict-" + (d.verdict.outcome || "none"); }
    }
    Object.keys(d.seconds_per_rollout).forEach(function (k) { set("st-" + k, fmt(d.seconds_per_rollout[k], 3)); });
    if (d.money && !d.money.error) {
      set("money", d.money.total.toPrecision(3) + " " + d.money.currency);
      set("judge-share", "judge: " + d.money.judge.toPrecision(3) + " " + d.money.currency +
          (d.money.judge_share === null ? "" : " (" + (100 * d.money.judge_share).toFixed(1) + "%)"));
    } else {
      set("money", "no price table");
      var js = d.seconds_per_stage.total > 0 ? d.seconds_per_stage.judge / d.seconds_per_stage.total : null;
      set("judge-share", js === null ? "" : "judge's share of the time: " + (100 * js).toFixed(1) + "%");
    }
    if (d.control) { set("control-note", "Last control action: " + d.control.action + " by " + d.control.by + "."); }
    drawRanking(d.ranking);
    document.body.setAttribute("data-updates", String(1 + Number(document.body.getAttribute("data-updates") || 0)));
  }
  var tokenBox = document.getElementById("token");
  try { tokenBox.value = sessionStorage.getItem("kosmos-console-token") || ""; } catch (e) { /* storage off */ }
  document.getElementById("cancel-form").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var name = document.getElementById("control-box").getAttribute("data-name");
    if (!window.confirm("Cancel campaign " + name + "? Running episodes finish and are recorded; nothing new " +
                        "starts. Rerun the same kosmos-env eval command to resume.")) {
      set("cancel-result", "not cancelled");
      return;
    }
    try { sessionStorage.setItem("kosmos-console-token", tokenBox.value); } catch (e) { /* storage off */ }
    fetch("/c/" + key + "/cancel", {method: "POST", headers: {"X-Console-Token": tokenBox.value}})
      .then(function (r) { return r.json().then(function (j) { return [r.status, j]; }); })
      .then(function (p) { set("cancel-result", p[1].message || p[1].detail || String(p[0])); })
      .catch(function (e) { set("cancel-result", "request failed: " + e); });
  });
  var source = new EventSource("/c/" + key + "/events");
  source.onmessage = function (ev) { update(JSON.parse(ev.data)); set("live-status", "Live: connected; last update " + new Date().toLocaleTimeString() + "."); };
  source.onerror = function () { set("live-status", "Live: connection lost, retrying\u2026"); };
}());
