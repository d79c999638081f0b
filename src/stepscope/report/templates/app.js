// Draws the plotly figures passed as JSON and makes the tables sortable; no network, no eval.
(function () {
  "use strict";
  var figures = JSON.parse(document.getElementById("stepscope-figures").textContent);
  Object.keys(figures).forEach(function (id) {
    var el = document.getElementById(id);
    if (el) {
      // No mode bar: where the browser reports no hover (touch, headless) plotly shows it always, over the legend.
      // Drag zooms and a double-click resets without it.
      Plotly.newPlot(el, figures[id].data, figures[id].layout, {responsive: true, displayModeBar: false});
    }
  });
  // Numeric cells carry their raw value in data-v; others sort by their text.
  function key(cell) {
    var raw = cell.getAttribute("data-v");
    return raw === null ? cell.textContent.trim().toLowerCase() : parseFloat(raw);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, col) {
      th.classList.add("sortable");
      th.addEventListener("click", function () {
        var desc = !th.classList.contains("desc");
        table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(desc ? "desc" : "asc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          var c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
