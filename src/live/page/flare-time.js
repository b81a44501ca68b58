// flare live, time views: the strip of samples per slice above the flame
// graph and the FlameScope-style heat map (columns = seconds, rows =
// 20 ms slices), drawn on canvases from api/timeline answers, with drag
// to select a time range. flare.js owns the state and the fetching.
"use strict";
window.FlareTime = (function () {
  const HEAT_SLICE = 20;          // ms per heat map row
  const HEAT_ROWS = 1000 / HEAT_SLICE;
  const HEAT_ROW_PX = 4;
  const NICE = [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 600000, 3600000];

  // The smallest "nice" slice at least `ms` wide.
  function niceSlice(ms) {
    for (const n of NICE) if (n >= ms) return n;
    return NICE[NICE.length - 1];
  }

  function secs(ms) {
    return (ms / 1000).toFixed(3) + " s";
  }

  // Sizes a canvas to its CSS width (and `height` CSS pixels), sharp on
  // high-density screens; returns its 2D context and CSS width.
  function fit(canvas, height) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 1200;
    canvas.style.height = height + "px";
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    return [g, width];
  }

  // Heat colour of a share of the maximum (0..1): pale yellow to dark red.
  function heat(v) {
    if (v <= 0) return "rgb(250,250,242)";
    const t = Math.min(1, v);
    const r = 255 - 80 * t, gr = 235 - 200 * t, b = 150 - 140 * t;
    return "rgb(" + [r, gr, b].map(Math.round).join(",") + ")";
  }

  // The strip: bars of everything (grey) and of the filter (purple) per
  // slice, the selected range shaded. Returns x <-> time mappings.
  function drawStrip(canvas, tl, range) {
    const [g, width] = fit(canvas, 64);
    const n = tl.all.length;
    const from = tl.from, slice = tl.slice;
    const toX = (ms) => (ms - from) / (n * slice) * width;
    const toMs = (x) => from + Math.max(0, Math.min(1, x / width)) * n * slice;
    g.fillStyle = "#fafaf2";
    g.fillRect(0, 0, width, 64);
    let max = 0;
    for (const v of tl.all) max = Math.max(max, v);
    const bw = width / Math.max(1, n);
    const bar = (values, colour) => {
      g.fillStyle = colour;
      values.forEach((v, i) => {
        if (v > 0) {
          const h = Math.max(1, v / max * 48);
          g.fillRect(i * bw, 64 - h, Math.max(1, bw - (bw > 3 ? 1 : 0)), h);
        }
      });
    };
    if (max > 0) {
      bar(tl.all, tl.filtered ? "#c8c8c0" : "#8d6e63");
      if (tl.filtered) bar(tl.counts, "#8e24aa");
    }
    // Second marks at least 80 px apart, labelled with the time.
    const span = n * slice;
    const step = niceSlice(span / Math.max(1, width / 80));
    g.fillStyle = "#777";
    g.font = "10px sans-serif";
    for (let t = Math.ceil(from / step) * step; t < from + span; t += step) {
      const x = toX(t);
      g.fillRect(x, 0, 1, 5);
      g.fillText((t / 1000).toFixed(step < 1000 ? 1 : 0) + "s", x + 2, 12);
    }
    g.fillStyle = "rgba(120,120,120,0.35)";
    for (const [a, b] of tl.dropped.spans) {
      g.fillRect(toX(a), 0, Math.max(1, toX(b) - toX(a)), 4);
    }
    if (range) {
      g.fillStyle = "rgba(30,100,220,0.25)";
      g.fillRect(toX(range[0]), 0, Math.max(1, toX(range[1]) - toX(range[0])), 64);
      g.strokeStyle = "rgba(30,100,220,0.9)";
      g.strokeRect(toX(range[0]) + 0.5, 0.5, Math.max(1, toX(range[1]) - toX(range[0])) - 1, 63);
    }
    canvas.dataset.slices = n;
    canvas.dataset.slice = slice;
    canvas.dataset.from = from;
    canvas.dataset.max = max;
    canvas.dataset.total = tl.total;
    canvas.dataset.matched = tl.matched;
    return {
      toMs: toMs,
      at: (x) => {
        const i = Math.floor(x / bw);
        if (i < 0 || i >= n) return null;
        return { from: from + i * slice, to: from + (i + 1) * slice, value: (tl.filtered ? tl.counts : tl.all)[i] };
      },
      snap: (a, b) => [Math.floor((a - from) / slice) * slice + from, Math.ceil((b - from) / slice) * slice + from],
    };
  }

  // The heat map of a 20 ms timeline: one column per second (the latest
  // that fit), one row per 20 ms, colour = the filter's samples.
  function drawHeat(canvas, tl, range) {
    const height = HEAT_ROWS * HEAT_ROW_PX;
    const [g, width] = fit(canvas, height);
    const values = tl.filtered ? tl.counts : tl.all;
    const first = Math.floor(tl.from / 1000);
    const last = Math.floor((tl.from + values.length * tl.slice - 1) / 1000);
    const total = Math.max(1, last - first + 1);
    const cw = Math.max(3, Math.min(32, Math.floor(width / total)));
    const cols = Math.min(total, Math.floor(width / cw));
    const col0 = last - cols + 1;
    let max = 0;
    for (const v of values) max = Math.max(max, v);
    g.fillStyle = "rgb(250,250,242)";
    g.fillRect(0, 0, width, height);
    const cell = (ms) => [Math.floor(ms / 1000) - col0, Math.floor((ms % 1000) / HEAT_SLICE)];
    values.forEach((v, i) => {
      const [c, r] = cell(tl.from + i * tl.slice);
      if (c < 0 || v <= 0) return;
      g.fillStyle = heat(v / max);
      g.fillRect(c * cw, r * HEAT_ROW_PX, cw - 1, HEAT_ROW_PX - 0.5);
    });
    if (range) {
      g.fillStyle = "rgba(30,100,220,0.35)";
      for (let t = range[0]; t < range[1]; t += HEAT_SLICE) {
        const [c, r] = cell(t);
        if (c >= 0) g.fillRect(c * cw, r * HEAT_ROW_PX, cw - 1, HEAT_ROW_PX - 0.5);
      }
    }
    canvas.dataset.columns = cols;
    canvas.dataset.col0 = col0;
    canvas.dataset.cw = cw;
    canvas.dataset.rowPx = HEAT_ROW_PX;
    canvas.dataset.max = max;
    // Time at a point: the start of its cell.
    const toMs = (x, y) => {
      const c = Math.floor(x / cw), r = Math.floor(y / HEAT_ROW_PX);
      if (c < 0 || c >= cols || r < 0 || r >= HEAT_ROWS) return null;
      return (col0 + c) * 1000 + r * HEAT_SLICE;
    };
    return {
      toMs: toMs,
      at: (x, y) => {
        const t = toMs(x, y);
        if (t === null) return null;
        const i = Math.floor((t - tl.from) / tl.slice);
        const v = i >= 0 && i < values.length ? values[i] : 0;
        return { from: t, to: t + HEAT_SLICE, value: v };
      },
      snap: (a, b) => [Math.min(a, b), Math.max(a, b) + HEAT_SLICE],
    };
  }

  // Mouse drag on `canvas`: `layout()` maps points to times; `select`
  // gets the range dragged over; `hover` the cell under the mouse.
  function attach(canvas, layout, select, hover, preview) {
    let start = null;
    const point = (e) => {
      const r = canvas.getBoundingClientRect();
      return [e.clientX - r.left, e.clientY - r.top];
    };
    canvas.addEventListener("mousedown", (e) => {
      const l = layout();
      if (!l || e.button !== 0) return;
      const [x, y] = point(e);
      const t = l.toMs(x, y);
      if (t === null) return;
      start = { x: x, y: y, t: t };
      e.preventDefault();
    });
    window.addEventListener("mousemove", (e) => {
      const l = layout();
      if (!l) return;
      const [x, y] = point(e);
      if (start) {
        const t = l.toMs(x, y);
        if (t !== null) preview(l.snap(Math.min(start.t, t), Math.max(start.t, t)));
      } else if (e.target === canvas) {
        hover(l.at(x, y));
      }
    });
    canvas.addEventListener("mouseleave", () => { if (!start) hover(null); });
    window.addEventListener("mouseup", (e) => {
      if (!start) return;
      const l = layout();
      const [x, y] = point(e);
      const t = l ? l.toMs(x, y) : null;
      const s = start;
      start = null;
      if (t === null || Math.abs(x - s.x) + Math.abs(y - s.y) < 3) {
        preview(null);
        return;
      }
      select(l.snap(Math.min(s.t, t), Math.max(s.t, t)));
    });
  }

  return { niceSlice, drawStrip, drawHeat, attach, secs, HEAT_SLICE };
})();
