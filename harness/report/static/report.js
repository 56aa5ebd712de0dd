// Behaviour of leaderboard.html: sortable tables, plot variants, and the transcript viewer.
// Every piece of run data is put into the page with textContent, never parsed as HTML.
// Transcripts are loaded when a problem is opened: each is a script beside the page (transcripts/R/P.js) that
// calls khTranscript(R, P, base64 of gzip'd JSON); see harness/report/transcripts.py.
"use strict";

(function () {
  const TX = JSON.parse(document.getElementById("transcript-data").textContent);
  const STATUSES = new Set(TX.statuses);
  const loaded = new Map();  // "R/P" -> promise of {strings, attempts}
  const waiting = new Map();  // "R/P" -> resolve, until its script calls khTranscript

  window.khTranscript = function (run, problem, packed) {
    const key = run + "/" + problem;
    const done = waiting.get(key);
    if (!done) return;
    waiting.delete(key);
    const bytes = Uint8Array.from(atob(packed), function (c) { return c.charCodeAt(0); });
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    done(new Response(stream).text().then(JSON.parse));
  };

  function transcript(run, problem) {
    const key = run + "/" + problem;
    if (!loaded.has(key)) {
      const file = TX.runs[run].problems[problem].file;
      loaded.set(key, new Promise(function (resolve, reject) {
        waiting.set(key, resolve);
        const s = document.createElement("script");
        s.onerror = function () {
          waiting.delete(key);
          loaded.delete(key);  // a later click tries again
          reject(new Error("cannot load " + file + " (keep the transcripts folder beside the page)"));
        };
        s.src = file;
        document.head.appendChild(s);
      }));
    }
    return loaded.get(key);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function badge(status) {
    return el("span", "badge st-" + (STATUSES.has(status) ? status : "unknown"), status);
  }

  // ----------------------------------------------------------------- tables
  function cellValue(td) {
    const text = td.textContent.trim();
    const d = text.match(/^(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?$/);  // durations: 1h 02m, 6m 04s, 12s
    if (d && (d[1] || d[2] || d[3])) {
      return { num: Number(d[1] || 0) * 3600 + Number(d[2] || 0) * 60 + Number(d[3] || 0), text: text };
    }
    const m = text.match(/^[≥$\s]*(-?\d+(?:\.\d+)?)([kM]?)/);
    if (!m) return { num: null, text: text };
    const scale = m[2] === "k" ? 1e3 : m[2] === "M" ? 1e6 : 1;
    return { num: parseFloat(m[1]) * scale, text: text };
  }

  function makeSortable(table) {
    const headers = table.querySelectorAll("thead th");
    headers.forEach(function (th, col) {
      th.addEventListener("click", function () {
        const desc = !th.classList.contains("sorted-desc");
        headers.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(desc ? "sorted-desc" : "sorted-asc");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows);
        rows.sort(function (a, b) {
          const x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
          let c;
          if (x.num !== null && y.num !== null) c = x.num - y.num;
          else if (x.num !== null) c = 1;
          else if (y.num !== null) c = -1;
          else c = x.text.localeCompare(y.text);
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
  document.querySelectorAll("table.data").forEach(makeSortable);

  // ----------------------------------------------------------- plot variants
  document.querySelectorAll("select.variant-select").forEach(function (select) {
    function show() {
      document.querySelectorAll('.variant[data-group="' + select.dataset.group + '"]').forEach(function (v) {
        v.hidden = v.dataset.key !== select.value;
      });
    }
    select.addEventListener("change", show);
    show();
  });

  // ------------------------------------------------------- transcript viewer
  const runSelect = document.getElementById("tx-run");
  const problemSelect = document.getElementById("tx-problem");
  const sampleSelect = document.getElementById("tx-sample");
  const view = document.getElementById("tx-view");

  function fill(select, options) {
    select.replaceChildren();
    options.forEach(function (o) {
      const opt = el("option", null, o.label);
      opt.value = o.value;
      select.appendChild(opt);
    });
  }

  function currentRun() { return TX.runs[Number(runSelect.value)]; }
  function currentProblem() { return currentRun().problems[Number(problemSelect.value)]; }

  function onRun(problemIndex) {
    if (currentRun().problems.length === 0) {
      fill(problemSelect, []);
      fill(sampleSelect, []);
      view.replaceChildren(el("p", "empty", "This run has no problems."));
      return;
    }
    fill(problemSelect, currentRun().problems.map(function (p, i) {
      return { value: String(i), label: p.id + " — " + p.status };
    }));
    if (typeof problemIndex === "number") problemSelect.value = String(problemIndex);
    onProblem();
  }

  let shown = null;  // the transcript on view: {strings, attempts}

  function onProblem() {
    const run = Number(runSelect.value), problem = Number(problemSelect.value);
    const p = currentProblem();
    shown = null;
    if (!p.file) {
      fill(sampleSelect, []);
      sampleSelect.disabled = true;
      render();
      return Promise.resolve();
    }
    view.replaceChildren(el("p", "empty", "Loading " + p.id + " …"));
    return transcript(run, problem).then(function (data) {
      if (Number(runSelect.value) !== run || Number(problemSelect.value) !== problem) return;  // moved on meanwhile
      shown = data;
      const samples = Array.from(new Set(data.attempts.map(function (a) { return a.sample; })));
      samples.sort(function (a, b) { return a - b; });
      fill(sampleSelect, samples.map(function (s) { return { value: String(s), label: "sample " + s }; }));
      sampleSelect.disabled = samples.length <= 1;
      render();
    }, function (err) {
      view.replaceChildren(el("p", "empty", String(err.message)));
    });
  }

  function str(i) {
    return i === null || i === undefined || shown === null ? null : shown.strings[i];
  }

  function section(title, open, content) {
    const d = el("details");
    d.open = open;
    d.appendChild(el("summary", null, title));
    content.forEach(function (c) { d.appendChild(c); });
    const s = el("section");
    s.appendChild(d);
    return s;
  }

  function fmtNum(x, digits) { return x === null || x === undefined ? "—" : Number(x).toFixed(digits); }

  // profile (issue 57): the attempt's hardware counters, one row per kernel (every text set as textContent)
  function profileParts(p) {
    const parts = [el("p", null, p.summary)];
    if (p.note) parts.push(el("p", "flag", "Note: " + p.note));
    if (p.rows.length) {
      const table = el("table", "data profile");
      const head = el("tr");
      p.columns.forEach(function (c) { head.appendChild(el("th", null, c)); });
      const thead = el("thead");
      thead.appendChild(head);
      table.appendChild(thead);
      const body = el("tbody");
      p.rows.forEach(function (r) {
        const tr = el("tr");
        r.forEach(function (c) { tr.appendChild(el("td", null, c)); });
        body.appendChild(tr);
      });
      table.appendChild(body);
      const wrap = el("div", "scroll");
      wrap.appendChild(table);
      parts.push(wrap);
    }
    return parts;
  }

  function turnCard(a) {
    const card = el("article", "turn");
    const head = el("header");
    head.appendChild(el("span", "title", "Turn " + a.turn + " · sample " + a.sample));
    head.appendChild(badge(a.status));
    if (a.speedup !== null) head.appendChild(el("span", null, fmtNum(a.speedup, 2) + "× faster"));
    else if (a.status === "correct") head.appendChild(el("span", "empty", "not timed"));
    head.appendChild(el("span", null, (a.input_tokens + a.output_tokens) + " tokens"));
    head.appendChild(el("span", null, a.cost_usd === null ? "cost unknown" : "$" + fmtNum(a.cost_usd, 4)));
    head.appendChild(el("span", null, "agent " + fmtNum(a.latency_s, 1) + " s · eval " + fmtNum(a.eval_s, 1) + " s"));
    if (a.from_cache) head.appendChild(el("span", "empty", "reply from cache"));
    card.appendChild(head);

    const prompt = a.prompt.map(function (m) {
      const box = el("div", "msg");
      box.appendChild(el("div", "role", m[0]));
      box.appendChild(el("pre", "wrap", str(m[1])));
      return box;
    });
    card.appendChild(section("Prompt (" + a.prompt.length + " messages)", false, prompt));

    const reply = str(a.reply);
    card.appendChild(section("Reply", true, [reply === null ? el("p", "empty", "no reply (agent error)") : el("pre", "wrap reply", reply)]));
    const code = str(a.code);
    card.appendChild(section("Extracted code", true, [code === null ? el("p", "empty", "no code extracted") : el("pre", "code", code)]));

    const verdict = [];
    const line = el("p");
    line.appendChild(badge(a.status));
    const reason = str(a.reason);
    if (reason) line.appendChild(document.createTextNode(" " + reason));
    verdict.push(line);
    a.flags.forEach(function (f) { verdict.push(el("p", "flag", "⚑ " + f)); });
    const error = str(a.error);
    if (error) verdict.push(el("pre", "wrap", error));
    const feedback = str(a.feedback);
    verdict.push(feedback ? el("pre", "wrap feedback", feedback) : el("p", "empty", "no feedback"));
    card.appendChild(section("Verdict and feedback", true, verdict));
    if (a.profile) card.appendChild(section("Profile (Nsight Compute)", false, profileParts(a.profile)));  // issue 57
    return card;
  }

  function render() {
    const p = currentProblem();
    view.replaceChildren();
    view.appendChild(el("p", "summary-line", currentRun().name + " · " + p.id + " (" + p.level + ") · best: " + p.status));
    if (shown === null || shown.attempts.length === 0) {
      view.appendChild(el("p", "empty", "No attempt recorded for this problem (counted as a failure)."));
      return;
    }
    const sample = Number(sampleSelect.value);
    shown.attempts.filter(function (a) { return a.sample === sample; }).forEach(function (a) {
      view.appendChild(turnCard(a));
    });
  }

  function select(runIndex, problemId) {
    runSelect.value = String(runIndex);
    const i = currentRun().problems.findIndex(function (p) { return p.id === problemId; });
    onRun(i >= 0 ? i : 0);
    document.getElementById("transcripts").scrollIntoView();
  }

  fill(runSelect, TX.runs.map(function (r, i) { return { value: String(i), label: r.name }; }));
  runSelect.addEventListener("change", function () { onRun(0); });
  problemSelect.addEventListener("change", onProblem);
  sampleSelect.addEventListener("change", render);
  document.querySelectorAll("svg g.cell[data-run]").forEach(function (g) {
    g.addEventListener("click", function () { select(Number(g.dataset.run), g.dataset.problem); });
  });
  if (TX.runs.length) onRun();
  else view.appendChild(el("p", "empty", "No runs."));
})();
