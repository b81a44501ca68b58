// flare live: polls the profiler's JSON snapshot and draws it as an SVG
// flame graph whose frames are DOM elements (<g><title><rect><text>), so
// that search, screen readers and tests can find them by name. When the
// run keeps sample times it also polls the timeline, drawn by
// flare-time.js: a strip and a heat map to select a time range from, a
// thread filter, and the range compared with the rest of the run.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const ROW = 17;
  const POLL_MS = 1000;
  const $ = (id) => document.getElementById(id);

  const state = {
    paused: false,
    last: 0,          // seconds; 0 = whole run
    pid: "",          // "" = all processes
    search: "",
    zoom: [],         // names from the root's child to the zoomed frame
    data: null,       // last snapshot
    seq: -1,
    timer: null,
    tid: "",          // "" = all threads
    range: null,      // [from, to] ms from the run's start, or null
    compare: false,   // the range against the rest of the run
    heat: false,      // heat map shown
    timeline: null,   // last api/timeline answer for the strip
    heatline: null,   // ... and for the heat map (20 ms slices)
    preview: null,    // range being dragged
    strip: null,      // layouts of the drawn canvases
    heatmap: null,
  };
  const T = window.FlareTime;

  // State lives in the URL fragment too, so a view can be shared or
  // reloaded: #last=10&pid=42&search=foo&paused=1&range=1200-1700&tid=43
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    state.last = Math.max(0, parseInt(p.get("last") || "0", 10) || 0);
    state.pid = /^\d+$/.test(p.get("pid") || "") ? p.get("pid") : "";
    state.tid = /^\d+$/.test(p.get("tid") || "") ? p.get("tid") : "";
    const r = /^(\d+)-(\d+)$/.exec(p.get("range") || "");
    state.range = r && Number(r[1]) < Number(r[2]) ? [Number(r[1]), Number(r[2])] : null;
    state.compare = p.get("compare") === "1";
    state.heat = p.get("heat") === "1";
    state.search = p.get("search") || "";
    state.paused = p.get("paused") === "1";
  }

  function writeHash() {
    const p = new URLSearchParams();
    if (state.last) p.set("last", state.last);
    if (state.pid) p.set("pid", state.pid);
    if (state.search) p.set("search", state.search);
    if (state.paused) p.set("paused", "1");
    if (state.tid) p.set("tid", state.tid);
    if (state.range) p.set("range", state.range[0] + "-" + state.range[1]);
    if (state.compare) p.set("compare", "1");
    if (state.heat) p.set("heat", "1");
    const h = p.toString();
    history.replaceState(null, "", h ? "#" + h : location.pathname);
  }

  // A range or a thread is shown from the times (api/range); a thread
  // without a range over the window's time.
  function ranged() {
    return state.range !== null || state.tid !== "";
  }

  function windowRange() {
    const end = Math.ceil(((state.data && state.data.elapsed) || 0) * 1000) + 60000;
    return [state.last ? Math.max(0, end - 60000 - state.last * 1000) : 0, end];
  }

  function query() {
    const p = new URLSearchParams();
    if (ranged()) {
      const [from, to] = state.range || windowRange();
      p.set("from", from);
      p.set("to", to);
      if (state.tid) p.set("tid", state.tid);
      if (state.compare && state.range) p.set("compare", "1");
    } else {
      p.set("last", state.last);
    }
    if (state.pid) p.set("pid", state.pid);
    return p.toString();
  }

  function timelineQuery(slice) {
    const p = new URLSearchParams();
    p.set("slice", slice);
    if (state.pid) p.set("pid", state.pid);
    if (state.tid) p.set("tid", state.tid);
    if (state.search) p.set("search", state.search);
    return p.toString();
  }

  function updateLinks() {
    const q = query();
    const available = (state.data && state.data.downloads) || ["svg", "folded", "pprof"];
    for (const f of ["svg", "folded", "pprof"]) {
      $("dl-" + f).hidden = !available.includes(f);
    }
    $("dl-svg").href = "download/flare.svg?" + q;
    $("dl-folded").href = "download/flare.folded?" + q;
    $("dl-pprof").href = "download/flare.pb.gz?" + q;
  }

  function fmt(n) {
    return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
  }

  function pct(v, total) {
    return total > 0 ? (100 * v / total).toFixed(2) + "%" : "0%";
  }

  // FNV-1a, for stable colours per name.
  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619) >>> 0;
    }
    return (h % 1000) / 1000;
  }

  function colour(kind, name) {
    const v = hash(name);
    const rgb = {
      r: [200, 200, 200],
      p: [190 + 40 * v, 190 + 40 * v, 80],
      k: [220 + 35 * v, 120 + 60 * v, 40],
      m: [170, 170, 170],
      w: [80 + 40 * v, 130 + 60 * v, 220],
      u: [230 + 25 * v, 60 + 120 * v, 50 + 20 * v],
      i: [60 + 50 * v, 170 + 60 * v, 60 + 40 * v],
      j: [80 + 40 * v, 190 + 50 * v, 190 + 50 * v],
      l: [150 + 40 * v, 150 + 40 * v, 150 + 40 * v],
    }[kind] || [200, 200, 200];
    return "rgb(" + rgb.map((x) => Math.round(x)).join(",") + ")";
  }

  async function getJson(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw new Error(r.status + " " + (await r.text()));
    return r.json();
  }

  // Fetches a snapshot; `force` also when paused (the selection changed).
  async function poll(force) {
    if (state.paused && !force) return;
    try {
      const times = pollTimes();
      const data = await getJson((ranged() ? "api/range?" : "api/profile?") + query());
      $("status").textContent = state.paused ? "paused" : "live";
      if (force || !state.paused) {
        state.data = data;
        render();
      }
      await times;
    } catch (e) {
      $("status").textContent = "disconnected (" + e.message + ")";
    }
  }

  // The strip's slice: about four pixels over the kept span.
  function stripSlice() {
    const tl = state.timeline;
    const span = tl && tl.timed ? tl.kept[1] - tl.kept[0] : ((state.data && state.data.elapsed) || 1) * 1000;
    const width = $("strip").clientWidth || 1200;
    return T.niceSlice(span / Math.max(1, width / 4));
  }

  async function pollTimes() {
    if (state.timeline && !state.timeline.timed && state.timeline.seq > 0) {
      // A run without times stays without them.
      return;
    }
    const tl = await getJson("api/timeline?" + timelineQuery(stripSlice()));
    state.timeline = tl;
    if (tl.timed && state.heat) {
      state.heatline = await getJson("api/timeline?" + timelineQuery(T.HEAT_SLICE));
    }
    renderTime();
  }

  function renderThreads(tl) {
    const sel = $("thread");
    const keep = state.tid;
    const total = tl.threads.reduce((a, t) => a + t[3], 0);
    const opts = [["", "all threads"]];
    let seen = false;
    for (const [tid, name, pid, value] of tl.threads) {
      opts.push([String(tid), (name === null ? "?" : name) + " (" + tid + (pid !== null && pid !== tid ? ", pid " + pid : "") + ") " + pct(value, total)]);
      if (String(tid) === keep) seen = true;
    }
    if (keep && !seen) opts.push([keep, "TID " + keep]);
    const sig = opts.map((o) => o.join("\u0000")).join("\u0001");
    if (sel.dataset.sig !== sig) {
      sel.replaceChildren(...opts.map(([v, t]) => {
        const o = document.createElement("option");
        o.value = v;
        o.textContent = t;
        return o;
      }));
      sel.dataset.sig = sig;
    }
    sel.value = keep;
  }

  function rangeText(r) {
    return (r[0] / 1000).toFixed(3) + " – " + (r[1] / 1000).toFixed(3) + " s";
  }

  function renderTime() {
    const tl = state.timeline;
    $("time").hidden = !(tl && tl.timed);
    if (!tl || !tl.timed) return;
    renderThreads(tl);
    const shown = state.preview || state.range;
    state.strip = T.drawStrip($("strip"), tl, shown);
    $("heat-wrap").hidden = !state.heat;
    $("heat-toggle").setAttribute("aria-pressed", String(state.heat));
    if (state.heat && state.heatline && state.heatline.timed) {
      state.heatmap = T.drawHeat($("heat"), state.heatline, shown);
    }
    $("range-label").textContent = state.range ? "range " + rangeText(state.range) : "drag on the strip or heat map to select a range";
    $("range-clear").hidden = !state.range;
    $("compare").disabled = !state.range;
    $("compare").checked = state.compare && !!state.range;
    let note = "";
    if (tl.dropped.events) note = fmt(tl.dropped.events) + " sample times not kept (over the limit)";
    $("time-note").textContent = note;
  }

  function hover(cell) {
    const unit = (state.timeline && state.timeline.unit) || "samples";
    $("time-tip").textContent = cell ? rangeText([cell.from, cell.to]) + ": " + fmt(cell.value) + " " + unit : "";
  }

  function selectRange(r) {
    if (r[1] <= r[0]) r = [r[0], r[0] + 1];
    state.range = r;
    state.preview = null;
    state.zoom = [];
    writeHash();
    renderTime();
    refresh();
  }

  function schedule() {
    clearInterval(state.timer);
    state.timer = setInterval(() => poll(false), POLL_MS);
  }

  function renderTotals(d) {
    $("tool").textContent = d.tool;
    $("target").textContent = d.event + ", " + d.target;
    $("rate-label").textContent = d.unit + "/s";
    $("total-label").textContent = d.unit;
    $("rate").textContent = fmt(d.rate);
    $("total").textContent = fmt(d.total);
    $("procs").textContent = fmt(d.processes);
    $("stacks").textContent = fmt(d.stacks);
    let lost = fmt(d.lost.stacks);
    if (d.lost.hash_full) lost += " (+" + fmt(d.lost.hash_full) + " dropped)";
    if (d.lost.untracked) lost += ", " + fmt(d.lost.untracked) + " untracked";
    if (d.lost.missed_events) lost += ", " + fmt(d.lost.missed_events) + " missed events";
    $("lost").textContent = lost;
    $("span").textContent = d.range && state.range
      ? rangeText(d.range) + " of " + d.elapsed.toFixed(1) + " s"
      : d.span.toFixed(1) + " s of " + d.elapsed.toFixed(1) + " s";
  }

  function renderProcesses(d) {
    const sel = $("process");
    const keep = state.pid;
    const opts = [["", "all processes"]];
    let seen = false;
    for (const [pid, comm, value] of d.procs) {
      // Stacks of all processes counted together have no process to pick.
      if (pid === null) continue;
      opts.push([String(pid), comm + " (" + pid + ") " + pct(value, d.total)]);
      if (String(pid) === keep) seen = true;
    }
    if (keep && !seen) opts.push([keep, "PID " + keep]);
    const sig = opts.map((o) => o.join("\u0000")).join("\u0001");
    if (sel.dataset.sig !== sig) {
      sel.replaceChildren(...opts.map(([v, t]) => {
        const o = document.createElement("option");
        o.value = v;
        o.textContent = t;
        return o;
      }));
      sel.dataset.sig = sig;
    }
    sel.value = keep;
  }

  // The zoomed node: follow state.zoom by name; stop where the path no
  // longer exists (the frame may have left the window).
  function zoomed(d) {
    const chain = [d.graph.root];
    for (const name of state.zoom) {
      const at = chain[chain.length - 1];
      const next = (at[2] || []).find((c) => d.graph.names[c[0]][0] === name);
      if (!next) break;
      chain.push(next);
    }
    return chain;
  }

  function renderCrumbs(d, chain) {
    const nav = $("crumbs");
    const items = [];
    chain.forEach((node, i) => {
      if (i > 0) {
        const s = document.createElement("span");
        s.className = "sep";
        s.textContent = " › ";
        items.push(s);
      }
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = d.graph.names[node[0]][0];
      b.disabled = i === chain.length - 1;
      b.addEventListener("click", () => {
        state.zoom = state.zoom.slice(0, i);
        render();
      });
      items.push(b);
    });
    nav.replaceChildren(...items);
  }

  function matches(name) {
    return state.search !== "" && name.toLowerCase().includes(state.search.toLowerCase());
  }

  // Red where the range has more than the rest of the run (scaled to
  // the same total), blue where less, white where the same.
  function diffColour(after, before) {
    const r = (after - before) / Math.max(1, after, before);
    const fade = Math.round(255 * (1 - Math.min(1, Math.abs(r))));
    return r >= 0 ? "rgb(255," + fade + "," + fade + ")" : "rgb(" + fade + "," + fade + ",255)";
  }

  function render() {
    const d = state.data;
    if (!d) return;
    document.body.dataset.range = d.range ? d.range.join("-") : "";
    document.body.dataset.compare = d.compare ? "1" : "";
    $("window").disabled = state.range !== null;
    renderTotals(d);
    renderProcesses(d);
    updateLinks();
    const svg = $("graph");
    if (!d.graph.root || d.graph.root[1] === 0) {
      svg.replaceChildren();
      svg.setAttribute("height", 0);
      $("empty").hidden = false;
      $("match").textContent = "";
      renderCrumbs(d, d.graph.root ? [d.graph.root] : []);
      return;
    }
    $("empty").hidden = true;
    const chain = zoomed(d);
    state.zoom = chain.slice(1).map((n) => d.graph.names[n[0]][0]);
    renderCrumbs(d, chain);
    const width = svg.clientWidth || 1200;
    const focus = chain[chain.length - 1];
    const total = focus[1];
    const depth = (n) => 1 + Math.max(0, ...(n[2] || []).map(depth));
    const rows = chain.length - 1 + depth(focus);
    const height = rows * ROW + 4;
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    const frag = document.createDocumentFragment();
    let matched = 0;
    const scale = width / total;
    const draw = (node, x, level, ancestor) => {
      const w = node[1] * scale;
      if (w < 0.5) return;
      const [name, kind] = d.graph.names[node[0]];
      const y = height - (level + 1) * ROW;
      const g = document.createElementNS(SVGNS, "g");
      g.setAttribute("class", "frame" + (ancestor ? " ancestor" : ""));
      g.dataset.name = name;
      g.dataset.value = node[1];
      const title = document.createElementNS(SVGNS, "title");
      title.textContent = name + " (" + fmt(node[1]) + " " + d.unit + ", " + pct(node[1], d.graph.root[1]) + ")";
      const diff = d.compare && node.length > 3;
      if (diff) {
        g.dataset.before = node[3];
        const change = (node[1] - node[3]) / Math.max(1, d.graph.root[1]) * 100;
        title.textContent += ", rest of run " + fmt(node[3]) + " (scaled): " + (change >= 0 ? "+" : "") + change.toFixed(2) + "%";
      }
      const rect = document.createElementNS(SVGNS, "rect");
      rect.setAttribute("x", x.toFixed(2));
      rect.setAttribute("y", y);
      rect.setAttribute("width", Math.max(0, w - 0.5).toFixed(2));
      rect.setAttribute("height", ROW - 1);
      rect.setAttribute("rx", 2);
      rect.setAttribute("fill", diff ? diffColour(node[1], node[3]) : colour(kind, name));
      g.append(title, rect);
      const fits = Math.floor((w - 6) / 7.2);
      if (fits >= 3) {
        const text = document.createElementNS(SVGNS, "text");
        text.setAttribute("x", (x + 3).toFixed(2));
        text.setAttribute("y", y + ROW - 5);
        text.textContent = name.length <= fits ? name : name.slice(0, fits - 2) + "..";
        g.append(text);
      }
      g.setAttribute("tabindex", "0");
      g.setAttribute("role", "button");
      g.setAttribute("aria-label", title.textContent);
      const zoom = () => {
        state.zoom = pathOf(g);
        render();
      };
      g.addEventListener("click", zoom);
      g.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          zoom();
        }
      });
      g.addEventListener("mouseenter", () => { $("detail").textContent = title.textContent; });
      frag.append(g);
      return g;
    };
    // Ancestors of the zoomed frame span the full width, dimmed. Each
    // frame remembers its path of names, the zoom target when clicked.
    chain.slice(0, -1).forEach((node, level) => {
      const g = draw(node, 0, level, true);
      if (g) g._path = state.zoom.slice(0, level);
    });
    const walk = (node, x, level, path, inMatch) => {
      const g = draw(node, x, level, false);
      if (!g) return;
      g._path = path;
      const name = d.graph.names[node[0]][0];
      const m = node !== d.graph.root && matches(name);
      if (m) {
        g.classList.add("match");
        if (!inMatch) matched += node[1];
      }
      let cx = x;
      for (const c of node[2] || []) {
        walk(c, cx, level + 1, path.concat([d.graph.names[c[0]][0]]), inMatch || m);
        cx += c[1] * scale;
      }
    };
    walk(focus, 0, chain.length - 1, state.zoom.slice(), false);
    svg.replaceChildren(frag);
    $("match").textContent = state.search
      ? "matched " + pct(matched, total) + " (" + fmt(matched) + " " + d.unit + ")"
      : "";
    $("match").dataset.share = total > 0 ? (matched / total).toString() : "0";
    document.body.dataset.seq = d.seq;
    document.body.dataset.total = d.total;
  }

  function pathOf(g) {
    return g._path || [];
  }

  function init() {
    readHash();
    $("pause").addEventListener("click", () => {
      state.paused = !state.paused;
      $("pause").textContent = state.paused ? "Resume" : "Pause";
      $("pause").setAttribute("aria-pressed", String(state.paused));
      $("status").textContent = state.paused ? "paused" : "live";
      writeHash();
      if (!state.paused) poll(false);
    });
    const win = $("window");
    if (![...win.options].some((o) => o.value === String(state.last))) {
      const o = document.createElement("option");
      o.value = String(state.last);
      o.textContent = "last " + state.last + " s";
      win.append(o);
    }
    win.value = String(state.last);
    win.addEventListener("change", () => {
      state.last = parseInt(win.value, 10) || 0;
      writeHash();
      refresh();
    });
    $("process").addEventListener("change", () => {
      state.pid = $("process").value;
      state.zoom = [];
      writeHash();
      refresh();
    });
    const search = $("search");
    search.value = state.search;
    let searching = null;
    search.addEventListener("input", () => {
      state.search = search.value;
      writeHash();
      render();
      // The timeline follows the search once typing pauses.
      clearTimeout(searching);
      searching = setTimeout(() => pollTimes().catch(() => {}), 250);
    });
    $("thread").addEventListener("change", () => {
      state.tid = $("thread").value;
      state.zoom = [];
      writeHash();
      refresh();
    });
    $("range-clear").addEventListener("click", () => {
      state.range = null;
      state.compare = false;
      state.zoom = [];
      writeHash();
      refresh();
    });
    $("compare").addEventListener("change", () => {
      state.compare = $("compare").checked;
      writeHash();
      refresh();
    });
    $("heat-toggle").addEventListener("click", () => {
      state.heat = !state.heat;
      writeHash();
      renderTime();
      pollTimes().catch(() => {});
    });
    const preview = (r) => {
      state.preview = r;
      renderTime();
    };
    T.attach($("strip"), () => state.strip, selectRange, hover, preview);
    T.attach($("heat"), () => state.heatmap, selectRange, hover, preview);
    window.addEventListener("resize", () => {
      render();
      renderTime();
    });
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    updateLinks();
    // Even a view opened paused shows one snapshot.
    refresh();
    schedule();
  }

  function refresh() {
    return poll(true);
  }

  document.addEventListener("DOMContentLoaded", init);
})();
