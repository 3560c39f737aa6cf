// Episode page: one slider drives the video and a cursor line on every plot, and the video
// drives them back while it plays. Frame k is the scene after control step k (frame 0 is the
// initial scene); plots are drawn against the control step, so frame k sits at step k - 1.
// The server writes each plot's area as data attributes (data-left, data-plot-width, data-x0,
// data-x1) on its <svg>; this script only moves attributes, it never writes markup.
(function () {
  "use strict";
  var box = document.getElementById("scrub-box");
  if (!box) { return; }
  var v = document.getElementById("video");
  var slider = document.getElementById("scrubber");
  var label = document.getElementById("scrub-label");
  var steps = Number(box.getAttribute("data-steps")) || 0;
  var fpsAttr = Number(box.getAttribute("data-fps"));
  var plots = Array.prototype.slice.call(document.querySelectorAll("svg[data-scrub]"));
  var current = -1;

  function fps() {
    if (fpsAttr > 0) { return fpsAttr; }
    // no stored rate: spread the steps evenly over the video (frame 0 plus one per step)
    return (v && v.duration > 0 && isFinite(v.duration)) ? (steps + 1) / v.duration : 1;
  }
  function clamp(k) { return Math.max(0, Math.min(steps, k)); }
  function frameAt(t) { return clamp(Math.floor(t * fps() + 1e-6)); }
  function timeOf(k) { return (k + 0.02) / fps(); }

  function show(k) {
    k = clamp(k);
    if (k === current) { return; }
    current = k;
    slider.value = String(k);
    label.textContent = "frame " + k + " of " + steps + (k === 0 ? " (initial scene)" : " (after control step " + k + ")");
    plots.forEach(function (svg) {
      var line = svg.querySelector("line.cursor");
      if (!line) { return; }
      var x = k - 1;
      var x0 = Number(svg.getAttribute("data-x0")), x1 = Number(svg.getAttribute("data-x1"));
      if (x < x0 || x > x1) { line.setAttribute("visibility", "hidden"); return; }
      var px = Number(svg.getAttribute("data-left")) + (x - x0) / (x1 - x0) * Number(svg.getAttribute("data-plot-width"));
      line.setAttribute("x1", px.toFixed(1)); line.setAttribute("x2", px.toFixed(1));
      line.setAttribute("visibility", "visible");
    });
    document.body.setAttribute("data-cursor-frame", String(k));
  }
  function seek(k) {
    k = clamp(k);
    if (v) {
      v.pause();
      try { v.currentTime = timeOf(k); } catch (e) { /* not seekable yet */ }
    }
    show(k);
  }

  slider.addEventListener("input", function () { seek(Number(slider.value)); });
  document.getElementById("play").addEventListener("click", function () {
    if (!v) { return; }
    if (v.paused) { v.play(); } else { v.pause(); }
  });
  plots.forEach(function (svg) {
    svg.addEventListener("click", function (ev) {
      var r = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
      var sx = (ev.clientX - r.left) * (vb && vb.width ? vb.width / r.width : 1);
      var x0 = Number(svg.getAttribute("data-x0")), x1 = Number(svg.getAttribute("data-x1"));
      var x = x0 + (sx - Number(svg.getAttribute("data-left"))) / Number(svg.getAttribute("data-plot-width")) * (x1 - x0);
      seek(Math.round(x) + 1);
    });
  });

  if (v) {
    function mark() { document.body.setAttribute("data-video", v.paused ? "paused" : "playing"); }
    ["play", "playing", "pause"].forEach(function (e) { v.addEventListener(e, mark); });
    v.addEventListener("error", function () { document.body.setAttribute("data-video", "error"); });
    function follow() { show(frameAt(v.currentTime)); }
    ["timeupdate", "seeked", "loadeddata"].forEach(function (e) { v.addEventListener(e, function () { mark(); follow(); }); });
    // timeupdate fires a few times a second; while playing follow every painted frame
    (function tick() { if (!v.paused) { follow(); } window.requestAnimationFrame(tick); }());
  }
  show(0);
}());
