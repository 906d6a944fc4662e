/* gpupool: the portal's own page behaviour. The Content-Security-Policy runs scripts from the
   portal's static files only, so pages carry no inline script or on* handlers; what they need
   is declared with data attributes and wired here, by event delegation (which also covers
   content htmx swaps in later). Every page works without this file: it only adds. */
(function () {
  "use strict";

  // <select data-autosubmit> submits its form as soon as it changes (the queue's filters;
  // a <noscript> button does the same without JavaScript).
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field && field.matches && field.matches("[data-autosubmit]") && field.form) {
      field.form.submit();
    }
  });

  // Parts that refresh themselves (<div data-refresh hx-trigger="every 5s">): a refresh is
  // skipped while keyboard focus is inside the part, so it never takes focus away from what
  // the user is on; focus elsewhere, and the scroll position, are untouched by the swap. The
  // <details data-keep-open="key"> a user opened stay open across the refresh.
  var opened = {};
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-refresh")) return;
    var active = document.activeElement;
    if (active && active !== document.body && elt.contains(active)) {
      event.preventDefault();
      return;
    }
    opened[elt.id] = {
      elt: elt,
      keys: Array.prototype.map.call(
        elt.querySelectorAll("details[data-keep-open][open]"),
        function (d) { return d.getAttribute("data-keep-open"); })
    };
  });
  // Read again just before the swap: a list opened while the request was on its way counts.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.id || !opened[elt.id] || opened[elt.id].elt !== elt) return;
    opened[elt.id].keys = Array.prototype.map.call(
      elt.querySelectorAll("details[data-keep-open][open]"),
      function (d) { return d.getAttribute("data-keep-open"); });
  });
  // Restored as soon as the new part is in the page (afterSwap), before it is painted, so a
  // list never flashes shut; afterSettle stays as the fallback for swaps that fire no
  // afterSwap on the new content.
  function reopenKeptDetails() {
    Object.keys(opened).forEach(function (id) {
      var part = document.getElementById(id);
      if (!part || part === opened[id].elt) return;  // not swapped yet
      var keys = opened[id].keys;
      delete opened[id];
      keys.forEach(function (key) {
        part.querySelectorAll("details[data-keep-open]").forEach(function (d) {
          if (d.getAttribute("data-keep-open") === key) d.open = true;
        });
      });
    });
  }
  document.addEventListener("htmx:afterSwap", reopenKeptDetails);
  document.addEventListener("htmx:afterSettle", reopenKeptDetails);
  // The menu button (phones): the nav is shown until this script runs, so a browser without
  // JavaScript keeps every link; the stylesheet hides it behind the button below 640 px only
  // once the header says the button works (.has-menu).
  function setUpMenu() {
    var button = document.querySelector("[data-menu-toggle]");
    if (!button) return;
    var nav = document.getElementById(button.getAttribute("aria-controls"));
    if (!nav) return;
    button.hidden = false;
    button.closest("header").classList.add("has-menu");
    button.addEventListener("click", function () {
      var open = button.getAttribute("aria-expanded") !== "true";
      button.setAttribute("aria-expanded", open ? "true" : "false");
      if (open) {
        var first = nav.querySelector("a");
        if (first) first.focus();
      }
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && button.getAttribute("aria-expanded") === "true") {
        button.setAttribute("aria-expanded", "false");
        button.focus();
      }
    });
  }

  // Stacked tables (table.jobs below 640 px show one cell per line): each cell carries its
  // column's header as data-label, which the stylesheet prints before it. Cells that already
  // have one (set by a template) keep it.
  function labelCells(root) {
    var tables = (root.matches && root.matches("table.jobs")) ? [root] : root.querySelectorAll("table.jobs");
    Array.prototype.forEach.call(tables, function (table) {
      var heads = table.querySelectorAll("thead tr:last-child th");
      if (!heads.length) return;
      var names = Array.prototype.map.call(heads, function (th) { return th.textContent.trim(); });
      Array.prototype.forEach.call(table.querySelectorAll("tbody tr"), function (row) {
        var col = 0;
        Array.prototype.forEach.call(row.children, function (cell) {
          var name = names[col] || "";
          if (name && !cell.hasAttribute("data-label")) cell.setAttribute("data-label", name);
          col += cell.colSpan || 1;
        });
      });
    });
  }

  // A box that scrolls sideways (a wide table on a narrow screen) must be reachable by
  // keyboard to be scrolled: it becomes a focusable, named region while it overflows.
  function focusableScrollers() {
    Array.prototype.forEach.call(document.querySelectorAll(".scroll"), function (box) {
      if (box.scrollWidth > box.clientWidth + 1) {
        if (!box.hasAttribute("tabindex")) {
          box.setAttribute("tabindex", "0");
          box.setAttribute("role", "region");
          if (!box.hasAttribute("aria-label")) {
            var caption = box.querySelector("caption");
            var heading = box.closest("section, main");
            heading = heading && heading.querySelector("h2, h1");
            box.setAttribute("aria-label", (caption || heading || {textContent: "Table"}).textContent.trim() + " (scrolls sideways)");
          }
        }
      }
    });
  }

  // The quota grid: a cell typed away from what the page loaded (its hidden was- field) is
  // marked as staged until the batch is saved or discarded.
  function markStaged(field) {
    if (!field.form || !field.name || !/^[nb]:/.test(field.name)) return;
    var was = field.form.elements["was-" + field.name];
    if (was) field.classList.toggle("staged", field.value.trim() !== was.value);
  }
  document.addEventListener("input", function (event) {
    var field = event.target;
    if (field && field.closest && field.closest("[data-staged-grid]")) markStaged(field);
  });

  // <button data-copy="ID" hidden> copies the text of element ID (a curl line) to the
  // clipboard and says so in its own label for a moment; hidden until this script runs, and
  // where the page is not a secure context (no Clipboard API), so it never does nothing.
  function showCopyButtons(root) {
    if (!navigator.clipboard) return;
    Array.prototype.forEach.call(root.querySelectorAll("button[data-copy]"), function (b) {
      b.hidden = false;
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest && event.target.closest("button[data-copy]");
    if (!button || !navigator.clipboard) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var label = button.getAttribute("data-label-copied") || "Copied";
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      var was = button.textContent;
      button.textContent = label;
      window.setTimeout(function () { button.textContent = was; }, 2000);
    });
  });

  // Times: the server writes each <time datetime="…"> in UTC (what a browser without this
  // script shows, marked "UTC"); here each one that shows a clock time is rewritten in the
  // browser's own time zone, with its zone's short name, and keeps the UTC time on hover
  // (title). A <time> that holds a duration ("12 min") is left alone. The text's own shape
  // (with or without the date, with or without seconds) is kept.
  var CLOCK = /^(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}(:\d{2})?( UTC)?$/;
  function pad(n) { return n < 10 ? "0" + n : String(n); }
  function utcText(d, withDate, withSeconds) {
    return (withDate ? d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1) + "-" + pad(d.getUTCDate()) + " " : "") +
      pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + (withSeconds ? ":" + pad(d.getUTCSeconds()) : "") + " UTC";
  }
  function zoneName(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, {timeZoneName: "short"}).formatToParts(d);
      for (var i = 0; i < parts.length; i++) if (parts[i].type === "timeZoneName") return parts[i].value;
    } catch (e) { /* an old browser: no zone name */ }
    return "";
  }
  function localTimes(root) {
    var times = root.querySelectorAll ? root.querySelectorAll("time[datetime]") : [];
    Array.prototype.forEach.call(times, function (el) {
      if (el.hasAttribute("data-local")) return;
      var text = el.textContent.trim();
      var shape = CLOCK.exec(text);
      var d = new Date(el.getAttribute("datetime"));
      if (!shape || isNaN(d.getTime())) return;
      var withDate = !!shape[1], withSeconds = !!shape[2];
      var local = (withDate ? d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " : "") +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + (withSeconds ? ":" + pad(d.getSeconds()) : "");
      var zone = zoneName(d);
      el.textContent = zone ? local + " " + zone : local;
      el.title = utcText(d, true, withSeconds);
      el.setAttribute("data-local", "");
      // a template that writes "UTC" after the element rather than in it: that word goes
      var next = el.nextSibling;
      if (next && next.nodeType === 3 && /^ UTC\b/.test(next.nodeValue)) {
        next.nodeValue = next.nodeValue.slice(4);
      }
    });
  }

  // The bell (<a data-bell href="/notifications/recent/">): without this script a link to
  // the page of recent notifications; with it, a button that opens that list in a panel
  // under the bell (the same fragment, fetched on each opening, which marks them read) and
  // clears the count. Escape or a click elsewhere closes it and gives focus back.
  function bellPanel() {
    var panel = document.getElementById("bell-panel");
    if (!panel) {
      panel = document.createElement("div");
      panel.id = "bell-panel";
      panel.className = "bell-panel";
      panel.setAttribute("role", "region");
      panel.setAttribute("aria-label", "Recent notifications");
      panel.hidden = true;
      var header = document.querySelector("header.top");
      (header || document.body).appendChild(panel);
    }
    return panel;
  }
  function bellClose(focusBell) {
    var panel = document.getElementById("bell-panel");
    var bell = document.querySelector("[data-bell]");
    if (!panel || panel.hidden) return;
    panel.hidden = true;
    if (bell) {
      bell.setAttribute("aria-expanded", "false");
      if (focusBell) bell.focus();
    }
  }
  function bellWire(bell) {
    if (!bell) return;
    bell.setAttribute("role", "button");
    bell.setAttribute("aria-controls", "bell-panel");
    var panel = document.getElementById("bell-panel");
    bell.setAttribute("aria-expanded", panel && !panel.hidden ? "true" : "false");
  }
  document.addEventListener("click", function (event) {
    var bell = event.target && event.target.closest && event.target.closest("[data-bell]");
    var panel = document.getElementById("bell-panel");
    if (!bell) {
      if (panel && !panel.hidden && !panel.contains(event.target)) bellClose(false);
      return;
    }
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
    event.preventDefault();
    panel = bellPanel();
    if (!panel.hidden) { bellClose(false); return; }
    fetch(bell.getAttribute("href"), {headers: {"HX-Request": "true"}, credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.text(); })
      .then(function (html) {
        panel.innerHTML = html;
        localTimes(panel);
        panel.hidden = false;
        var current = document.querySelector("[data-bell]");
        if (current) {
          current.setAttribute("aria-expanded", "true");
          var count = current.querySelector(".bell-count");
          if (count) count.remove();
        }
        var first = panel.querySelector("a");
        if (first) first.focus();
      })
      .catch(function () { window.location.href = bell.getAttribute("href"); });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") bellClose(true);
  });
  // The count refreshes every minute; not while the panel is open (it was just cleared).
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    var panel = document.getElementById("bell-panel");
    if (elt && elt.hasAttribute && elt.hasAttribute("data-bell") && panel && !panel.hidden) {
      event.preventDefault();
    }
  });

  // <input type=checkbox data-select-all="FORM" hidden> ticks or unticks every checkbox of
  // that form (the bulk cancel's jobs); hidden without this script, where it could do nothing.
  function showSelectAll(root) {
    Array.prototype.forEach.call(root.querySelectorAll("input[data-select-all]"), function (b) {
      b.hidden = false;
    });
  }
  document.addEventListener("change", function (event) {
    var all = event.target;
    if (!all || !all.matches || !all.matches("input[data-select-all]")) return;
    var form = all.getAttribute("data-select-all");
    Array.prototype.forEach.call(
      document.querySelectorAll('input[type=checkbox][form="' + form + '"]'),
      function (box) { box.checked = all.checked; });
  });

  function ready() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-staged-grid] input"), markStaged);
    setUpMenu();
    labelCells(document);
    focusableScrollers();
    showCopyButtons(document);
    localTimes(document);
    bellWire(document.querySelector("[data-bell]"));
    showSelectAll(document);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  document.addEventListener("htmx:afterSwap", function () {
    labelCells(document);  // an outerHTML swap's event names the element it replaced
    focusableScrollers();
    showCopyButtons(document);
    localTimes(document);
    bellWire(document.querySelector("[data-bell]"));
    showSelectAll(document);
  });
  window.addEventListener("resize", focusableScrollers);
})();
