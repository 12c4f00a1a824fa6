// The runs list: per pipeline, its recent runs (status, duration, tokens, cost, trigger),
// a chart of duration and cost over the recent runs of each job, and a button that starts
// a run.

import { h, svg, replace, badge, duration, cost, spent, tokens, ago } from "./dom.js";
import { get, post } from "./api.js";

const LIMIT = 50;
const CHART_RUNS = 20;

/** Shows the pipelines (all, or the one named) and keeps them fresh while visible. */
export async function showRuns(main, only) {
  const pipelines = (await get("/pipelines")).filter((p) => !only || p.name === only);
  const sections = pipelines.map((p) => ({ pipeline: p, el: h("section", { class: "pipeline" }) }));
  if (sections.length === 0) {
    replace(main, h("p", { class: "muted" }, only ? `No pipeline named ${only}.` : "No pipelines served."));
    return;
  }
  replace(main, sections.map((s) => s.el));
  const refresh = async () => {
    await Promise.all(sections.map(async (s) => {
      const runs = await get(`/runs?pipeline=${encodeURIComponent(s.pipeline.name)}&limit=${LIMIT}`);
      paintPipeline(s, runs);
    }));
  };
  await refresh();
  setInterval(() => {
    if (!document.hidden) refresh().catch(() => {});
  }, 3000);
}

function paintPipeline(section, runs) {
  const p = section.pipeline;
  if (!section.frame) {
    const job = h("select", { class: "job", "aria-label": "job" }, p.jobs.map((j) => h("option", { value: j }, j)));
    const status = h("span", { class: "start-status" });
    const start = h("button", { class: "start", onclick: () => startRun(p.name, job.value, status) }, "Start run");
    section.body = h("div", { class: "runs-body" });
    section.frame = true;
    replace(section.el,
      h("h2", null, h("a", { href: `/p/${encodeURIComponent(p.name)}` }, p.name), " ", h("span", { class: "muted file" }, p.file)),
      h("div", { class: "start-bar" }, p.jobs.length > 1 ? job : null, start, status),
      section.body);
  }
  const jobs = [...new Set(runs.map((r) => r.job))];
  replace(section.body,
    h("div", { class: "charts" }, jobs.map((j) => chart(j, runs.filter((r) => r.job === j)))),
    runs.length === 0 ? h("p", { class: "muted" }, "No runs yet.") : table(runs));
}

async function startRun(pipeline, job, status) {
  status.textContent = "starting…";
  try {
    const answer = await post("/runs", { pipeline, job, trigger: "web" });
    location.assign(`/runs/${answer.id}`);
  } catch (error) {
    status.textContent = error.message;
  }
}

function table(runs) {
  return h("table", { class: "runs" },
    h("thead", null, h("tr", null, ["run", "job", "status", "started", "duration", "tokens", "cost", "trigger"].map((c) => h("th", null, c)))),
    h("tbody", null, runs.map((r) => h("tr", { class: `st-${r.status}`, dataset: { run: r.id } },
      h("td", null, h("a", { href: `/runs/${r.id}` }, `#${r.id}`)),
      h("td", null, r.job),
      h("td", null, badge(r.status)),
      h("td", null, ago(r.started_ms)),
      h("td", null, r.duration_ms === null || r.duration_ms === undefined ? "…" : duration(r.duration_ms)),
      h("td", null, tokens(r.tokens)),
      h("td", { class: "cost" }, spent(r)),
      h("td", null, r.trigger)))));
}

/** Duration as bars and cost as a line over a job's recent runs, oldest on the left. */
function chart(job, runs) {
  const recent = runs.filter((r) => r.duration_ms !== null && r.duration_ms !== undefined).slice(0, CHART_RUNS).reverse();
  const W = 240, H = 60, gap = 2;
  const bar = recent.length ? (W - gap * recent.length) / Math.max(recent.length, 1) : 0;
  const maxDur = Math.max(1, ...recent.map((r) => r.duration_ms));
  const priced = recent.filter((r) => r.cost_usd !== null && r.cost_usd !== undefined);
  const maxCost = Math.max(0, ...priced.map((r) => r.cost_usd));
  const shapes = recent.map((r, i) => {
    const hgt = Math.max(1, (r.duration_ms / maxDur) * (H - 4));
    return svg("rect", { x: i * (bar + gap), y: H - hgt, width: Math.max(bar, 1), height: hgt, class: `bar st-${r.status}` },
      svg("title", null, `#${r.id}: ${duration(r.duration_ms)}, ${cost(r.cost_usd)}`));
  });
  const points = recent.map((r, i) => (r.cost_usd === null || r.cost_usd === undefined || maxCost === 0 ? null
    : `${i * (bar + gap) + bar / 2},${H - 2 - (r.cost_usd / maxCost) * (H - 6)}`)).filter(Boolean);
  if (points.length > 1) shapes.push(svg("polyline", { points: points.join(" "), class: "cost-line" }));
  const legend = `${job}: duration (bars, max ${duration(maxDur)})` +
    (priced.length ? `, cost (line, max ${cost(maxCost)})` : ", unpriced");
  return h("figure", { class: "chart" },
    svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": legend }, shapes),
    h("figcaption", null, legend));
}
