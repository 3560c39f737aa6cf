// Episode page: report the video element's playback state on the page (used by the browser test).
(function () {
  "use strict";
  var v = document.getElementById("video");
  if (!v) { return; }
  function mark() { document.body.setAttribute("data-video", v.paused ? "paused" : "playing"); }
  ["play", "playing", "pause", "timeupdate"].forEach(function (e) { v.addEventListener(e, mark); });
  v.addEventListener("error", function () { document.body.setAttribute("data-video", "error"); });
}());
