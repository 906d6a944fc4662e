/* gpupool charts: draws every <figure data-chart> from the JSON the server put next to it,
   with the vendored uPlot (static/vendor/uplot). Kinds: "stacked" (areas stacked bottom-up,
   legend shows each series' own value) and "lines" (dashed differently, so colour is not the
   only way to tell them apart). Redraws after htmx swaps a chart in; drawn charts are kept in
   window.gpupoolCharts[figure id] = {plot, data, labels} for tests and the console. */
(function () {
  "use strict";
  var COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
                 "#8C6D1F", "#332288", "#117733"];
  var OTHER = "#9AA0A6";
  var DASHES = [[], [6, 3], [2, 3], [10, 3, 2, 3], [1, 4], [12, 4]];
  window.gpupoolCharts = window.gpupoolCharts || {};

  function fmt(v, unit) {
    if (v == null || isNaN(v)) return "–";
    var n = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
    return n.replace(/\.0+$/, "") + (unit === "%" ? " %" : unit ? " " + unit : "");
  }

  function width(el) {
    return Math.max(240, Math.floor(el.getBoundingClientRect().width || el.clientWidth || 600));
  }

  function build(spec, el) {
    var x = spec.x;
    var raw = spec.series.map(function (s) { return s.values; });
    var stacked = spec.kind === "stacked";
    var data = [x];
    var acc = x.map(function () { return 0; });
    raw.forEach(function (values) {
      data.push(stacked ? values.map(function (v, i) { return (acc[i] += v); }) : values.slice());
    });
    var series = [{ label: "Time (UTC)" }];
    spec.series.forEach(function (s, i) {
      var colour = s.label === "Other teams" ? OTHER : COLOURS[i % COLOURS.length];
      series.push({
        label: s.label + (s.own ? " (yours)" : ""),
        stroke: colour,
        width: stacked ? 1 : 2,
        dash: stacked ? undefined : DASHES[i % DASHES.length],
        fill: stacked ? colour + "99" : undefined,
        points: { show: x.length < 40 },
        value: function (u, v, si, idx) {
          return idx == null ? "–" : fmt(raw[si - 1][idx], spec.unit);
        },
      });
    });
    var bands = [];
    if (stacked) {
      for (var k = 2; k <= raw.length; k++) bands.push({ series: [k, k - 1] });
    }
    var opts = {
      width: width(el),
      height: window.innerWidth < 640 ? 220 : 300,
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      series: series,
      bands: bands,
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.05)]; } } },
      axes: [{}, { size: 50, values: function (u, ticks) {
        // numbers only: the unit is in the caption, and "12 GPU-hours" would not fit
        return ticks.map(function (t) { return fmt(t, spec.unit === "%" ? "%" : ""); });
      } }],
      legend: { live: true },
      cursor: { focus: { prox: 30 } },
    };
    return new uPlot(opts, data, el);
  }

  function draw(figure) {
    if (!figure.id || typeof uPlot === "undefined") return;
    var source = figure.querySelector("script[type='application/json']");
    var target = figure.querySelector(".chart-canvas");
    if (!source || !target) return;
    var spec = JSON.parse(source.textContent);
    destroy(figure);
    target.textContent = "";
    var plot = build(spec, target);
    window.gpupoolCharts[figure.id] = {
      plot: plot,
      data: spec,
      labels: spec.series.map(function (s) { return s.label; }),
    };
    figure.setAttribute("data-drawn", String(spec.x.length));
  }

  function destroy(figure) {
    var old = window.gpupoolCharts[figure.id];
    if (old && old.plot) old.plot.destroy();
    delete window.gpupoolCharts[figure.id];
  }

  function drawAll(onlyNew) {
    var figures = document.querySelectorAll("figure[data-chart]");
    Array.prototype.forEach.call(figures, function (f) {
      if (!onlyNew || !f.hasAttribute("data-drawn")) draw(f);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawAll(false); });
  document.addEventListener("htmx:beforeSwap", function (e) {
    var figures = e.detail.target.querySelectorAll("figure[data-chart]");
    Array.prototype.forEach.call(figures, destroy);
  });
  document.addEventListener("htmx:afterSettle", function () { drawAll(true); });
  var pending;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      Object.keys(window.gpupoolCharts).forEach(function (id) {
        var entry = window.gpupoolCharts[id];
        var el = document.getElementById(id);
        if (entry && el) entry.plot.setSize({ width: width(el.querySelector(".chart-canvas")),
          height: window.innerWidth < 640 ? 220 : 300 });
      });
    }, 150);
  });
})();
