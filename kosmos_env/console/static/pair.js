// Pair page: one slider and one play button for both videos, so the two policies are seen at
// the same control step of the same seed. Frame k is the scene after control step k.
(function () {
  "use strict";
  var box = document.getElementById("pair-scrub");
  if (!box) { return; }
  var videos = Array.prototype.slice.call(document.querySelectorAll("video.pair-video"));
  var slider = document.getElementById("pair-scrubber");
  var label = document.getElementById("pair-scrub-label");
  var steps = Number(box.getAttribute("data-steps")) || 0;
  var fps = Number(box.getAttribute("data-fps")) || 0;
  function rate(v) { return fps > 0 ? fps : ((v.duration > 0 && isFinite(v.duration)) ? (steps + 1) / v.duration : 1); }
  function show(k) {
    slider.value = String(k);
    label.textContent = "frame " + k + " of " + steps + (k === 0 ? " (initial scene)" : " (after control step " + k + ")");
    document.body.setAttribute("data-pair-frame", String(k));
  }
  slider.addEventListener("input", function () {
    var k = Number(slider.value);
    videos.forEach(function (v) {
      v.pause();
      // a shorter episode (it ended early) holds its last frame
      try { v.currentTime = Math.min((k + 0.02) / rate(v), Math.max(v.duration - 0.001, 0)); } catch (e) { /* not ready */ }
    });
    show(k);
  });
  document.getElementById("pair-play").addEventListener("click", function () {
    var playing = videos.some(function (v) { return !v.paused; });
    videos.forEach(function (v) {
      if (playing) { v.pause(); } else { v.currentTime = 0; v.play(); }
    });
  });
  if (videos.length) {
    var lead = videos[0];
    lead.addEventListener("timeupdate", function () {
      show(Math.max(0, Math.min(steps, Math.floor(lead.currentTime * rate(lead) + 1e-6))));
    });
  }
}());
