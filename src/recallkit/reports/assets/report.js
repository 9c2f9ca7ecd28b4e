// The per-class table: one page of rows at a time, sorted on the whole table by a click on a
// column header (ascending, then descending), filtered by class, one run at a time. The data
// are the JSON blob of <script id="report-data">.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var classes = data.classes;
  var table = document.getElementById("class-table");
  if (!classes || !table) { document.body.setAttribute("data-ready", "1"); return; }
  var columns = classes.columns;
  var state = {
    run: classes.runs[0], column: classes.sort.column, order: classes.sort.order,
    filter: "", page: 0, size: classes.page_size
  };
  var view = null;
  var thead = table.tHead, tbody = table.tBodies[0];
  var pager = document.getElementById("class-pager");
  var counter = document.getElementById("class-count");

  function text(value) {
    return String(value).replace(/[&<>"]/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c];
    });
  }
  function shown(value, column) {
    if (value === null || value === undefined) return "\u2013";
    if (column.type === "num") return value.toFixed(4);
    return text(value);
  }
  function compare(i, order) {
    var sign = order === "descending" ? -1 : 1;
    return function (a, b) {
      var x = a[i], y = b[i];
      var xm = x === null || x === undefined, ym = y === null || y === undefined;
      if (xm || ym) return xm === ym ? 0 : (xm ? 1 : -1);  // missing values last
      if (typeof x === "string" || typeof y === "string") {
        return sign * String(x).localeCompare(String(y), undefined, { numeric: true });
      }
      return sign * (x - y);
    };
  }
  function build() {
    var rows = classes.rows[state.run];
    var needle = state.filter.toLowerCase();
    if (needle) {
      rows = rows.filter(function (r) { return String(r[0]).toLowerCase().indexOf(needle) >= 0; });
    } else {
      rows = rows.slice();
    }
    rows.sort(compare(state.column, state.order));
    view = rows;
  }
  function render() {
    if (view === null) build();
    var pages = Math.max(1, Math.ceil(view.length / state.size));
    state.page = Math.min(Math.max(state.page, 0), pages - 1);
    var start = state.page * state.size;
    var html = [];
    for (var r = start; r < Math.min(view.length, start + state.size); r++) {
      var row = view[r];
      html.push("<tr>");
      for (var c = 0; c < columns.length; c++) {
        html.push('<td class="' + (columns[c].type === "text" ? "text" : "") + '">' +
                  shown(row[c], columns[c]) + "</td>");
      }
      html.push("</tr>");
    }
    tbody.innerHTML = html.join("");
    var ths = thead.rows[0].cells;
    for (var i = 0; i < ths.length; i++) {
      if (i === state.column) ths[i].setAttribute("aria-sort", state.order);
      else ths[i].removeAttribute("aria-sort");
    }
    pager.querySelector(".where").textContent =
      "page " + (state.page + 1) + " of " + pages;
    counter.textContent = view.length + " of " + classes.rows[state.run].length + " classes";
    document.body.setAttribute("data-ready", "1");
  }
  var head = ["<tr>"];
  for (var c = 0; c < columns.length; c++) {
    head.push('<th scope="col" tabindex="0" class="' + (columns[c].type === "text" ? "text" : "") +
              '" title="' + text(columns[c].title || "sort by this column") + '">' +
              text(columns[c].label) + "</th>");
  }
  head.push("</tr>");
  thead.innerHTML = head.join("");
  function sortBy(i) {
    if (state.column === i) state.order = state.order === "ascending" ? "descending" : "ascending";
    else { state.column = i; state.order = "ascending"; }
    state.page = 0; view = null; render();
  }
  Array.prototype.forEach.call(thead.rows[0].cells, function (th, i) {
    th.addEventListener("click", function () { sortBy(i); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(i); }
    });
  });
  pager.addEventListener("click", function (e) {
    var step = e.target.getAttribute && e.target.getAttribute("data-step");
    if (!step) return;
    var pages = Math.max(1, Math.ceil(view.length / state.size));
    state.page = step === "first" ? 0 : step === "last" ? pages - 1 : state.page + Number(step);
    render();
  });
  var filter = document.getElementById("class-filter");
  filter.addEventListener("input", function () {
    state.filter = filter.value; state.page = 0; view = null; render();
  });
  var chooser = document.getElementById("class-run");
  if (chooser) {
    chooser.addEventListener("change", function () {
      state.run = chooser.value; state.page = 0; view = null; render();
    });
  }
  render();
  if (window.performance && performance.mark) performance.mark("recallkit-table-rendered");
})();
