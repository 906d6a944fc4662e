/* gpupool charts: draws every <figure data-chart> from the JSON the server put next to it,
   with the vendored uPlot (static/vendor/uplot).

   The x axis is the chart's window, [spec.from, spec.to], whatever data exists; ticks and the
   legend read in 24-hour UTC with ISO dates, as the tables do. Points are the server's
   aggregates per step (dashboards/charts.py); a null is a step without snapshots and breaks
   the line. Kinds: "stacked" (areas stacked bottom-up, the legend shows each series' own
   mean and, when higher, its peak; spec.lines are drawn over the stack, not stacked) and
   "lines" (dashed differently, so colour is not the only way to tell them apart). Colours come
   with the data: a team has one colour on every page.

   Redraws after htmx swaps a chart in. Drawn charts are kept in
   window.gpupoolCharts[figure id] = {plot, data, labels, xRange(), axis: {ticks}} for tests
   and the console. No inline script or style: the page's CSP allows neither. */
(function () {
  "use strict";
  var FALLBACK = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#332288"];
  var DASHES = [[], [6, 3], [2, 3], [10, 3, 2, 3], [1, 4], [12, 4]];
  window.gpupoolCharts = window.gpupoolCharts || {};

  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function isoDate(d) {
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate());
  }
  function hhmm(d) { return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()); }
  function instant(ts) {
    if (ts == null) return "–";
    var d = new Date(ts * 1000);
    return isoDate(d) + " " + hhmm(d) + " UTC";
  }

  /* Tick labels: "YYYY-MM" for months, "YYYY-MM-DD" for days, "HH:MM" within a day with the
     date under the first tick and under every tick where the day changes. */
  function timeTicks(ticks, incr) {
    var lastDay = null;
    return ticks.map(function (ts) {
      var d = new Date(ts * 1000);
      var day = isoDate(d);
      var label;
      if (incr >= 28 * 86400) label = day.slice(0, 7);
      else if (incr >= 86400) label = day;
      else label = day !== lastDay ? hhmm(d) + "\n" + day : hhmm(d);
      lastDay = day;
      return label;
    });
  }

  function fmt(v, unit) {
    if (v == null || isNaN(v)) return "–";
    var n = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
    n = n.indexOf(".") >= 0 ? n.replace(/\.?0+$/, "") : n;
    return n + (unit === "%" ? " %" : unit ? " " + unit : "");
  }

  function width(el) {
    return Math.max(240, Math.floor(el.getBoundingClientRect().width || el.clientWidth || 600));
  }

  function height() { return window.innerWidth < 640 ? 220 : 300; }

  function stack(spec) {
    var acc = spec.x.map(function () { return 0; });
    return spec.series.map(function (s) {
      if (spec.kind !== "stacked") return s.values.slice();
      return s.values.map(function (v, i) {
        if (v == null) return null;
        acc[i] += v;
        return acc[i];
      });
    });
  }

  function seriesOptions(spec) {
    var stacked = spec.kind === "stacked";
    var few = spec.x.length < 40;
    var out = [{ label: "Time (UTC)", value: function (u, ts) { return instant(ts); } }];
    spec.series.forEach(function (s, i) {
      var colour = s.colour || FALLBACK[i % FALLBACK.length];
      out.push({
        label: s.label + (s.own ? " (yours)" : ""),
        stroke: colour,
        width: stacked ? 1 : 2,
        dash: stacked ? undefined : DASHES[i % DASHES.length],
        fill: stacked ? colour + "99" : undefined,
        points: { show: few },
        value: function (u, v, si, idx) {
          if (idx == null) return "–";
          var mean = s.values[idx];
          var peak = s.peaks ? s.peaks[idx] : null;
          var text = fmt(mean, spec.unit);
          return peak != null && mean != null && peak > mean + 0.05
            ? text + " (peak " + fmt(peak, "") + ")" : text;
        },
      });
    });
    (spec.lines || []).forEach(function (l) {
      out.push({
        label: l.label,
        stroke: l.colour,
        width: 1.5,
        dash: [4, 3],
        points: { show: few },
        value: function (u, v) { return fmt(v, spec.unit); },
      });
    });
    return out;
  }

  // The axes take the page's ink and rule colours (CSS custom properties), so a chart reads
  // in the dark theme as well as in the light one.
  function cssColour(name, fallback) {
    var v = window.getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return v || fallback;
  }

  function build(spec, el, axis) {
    var ink = cssColour("--fg", "#1d2330");
    var rule = cssColour("--line", "#d9dde4");
    var data = [spec.x].concat(stack(spec));
    (spec.lines || []).forEach(function (l) { data.push(l.values.slice()); });
    var bands = [];
    if (spec.kind === "stacked") {
      for (var k = 2; k <= spec.series.length; k++) bands.push({ series: [k, k - 1] });
    }
    var opts = {
      width: width(el),
      height: height(),
      tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
      series: seriesOptions(spec),
      bands: bands,
      scales: {
        x: { time: true, range: function () { return [spec.from, spec.to]; } },
        y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.05)]; } },
      },
      axes: [
        {
          stroke: ink,
          grid: { stroke: rule },
          ticks: { stroke: rule },
          space: 80,
          size: 52,
          values: function (u, ticks, ai, space, incr) {
            axis.ticks = timeTicks(ticks, incr);
            return axis.ticks;
          },
        },
        {
          stroke: ink,
          grid: { stroke: rule },
          ticks: { stroke: rule },
          size: 50,
          values: function (u, ticks) {
            // numbers only: the unit is in the caption, and "12 GPU-hours" would not fit
            return ticks.map(function (t) { return fmt(t, spec.unit === "%" ? "%" : ""); });
          },
        },
      ],
      legend: { live: true },
      cursor: { focus: { prox: 30 }, drag: { x: false, y: false } },
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
    var axis = { ticks: [] };
    var plot = build(spec, target, axis);
    window.gpupoolCharts[figure.id] = {
      plot: plot,
      data: spec,
      axis: axis,
      labels: spec.series.map(function (s) { return s.label; }),
      xRange: function () { return [plot.scales.x.min, plot.scales.x.max]; },
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
        if (entry && el) {
          entry.plot.setSize({ width: width(el.querySelector(".chart-canvas")), height: height() });
        }
      });
    }, 150);
  });
})();
