/* The submit form: the error summary takes focus and its links move focus to their field;
   only the chosen requirement's and kind's fields show; the models keep the order they were chosen in.
   a template loads on its button or on Enter, not as the list's choice changes. Served by the portal:
   no inline script, as the Content-Security-Policy requires. */
(function () {
  "use strict";

  function ready(fn) {
    if (document.readyState !== "loading") fn();
    else document.addEventListener("DOMContentLoaded", fn);
  }

  function errorSummary() {
    var summary = document.getElementById("error-summary");
    if (!summary) return;
    summary.focus();
    summary.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-focus]");
      var field = link && document.getElementById(link.getAttribute("data-focus"));
      if (!field) return;
      event.preventDefault();
      var group = field.closest("[data-requirement]");
      if (group) group.hidden = false;
      field.focus();
      field.scrollIntoView({ block: "center" });
    });
  }

  function requirementChoice(form) {
    function show() {
      var chosen = form.querySelector("input[name=requirement]:checked");
      var value = chosen ? chosen.value : "constraints";
      form.querySelectorAll("[data-requirement]").forEach(function (group) {
        group.hidden = group.getAttribute("data-requirement") !== value;
      });
    }
    form.querySelectorAll("input[name=requirement]").forEach(function (radio) {
      radio.addEventListener("change", show);
    });
    show();
  }

  /* Parts for one kind of job only (<fieldset data-kind="inference">): hidden, and their
     fields disabled so nothing typed there is sent, while another kind is chosen. */
  function kindParts(form) {
    var kind = form.querySelector("select[name=kind]");
    var parts = form.querySelectorAll("[data-kind]");
    if (!kind || !parts.length) return;
    function show() {
      parts.forEach(function (part) {
        var on = part.getAttribute("data-kind") === kind.value;
        part.hidden = !on;
        part.querySelectorAll("input, select, textarea").forEach(function (f) { f.disabled = !on; });
      });
    }
    kind.addEventListener("change", show);
    show();
  }

  function modelOrder(form) {
    var select = form.querySelector("select[name=gpu_models]");
    var order = form.querySelector("input[name=gpu_models_order]");
    if (!select || !order) return;
    var chosen = order.value ? order.value.split(",").filter(Boolean) : [];
    function sync() {
      var now = Array.prototype.map.call(select.selectedOptions, function (o) { return o.value; });
      chosen = chosen.filter(function (key) { return now.indexOf(key) >= 0; });
      now.forEach(function (key) { if (chosen.indexOf(key) < 0) chosen.push(key); });
      order.value = chosen.join(",");
    }
    select.addEventListener("change", sync);
    sync();
  }

  /* The match preview refreshes as the user types; a list they opened stays open. */
  function previewKeepsOpenLists() {
    var preview = document.getElementById("match-preview");
    if (!preview) return;
    var open = [];
    preview.addEventListener("htmx:beforeSwap", function () {
      open = Array.prototype.map.call(
        preview.querySelectorAll("details[data-keep-open][open]"),
        function (d) { return d.getAttribute("data-keep-open"); });
    });
    preview.addEventListener("htmx:afterSwap", function () {
      open.forEach(function (key) {
        var details = preview.querySelector('details[data-keep-open="' + key + '"]');
        if (details) details.open = true;
      });
    });
  }

  /* <select data-submit-on-enter>: Enter submits its form (a <select> has no implicit
     submission of its own); arrow keys only move the choice (WCAG 3.2.2: no change of
     context on input). */
  document.addEventListener("keydown", function (event) {
    var field = event.target;
    if (event.key !== "Enter" || !field || !field.matches || !field.matches("select[data-submit-on-enter]")) return;
    if (!field.form) return;
    event.preventDefault();
    if (field.form.requestSubmit) field.form.requestSubmit();
    else field.form.submit();
  });

  ready(function () {
    errorSummary();
    previewKeepsOpenLists();
    var form = document.getElementById("submit-form");
    if (form) {
      requirementChoice(form);
      kindParts(form);
      modelOrder(form);
    }
  });
})();
