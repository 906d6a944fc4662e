/* gpupool logs: follows a replica's log on the job page and the logs page.

   The server renders the last lines (templates/clusters/_logs.html). With "Follow" on, this
   reads the REST endpoint every 3 s for the lines after the last one it has (?since=, the
   answer's next_since) and appends them; the view stays at the bottom unless the reader has
   scrolled up, and then a button offers the latest lines. Following stops when the job has
   ended. "Timestamps" shows or hides the stamps already there (a class, no new read) and
   carries over to the download link. Changing the replica or the run reloads the section
   through its form (htmx). Polling pauses while the tab is hidden.

   No inline script or style (the page's CSP allows neither); state lives on the elements.
   Each followed view is kept in window.gpupoolLogs[element id] for tests and the console. */
(function () {
  "use strict";
  var POLL_MS = 3000;
  var MAX_LINES = 10000;
  window.gpupoolLogs = window.gpupoolLogs || {};

  function atBottom(pre) {
    return pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
  }

  function appendLines(pre, text) {
    var lines = text.split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    var empty = pre.querySelector(".log-empty");
    if (empty && lines.length) pre.textContent = "";
    var fragment = document.createDocumentFragment();
    lines.forEach(function (line) {
      var space = line.indexOf(" ");
      var stamp = space > 0 ? line.slice(0, space) : "";
      if (/^\d{4}-\d\d-\d\dT/.test(stamp)) {
        var ts = document.createElement("span");
        ts.className = "ts";
        ts.textContent = stamp + " ";
        fragment.appendChild(ts);
        fragment.appendChild(document.createTextNode(line.slice(space + 1) + "\n"));
      } else {
        fragment.appendChild(document.createTextNode(line + "\n"));
      }
    });
    pre.appendChild(fragment);
    trim(pre);
    return lines.length;
  }

  /* Keep the newest MAX_LINES lines: drop whole lines (a stamp span and its text) from the top. */
  function trim(pre) {
    var count = (pre.textContent.match(/\n/g) || []).length;
    while (count > MAX_LINES && pre.firstChild) {
      var node = pre.firstChild;
      if (node.nodeType === 3 && node.data.indexOf("\n") >= 0) count -= 1;
      pre.removeChild(node);
    }
  }

  function Follower(view) {
    this.view = view;
    this.pre = view.querySelector("pre.log");
    this.status = view.querySelector(".log-status");
    this.latest = view.querySelector(".log-latest");
    this.follow = view.querySelector("input[name=follow]");
    this.stamps = view.querySelector("input[name=timestamps]");
    this.download = view.querySelector("#log-download");
    this.api = view.getAttribute("data-api");
    this.nextSince = view.getAttribute("data-next-since") || "";
    this.running = view.getAttribute("data-running") === "true";
    this.timer = null;
    this.busy = false;
    this.polls = 0;
    this.appended = 0;
  }

  Follower.prototype.tail = function () {
    var input = this.view.querySelector("input[name=tail]");
    return encodeURIComponent((input && input.value) || "500");
  };

  Follower.prototype.say = function (text) {
    if (this.status && this.status.textContent !== text) this.status.textContent = text;
  };

  Follower.prototype.start = function () {
    if (this.timer) return;
    if (!this.running) {
      this.say("The job has ended: nothing more will come.");
      return;
    }
    if (!this.pre) {  // no log yet (the container is starting): ask for the section again
      var form = this.view.querySelector("form");
      var view = this.view;
      this.say("Waiting for the log…");
      this.timer = setTimeout(function () {
        if (view.isConnected && form.requestSubmit) form.requestSubmit();
      }, POLL_MS);
      return;
    }
    this.pre.scrollTop = this.pre.scrollHeight;
    this.say("Following: new lines appear every few seconds.");
    var self = this;
    this.timer = setInterval(function () { self.poll(); }, POLL_MS);
  };

  Follower.prototype.stop = function (why) {
    if (this.timer) {
      clearInterval(this.timer);
      clearTimeout(this.timer);
    }
    this.timer = null;
    this.say(why || "");
  };

  Follower.prototype.poll = function () {
    if (this.busy || document.hidden || !this.view.isConnected) return;
    var self = this;
    var url = this.api + "&timestamps=true" +
      (this.nextSince ? "&since=" + encodeURIComponent(this.nextSince) : "&tail=" + this.tail());
    this.busy = true;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (body) {
        self.polls += 1;
        if (!body.available) {
          self.say(body.message || "The log is not available now.");
          return;
        }
        var stick = atBottom(self.pre);
        if (body.text) self.appended += appendLines(self.pre, body.text);
        if (body.next_since) self.nextSince = body.next_since;
        if (stick) {
          self.pre.scrollTop = self.pre.scrollHeight;
        } else if (body.text && self.latest) {
          self.latest.hidden = false;
        }
        if (!body.running) self.stop("The job has ended: following stopped.");
        else self.say("Following: new lines appear every few seconds.");
      })
      .catch(function () { self.say("The log could not be read just now; trying again."); })
      .then(function () { self.busy = false; });
  };

  function showStamps(view, on) {
    var pre = view.querySelector("pre.log");
    if (pre) pre.classList.toggle("with-ts", on);
    var link = view.querySelector("#log-download");
    if (link) {
      var href = link.getAttribute("href").replace(/&timestamps=1/g, "");
      link.setAttribute("href", on ? href + "&timestamps=1" : href);
    }
  }

  function init(view) {
    if (view.hasAttribute("data-log-ready")) return;
    view.setAttribute("data-log-ready", "");
    var follower = new Follower(view);
    window.gpupoolLogs[view.id] = follower;
    if (follower.follow) {
      follower.follow.addEventListener("change", function () {
        if (follower.follow.checked) follower.start();
        else follower.stop("");
      });
      if (follower.follow.checked) follower.start();
    }
    if (follower.stamps) {
      follower.stamps.addEventListener("change", function () {
        showStamps(view, follower.stamps.checked);
      });
    }
    if (follower.pre && follower.latest) {
      follower.pre.addEventListener("scroll", function () {
        if (atBottom(follower.pre)) follower.latest.hidden = true;
      });
      follower.latest.addEventListener("click", function () {
        follower.pre.scrollTop = follower.pre.scrollHeight;
        follower.latest.hidden = true;
        follower.pre.focus();
      });
    }
    Array.prototype.forEach.call(view.querySelectorAll("select[data-reload]"), function (s) {
      s.addEventListener("change", function () {
        follower.stop("");
        var form = s.form;
        if (form.requestSubmit) form.requestSubmit();
        else form.submit();
      });
    });
  }

  function initAll() {
    Array.prototype.forEach.call(document.querySelectorAll("[data-log-view]"), init);
  }

  document.addEventListener("DOMContentLoaded", initAll);
  document.addEventListener("htmx:afterSettle", initAll);
  document.addEventListener("htmx:beforeSwap", function (e) {
    var old = e.detail.target && e.detail.target.id && window.gpupoolLogs[e.detail.target.id];
    if (old) old.stop("");
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      Object.keys(window.gpupoolLogs).forEach(function (id) {
        var f = window.gpupoolLogs[id];
        if (f.timer) f.poll();
      });
    }
  });
})();
