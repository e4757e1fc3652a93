// cairnq dashboard: live overview (server-sent events) and relative ages.
// Text only ever goes in through textContent: nothing from the server is parsed as HTML.
(function () {
  "use strict";
  var STATUSES = ["queued", "running", "succeeded", "failed", "canceled"];
  var SVG = "http://www.w3.org/2000/svg";
  var main = document.getElementById("page");
  if (!main) { return; }
  var root = main.getAttribute("data-root") || "";

  function pad(n, w) { n = String(n); while (n.length < w) { n = "0" + n; } return n; }
  function utc(ms) {
    var d = new Date(ms);
    return d.getUTCFullYear() + "-" + pad(d.getUTCMonth() + 1, 2) + "-" + pad(d.getUTCDate(), 2) +
      " " + pad(d.getUTCHours(), 2) + ":" + pad(d.getUTCMinutes(), 2) + ":" +
      pad(d.getUTCSeconds(), 2) + "." + pad(d.getUTCMilliseconds(), 3) + "Z";
  }
  function duration(ms) {
    if (ms === null || ms === undefined) { return "-"; }
    ms = Math.abs(ms);
    if (ms < 1000) { return ms + " ms"; }
    var s = Math.floor(ms / 1000);
    if (s < 60) { return s + " s"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min"; }
    var h = Math.floor(m / 60); m = m % 60;
    if (h < 24) { return m ? h + " h " + m + " min" : h + " h"; }
    var d = Math.floor(h / 24); h = h % 24;
    return h ? d + " d " + h + " h" : d + " d";
  }
  function age(ms) {
    var delta = Date.now() - ms;
    if (delta > -1000 && delta < 1000) { return "just now"; }
    return delta > 0 ? duration(delta) + " ago" : "in " + duration(delta);
  }
  function refreshAges() {
    var spans = document.querySelectorAll("span.age[data-ms]");
    for (var i = 0; i < spans.length; i++) {
      spans[i].textContent = age(Number(spans[i].getAttribute("data-ms")));
    }
  }
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var k in attrs) { if (attrs.hasOwnProperty(k)) { node.setAttribute(k, attrs[k]); } }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function when(ms) {
    var span = document.createElement("span");
    if (ms === null || ms === undefined) { span.className = "muted"; span.textContent = "-"; return span; }
    span.appendChild(el("time", { "data-ms": ms }, utc(ms)));
    span.appendChild(document.createTextNode(" "));
    span.appendChild(el("span", { "class": "age", "data-ms": ms }, age(ms)));
    return span;
  }
  function query(params) {
    var parts = [];
    for (var k in params) {
      if (params.hasOwnProperty(k)) { parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(params[k])); }
    }
    return parts.length ? "?" + parts.join("&") : "";
  }
  function setText(node, text) {
    text = String(text);
    if (node && node.textContent !== text) {
      node.textContent = text;
      var cell = node.closest ? node.closest("td") : null;
      if (cell) {
        cell.classList.add("changed");
        setTimeout(function () { cell.classList.remove("changed"); }, 1200);
      }
    }
  }
  function emptyRow(tbody, columns, text) {
    var tr = el("tr", { "class": "empty" });
    tr.appendChild(el("td", { colspan: columns }, text));
    tbody.appendChild(tr);
  }

  function queueRow(q) {
    var tr = el("tr", { "data-queue": q.queue });
    var th = el("th", { scope: "row" });
    th.appendChild(el("a", { "class": "queue-link", href: root + "/tasks" + query({ queue: q.queue }) }, q.queue));
    tr.appendChild(th);
    STATUSES.forEach(function (s) {
      var td = el("td", { "class": "num", "data-status": s });
      td.appendChild(el("a", { "class": "zero", href: root + "/tasks" + query({ queue: q.queue, status: s }) }, "0"));
      tr.appendChild(td);
    });
    tr.appendChild(el("td", { "class": "num scheduled" }, "0"));
    tr.appendChild(el("td", { "class": "num oldest-age" }, "-"));
    return tr;
  }
  function updateQueues(data) {
    var table = document.getElementById("queues");
    if (!table) { return; }
    var tbody = table.tBodies[0];
    var rows = {};
    var existing = tbody.querySelectorAll("tr[data-queue]");
    for (var i = 0; i < existing.length; i++) { rows[existing[i].getAttribute("data-queue")] = existing[i]; }
    var empty = tbody.querySelector("tr.empty");
    if (empty && data.queues.length) { tbody.removeChild(empty); }
    data.queues.forEach(function (q) {
      var tr = rows[q.queue];
      if (!tr) { tr = queueRow(q); tbody.appendChild(tr); }
      STATUSES.forEach(function (s) {
        var cell = tr.querySelector('td[data-status="' + s + '"]');
        var target = cell && (cell.querySelector("a") || cell);
        setText(target, q.counts[s] || 0);
        if (target && target.tagName === "A") { target.classList.toggle("zero", !q.counts[s]); }
      });
      setText(tr.querySelector("td.scheduled"), q.scheduled);
      var oldest = tr.querySelector("td.oldest-age");
      if (oldest) { oldest.textContent = duration(q.oldest_due_age_ms); }
    });
    STATUSES.forEach(function (s) {
      var total = document.getElementById("total-" + s);
      if (total) { total.textContent = String(data.totals[s] || 0); }
    });
  }
  function updateWorkers(data) {
    var table = document.getElementById("workers");
    if (!table) { return; }
    var tbody = document.createElement("tbody");
    data.workers.forEach(function (w) {
      var tr = el("tr", { "data-worker-id": w.worker_id });
      tr.appendChild(el("td", { "class": "mono" }, w.worker_id));
      tr.appendChild(el("td", { "class": "num" }, w.running));
      tr.appendChild(el("td", { "class": "num" }, w.finished_recently));
      var td = el("td", {}); td.appendChild(when(w.last_seen_ms)); tr.appendChild(td);
      tbody.appendChild(tr);
    });
    if (!data.workers.length) { emptyRow(tbody, 4, "No worker seen in the last hour."); }
    table.replaceChild(tbody, table.tBodies[0]);
  }
  function updateRunning(data) {
    var table = document.getElementById("running");
    if (!table) { return; }
    var tbody = document.createElement("tbody");
    data.running.forEach(function (r) {
      var tr = el("tr", { "data-task-id": r.id });
      var td = el("td", {});
      td.appendChild(el("a", { "class": "task-link mono", href: root + "/tasks/" + encodeURIComponent(r.id) }, r.id));
      tr.appendChild(td);
      tr.appendChild(el("td", {}, r.name));
      tr.appendChild(el("td", {}, r.queue));
      tr.appendChild(el("td", { "class": "mono" }, r.worker_id || "-"));
      tr.appendChild(el("td", { "class": "num" }, r.attempt + "/" + r.max_attempts));
      var progress = el("td", {});
      if (r.progress !== null && r.progress !== undefined) {
        progress.appendChild(el("progress", { max: "1", value: String(r.progress) }));
        progress.appendChild(el("span", { "class": "num" }, " " + Math.round(r.progress * 100) + "%"));
      }
      if (r.message) { progress.appendChild(el("span", { "class": "message" }, " " + r.message)); }
      tr.appendChild(progress);
      tbody.appendChild(tr);
    });
    if (!data.running.length) { emptyRow(tbody, 6, "Nothing is running."); }
    table.replaceChild(tbody, table.tBodies[0]);
  }

  // The chart: the same arithmetic as cairnq/dashboard/chart.py.
  var WIDTH = 720, TOP = 10, BOTTOM = 140, LEFT = 40;
  function nicePeak(n) {
    var steps = [1, 2, 5];
    for (var p = 0; p < 12; p++) {
      for (var i = 0; i < steps.length; i++) {
        var top = steps[i] * Math.pow(10, p);
        if (top >= n) { return Math.max(top, 1); }
      }
    }
    return n;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    for (var k in attrs) { if (attrs.hasOwnProperty(k)) { node.setAttribute(k, attrs[k]); } }
    return node;
  }
  function updateChart(data) {
    var chart = document.getElementById("throughput-chart");
    if (!chart) { return; }
    var buckets = data.throughput;
    var slot = (WIDTH - LEFT) / Math.max(buckets.length, 1);
    var peak = nicePeak(buckets.reduce(function (m, b) {
      return Math.max(m, b.succeeded + b.failed + b.canceled);
    }, 0));
    var scale = (BOTTOM - TOP) / peak;
    var bars = svg("g", { "class": "bars" });
    var points = [];
    var sums = { succeeded: 0, failed: 0, canceled: 0 };
    buckets.forEach(function (b, i) {
      var x = LEFT + i * slot, y = BOTTOM;
      var g = svg("g", { "class": "bar" });
      var settled = b.succeeded + b.failed;
      var rate = settled ? b.failed / settled : null;
      var title = svg("title", {});
      title.textContent = utc(b.minute_start_ms).slice(0, 16) + " UTC: " + b.succeeded + " succeeded, " +
        b.failed + " failed, " + b.canceled + " canceled" +
        (rate === null ? "" : ", failure rate " + Math.round(rate * 100) + "%");
      g.appendChild(title);
      g.appendChild(svg("rect", { "class": "slot", x: (x + slot * 0.1).toFixed(2), y: TOP,
        width: (slot * 0.8).toFixed(2), height: BOTTOM - TOP }));
      ["succeeded", "failed", "canceled"].forEach(function (kind) {
        sums[kind] += b[kind];
        if (!b[kind]) { return; }
        var h = b[kind] * scale; y -= h;
        g.appendChild(svg("rect", { "class": "bar-" + kind, x: (x + slot * 0.1).toFixed(2),
          y: y.toFixed(2), width: (slot * 0.8).toFixed(2), height: h.toFixed(2) }));
      });
      if (rate !== null) {
        points.push((x + slot / 2).toFixed(1) + "," + (BOTTOM - rate * (BOTTOM - TOP)).toFixed(1));
      }
      bars.appendChild(g);
    });
    var old = chart.querySelector("g.bars");
    chart.replaceChild(bars, old);
    var line = chart.querySelector("polyline.rate-line");
    if (line) { line.setAttribute("points", points.join(" ")); }
    var peakLabel = document.getElementById("chart-peak");
    if (peakLabel) { peakLabel.textContent = String(peak); }
    ["succeeded", "failed", "canceled"].forEach(function (kind) {
      var node = document.getElementById("hour-" + kind);
      if (node) { node.textContent = String(sums[kind]); }
    });
    var rateNode = document.getElementById("hour-failure-rate");
    var settledAll = sums.succeeded + sums.failed;
    if (rateNode) {
      rateNode.textContent = settledAll ? (sums.failed / settledAll * 100).toFixed(1) + "%" : "-";
    }
  }

  function update(data) {
    updateQueues(data);
    updateWorkers(data);
    updateRunning(data);
    updateChart(data);
    var stamp = document.getElementById("updated-at");
    if (stamp) {
      stamp.setAttribute("data-ms", String(data.generated_at_ms));
      stamp.textContent = utc(data.generated_at_ms);
    }
    main.setAttribute("data-generated-ms", String(data.generated_at_ms));
  }

  // A queued or running task's page follows it through the same stream: the
  // overview lists running tasks with their progress. When the task starts or
  // stops running the page reloads once to show its new state.
  // One primary-key read: reload when the task's status is not the page's.
  var asking = false;
  function reloadIfMoved(id, was) {
    if (asking || !window.fetch) { return; }
    asking = true;
    var url = main.getAttribute("data-events").replace(/\/events$/, "") +
      "/api/tasks/" + encodeURIComponent(id) + "/status";
    window.fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (body) {
        asking = false;
        if (body && body.status && body.status !== was) { window.location.reload(); }
      })
      .catch(function () { asking = false; });
  }

  function updateTask(data) {
    var id = main.getAttribute("data-live-task");
    // A snapshot older than the page says nothing new (the stream may start
    // with the last one read).
    if (data.generated_at_ms < Number(main.getAttribute("data-generated-ms"))) { return; }
    var was = main.getAttribute("data-live-status");
    var row = null;
    for (var i = 0; i < data.running.length; i++) {
      if (data.running[i].id === id) { row = data.running[i]; break; }
    }
    if (was === "queued") {
      // Not in the running list: still queued, or it ran between two
      // snapshots (the list is read at most once a second). Ask.
      if (row) { window.location.reload(); } else { reloadIfMoved(id, was); }
      return;
    }
    if (!row) {
      if (data.running_truncated) { reloadIfMoved(id, was); } else { window.location.reload(); }
      return;
    }
    var bar = document.getElementById("progress");
    if (bar && row.progress !== null && row.progress !== undefined) {
      bar.setAttribute("value", String(row.progress));
      var percent = document.getElementById("progress-percent");
      if (percent) { percent.textContent = (Math.round(row.progress * 1000) / 10) + "%"; }
    }
    var message = document.getElementById("progress-message");
    if (message) { message.textContent = row.message || ""; }
    var attempts = document.getElementById("attempts");
    if (attempts) { attempts.textContent = row.attempt + "/" + row.max_attempts; }
  }

  function live() {
    var url = main.getAttribute("data-events");
    var status = document.getElementById("live-status");
    if (!url || !window.EventSource) { return; }
    function show(text, on) {
      if (!status) { return; }
      status.textContent = text;
      status.className = on ? "live-on" : "live-off";
    }
    var source = new EventSource(url);
    show("connecting", false);
    source.onopen = function () { show("live", true); };
    source.onerror = function () { show("reconnecting", false); };
    source.addEventListener("overview", function (event) {
      show("live", true);
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; /* keep the last good view */ }
      if (main.getAttribute("data-live-task")) { updateTask(data); } else { update(data); }
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  live();
  refreshAges();
  setInterval(refreshAges, 10000);
})();
