// The runs list: per pipeline, its recent runs (status, duration, tokens, cost, trigger),
// a chart of duration and cost over the recent runs of each job, and a button that starts
// a run.

import { h, replace, badge, waitingBadge, waitingText, duration, spent, tokens, ago } from "./dom.js";
import { get } from "./api.js";
import { chart } from "./chart.js";
import { startForm } from "./start.js";
import { tickElapsed } from "./details.js";

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
  tickElapsed();
  setInterval(() => {
    if (!document.hidden) refresh().catch(() => {});
  }, 3000);
}

function paintPipeline(section, runs) {
  const p = section.pipeline;
  if (!section.frame) {
    section.body = h("div", { class: "runs-body" });
    section.frame = true;
    replace(section.el,
      h("h2", null, h("a", { href: `/p/${encodeURIComponent(p.name)}` }, p.name), " ", h("span", { class: "muted file" }, p.file)),
      h("div", { class: "start-bar" }, startForm(p)),
      section.body);
  }
  const jobs = [...new Set(runs.map((r) => r.job))];
  const open = (id) => location.assign(`/runs/${id}`);
  replace(section.body,
    h("div", { class: "charts" }, jobs.map((j) => chart(j, runs.filter((r) => r.job === j), open))),
    runs.length === 0 ? h("p", { class: "muted" }, "No runs yet.") : table(runs));
}

function table(runs) {
  return h("table", { class: "runs" },
    h("thead", null, h("tr", null, ["run", "job", "status", "started", "duration", "tokens", "cost", "trigger"].map((c) => h("th", null, c)))),
    h("tbody", null, runs.map((r) => h("tr", { class: `st-${r.status}`, dataset: { run: r.id } },
      h("td", null, h("a", { href: `/runs/${r.id}` }, `#${r.id}`)),
      h("td", null, r.job),
      h("td", { class: "status" }, r.waiting
        ? [waitingBadge(r.waiting), h("div", { class: "wait muted" }, waitingText(r.waiting))]
        : badge(r.status)),
      h("td", null, ago(r.started_ms)),
      h("td", null, r.duration_ms === null || r.duration_ms === undefined
        ? h("span", { class: "elapsed", dataset: { since: r.started_ms } }, duration(Math.max(0, Date.now() - r.started_ms)))
        : duration(r.duration_ms)),
      h("td", null, tokens(r.tokens)),
      h("td", { class: "cost" }, spent(r)),
      h("td", null, r.trigger)))));
}
