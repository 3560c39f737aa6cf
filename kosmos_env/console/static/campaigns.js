// Campaigns page: refresh the table every few seconds without reloading the page (the compare
// form keeps its choices). The server renders the rows; the new table body is taken from the
// fetched page, parsed as an inert document (scripts in it never run), and swapped in.
(function () {
  "use strict";
  var PERIOD_MS = Number(document.getElementById("campaigns-script").getAttribute("data-period")) || 4000;
  function refresh() {
    fetch(window.location.pathname, {cache: "no-store", headers: {"Accept": "text/html"}})
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("#campaigns tbody"), old = document.querySelector("#campaigns tbody");
        if (fresh && old) { old.replaceWith(document.adoptNode(fresh)); }
        var when = document.getElementById("refreshed");
        if (when) { when.textContent = "refreshed " + new Date().toLocaleTimeString(); }
        document.body.setAttribute("data-refreshes", String(1 + Number(document.body.getAttribute("data-refreshes") || 0)));
      })
      .catch(function (e) {
        var when = document.getElementById("refreshed");
        if (when) { when.textContent = "refresh failed (" + e.message + "), retrying"; }
      })
      .then(function () { window.setTimeout(refresh, PERIOD_MS); });
  }
  window.setTimeout(refresh, PERIOD_MS);
}());
