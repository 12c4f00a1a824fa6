// The runs list's chart of one job: each recent run's duration as a bar (left axis, with
// its unit), its cost as a line (right axis, dollars), failed runs in red with a mark, the
// run numbers along the bottom, a legend, and a click on a bar opening that run.

import { h, svg, duration, cost } from "./dom.js";

const W = 420, H = 150;
const M = { left: 46, right: 52, top: 14, bottom: 30 };
const FAILED = new Set(["failed", "errored", "aborted"]);

/** The unit durations up to `max` ms are shown in: [divisor, name]. */
function unitOf(max) {
  if (max < 2000) return [1, "ms"];
  if (max < 120000) return [1000, "s"];
  if (max < 7200000) return [60000, "min"];
  return [3600000, "h"];
}

/** A round top for an axis whose largest value is `v` (1, 2, 2.5 or 5 times a power of ten). */
function niceTop(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 2.5, 5, 10].map((k) => k * p).find((t) => t >= v);
}

function label(v) {
  return Number.isInteger(v) ? String(v) : v.toFixed(v < 0.01 ? 4 : 2).replace(/0+$/, "");
}

/** An axis: a line and three ticks at 0, half and top; `x` is where it stands. */
function axis(x, top, side, fmt) {
  const y = (f) => M.top + (1 - f) * (H - M.top - M.bottom);
  const out = [svg("line", { x1: x, x2: x, y1: y(0), y2: y(1) })];
  for (const f of [0, 0.5, 1]) {
    const d = side === "left" ? -4 : 4;
    out.push(svg("line", { x1: x, x2: x + d, y1: y(f), y2: y(f) }));
    out.push(svg("text", { x: x + d * 1.5, y: y(f) + 3, "text-anchor": side === "left" ? "end" : "start" }, fmt(top * f)));
  }
  return svg("g", { class: `axis axis-${side}` }, out);
}

/** The chart of `runs` (a job's, newest first); `open(id)` opens a run. */
export function chart(job, runs, open) {
  const recent = runs.filter((r) => r.duration_ms !== null && r.duration_ms !== undefined).slice(0, 20).reverse();
  const plotW = W - M.left - M.right, plotH = H - M.top - M.bottom;
  const slot = plotW / Math.max(recent.length, 1);
  const bar = Math.max(2, slot * 0.7);
  const [div, unit] = unitOf(Math.max(1, ...recent.map((r) => r.duration_ms)));
  const durTop = niceTop(Math.max(1, ...recent.map((r) => r.duration_ms)) / div);
  const priced = recent.filter((r) => r.cost_usd !== null && r.cost_usd !== undefined);
  const costTop = niceTop(Math.max(0, ...priced.map((r) => r.cost_usd)));
  const x = (i) => M.left + i * slot + (slot - bar) / 2;
  const yOf = (f) => M.top + (1 - f) * plotH;
  const every = Math.ceil(recent.length / 10);
  const bars = recent.map((r, i) => {
    const f = r.duration_ms / div / durTop;
    const failed = FAILED.has(r.status);
    return svg("g", { class: `bar-run${failed ? " failed" : ""}`, dataset: { run: r.id }, onclick: () => open(r.id) },
      svg("rect", { x: x(i), y: yOf(f), width: bar, height: Math.max(1, f * plotH), class: `bar st-${r.status}` }),
      failed ? svg("text", { x: x(i) + bar / 2, y: yOf(f) - 3, "text-anchor": "middle", class: "fail-mark" }, "✗") : null,
      i % every === 0 || i === recent.length - 1
        ? svg("text", { x: x(i) + bar / 2, y: H - M.bottom + 12, "text-anchor": "middle", class: "run-label" }, `#${r.id}`) : null,
      svg("title", null, `run #${r.id} · ${r.status} · ${duration(r.duration_ms)} · ${cost(r.cost_usd)} — click to open`));
  });
  const parts = [
    svg("g", { class: "axis axis-x" }, svg("line", { x1: M.left, x2: W - M.right, y1: yOf(0), y2: yOf(0) })),
    axis(M.left, durTop, "left", label),
    svg("text", { class: "axis-title", x: 4, y: M.top - 4 }, `duration (${unit})`),
    svg("text", { class: "axis-title", x: M.left + plotW / 2, y: H - 4, "text-anchor": "middle" }, "run"),
    bars,
  ];
  if (priced.length) {
    const pts = recent.map((r, i) => (r.cost_usd === null || r.cost_usd === undefined ? null
      : [x(i) + bar / 2, yOf(r.cost_usd / costTop)])).filter(Boolean);
    parts.push(axis(W - M.right, costTop, "right", (v) => `$${label(v)}`));
    parts.push(svg("text", { class: "axis-title", x: W - 4, y: M.top - 4, "text-anchor": "end" }, "cost ($)"));
    if (pts.length > 1) parts.push(svg("polyline", { points: pts.map((p) => p.join(",")).join(" "), class: "cost-line" }));
    parts.push(pts.map(([px, py]) => svg("circle", { cx: px, cy: py, r: 2, class: "cost-dot" })));
  }
  const legend = h("div", { class: "legend" },
    h("span", null, h("span", { class: "sw sw-dur" }), `duration (${unit})`),
    h("span", null, h("span", { class: "sw sw-fail" }), "failed run ✗"),
    priced.length ? h("span", null, h("span", { class: "sw sw-cost" }), "cost ($)") : h("span", null, "cost: unpriced"));
  const title = `${job}: the last ${recent.length} runs' duration${priced.length ? " and cost" : ""}`;
  return h("figure", { class: "chart", dataset: { job } },
    svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": title }, parts),
    h("figcaption", null, title),
    legend);
}
