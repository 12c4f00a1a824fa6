// A run beside one of its shadows (/compare/A/shadow/N), and the run page's list of a run's
// shadows with a form that starts one.
//
// A shadow (docs/shadow-runs.md) re-ran the run's agent steps in scratch directories; the
// server kept its report (GET /runs/{id}/shadows/{n}): per agent step the verdicts, the
// first call that differs, the asserts that fail now, tokens, cost and time, and the
// shadow step's own calls. The run's side comes from GET /runs/{id} and its event stream,
// as on /compare/A/B. The verdict call is left out of both call lists, as the report
// compares them; a changed verdict is shown on the step's row.

import { h, replace, badge, duration, tokens, cost } from "./dom.js";
import { get, post, follow } from "./api.js";
import { noteCall, flatten, stepCell, callsTable, paintOnce } from "./compare.js";

const VERDICT = "verdict";

export async function showShadow(main, id, n) {
  const page = new ShadowPage(main, id, n);
  await page.load();
  return page;
}

class ShadowPage {
  constructor(main, id, n) {
    this.main = main;
    this.id = id;
    this.n = n;
    this.calls = new Map(); // the run's: seq -> [{name, arguments, is_error}]
    this.ended = false; // the run's stream has caught up
    this.frame = 0;
  }

  async load() {
    [this.run, this.shadow] = await Promise.all([
      get(`/runs/${this.id}`), get(`/runs/${this.id}/shadows/${this.n}`)]);
    this.paint();
    const stream = follow(this.id, {
      event: (kind, e) => {
        if (kind === "agent" && noteCall(this.calls, e)) this.schedule();
      },
      end: () => {
        stream.close();
        this.ended = true;
        this.schedule();
      },
    });
    if (this.shadow.status === "running") this.poll();
  }

  /** A shadow still running is read again until it has ended. */
  poll() {
    setTimeout(() => {
      get(`/runs/${this.id}/shadows/${this.n}`).then((s) => {
        this.shadow = s;
        this.schedule();
      }).catch(() => {}).finally(() => {
        if (this.shadow.status === "running") this.poll();
      });
    }, 1000);
  }

  schedule() {
    this.frame = paintOnce(this.frame, () => {
      this.frame = 0;
      this.paint();
    });
  }

  paint() {
    const r = this.run;
    const s = this.shadow;
    document.title = `run #${r.id} ⇄ shadow ${s.n}`;
    const parts = [h("h1", null, `Run #${r.id} ⇄ its shadow ${s.n}`), shadowTotals(r, s)];
    if (s.status === "failed") parts.push(h("div", { class: "error shadow-error" }, s.error || "failed"));
    if (s.status === "running") parts.push(h("div", { class: "muted" }, "the shadow is running…"));
    parts.push(h("h2", null, "Steps"), this.stepsTable());
    replace(this.main, ...parts);
    // For readers of the page (the tests): painted with everything both sides will say.
    if (this.ended && s.status !== "running") document.body.dataset.compare = "ready";
  }

  stepsTable() {
    const report = this.shadow.traced?.report;
    const bySeq = new Map((report?.steps ?? []).map((st) => [st.seq, st]));
    const traces = new Map((this.shadow.traced?.traces ?? []).map((t) => [t.seq, t]));
    const rows = [];
    for (const [path, step] of flatten(this.run.steps)) {
      const again = bySeq.get(step.seq);
      const differs = !!again && (changed(again) || !!again.first_difference);
      rows.push(h("tr", { class: `step-row${differs ? " differs" : ""}`, dataset: { path } },
        h("td", { class: "step-name" },
          h("span", { class: "indent" }, "  ".repeat(step.depth)),
          h("span", { class: "kind" }, step.kind), " ", h("strong", null, step.name)),
        stepCell(step, "side-a"), shadowCell(step, again, traces.get(step.seq), this.shadow)));
      if (again) {
        const own = (this.calls.get(step.seq) ?? []).filter((c) => c.name !== VERDICT);
        const table = callsTable([own, traces.get(step.seq)?.calls ?? []], [this.ended, true]);
        const first = again.first_difference?.index;
        if (first !== undefined) {
          table.querySelector(`tr.call-row[data-index="${first + 1}"]`)?.classList.add("first-difference");
        }
        rows.push(h("tr", { class: "calls-row", dataset: { path } }, h("td", { colspan: "3" }, table)));
      }
    }
    return h("table", { class: "compare-steps" },
      h("thead", null, h("tr", null, h("th", null, "step"),
        h("th", null, h("a", { href: `/runs/${this.run.id}` }, `run #${this.run.id}`)),
        h("th", null, `shadow ${this.shadow.n}`))),
      h("tbody", null, rows));
  }
}

/** Whether a shadow step's outcome changed, as `treadle run --shadow` counts it. */
function changed(st) {
  return st.verdict_changed || st.failing_asserts.length > 0 || !!st.failure;
}

/** The run's and the shadow's facts; tokens and cost are the agent steps' on both sides. */
function shadowTotals(run, s) {
  const steps = s.traced?.report?.steps ?? [];
  const sum = (f) => steps.reduce((n, st) => n + f(st), 0);
  const usd = (side) => (steps.length && steps.every((st) => st[side].usd !== null) ? sum((st) => st[side].usd) : null);
  const shadowTime = (s.traced?.traces ?? []).reduce((n, t) => n + t.duration_ms, 0);
  const row = (label, a, b, cls) => h("tr", { class: cls },
    h("th", null, label), h("td", { class: "side-a" }, a), h("td", { class: "side-b" }, b));
  const outcome = s.status === "done"
    ? h("span", { class: `badge ${s.changed ? "st-failed" : "st-succeeded"}` }, s.changed ? "changed" : "unchanged")
    : badge(s.status);
  return h("table", { class: "compare-totals" },
    row("run", h("a", { href: `/runs/${run.id}` }, `#${run.id}`), `shadow ${s.n} of run #${run.id}`, "t-run"),
    row("pipeline / job", `${run.pipeline} / ${run.job}`, s.traced?.report?.job ?? run.job, "t-job"),
    row("model", "as recorded", s.model || "each agent's own, as the pipeline says now", "t-model"),
    row("status", badge(run.status), outcome, "t-status"),
    row("duration", duration(run.duration_ms) || "running",
      s.status === "done" ? `${duration(shadowTime)} (agent steps)` : "–", "t-duration"),
    row("agent tokens", tokens(sum((st) => st.original.tokens)) || "no tokens",
      tokens(sum((st) => st.shadow.tokens)) || "no tokens", "t-tokens"),
    row("agent cost", cost(usd("original")), cost(usd("shadow")), "t-cost"));
}

/** The shadow's side of one step of the run. */
function shadowCell(step, again, trace, shadow) {
  if (!again) {
    const why = step.kind !== "agent" ? "not run again" : shadow.status === "running" ? "…" : "not re-run";
    return h("td", { class: "side-b absent" }, why);
  }
  const verdict = again.verdict_changed
    ? h("span", { class: "verdict verdict-changed" }, " verdict: ",
      h("del", null, again.original_verdict ?? "none"), " → ", h("strong", null, again.shadow_verdict ?? "none"))
    : again.shadow_verdict ? h("span", { class: "verdict" }, " verdict: ", h("strong", null, again.shadow_verdict)) : null;
  const meta = [again.model, trace ? duration(trace.duration_ms) : "", tokens(again.shadow.tokens), cost(again.shadow.usd),
    `${again.replayed_calls} answered from the recording, ${again.live_calls} run in scratch`];
  return h("td", { class: "side-b" },
    h("span", { class: `badge ${changed(again) ? "st-failed" : "st-succeeded"}` }, changed(again) ? "changed" : "same outcome"),
    verdict,
    again.failing_asserts.map((a) => h("div", { class: "error assert-fails" }, `assert now fails: ${a}`)),
    again.failure ? h("div", { class: "error" }, `failed: ${again.failure}`) : null,
    h("div", { class: "meta" }, meta.filter(Boolean).join(" · ")));
}

/** The run page's shadows of a finished run with agent steps: links to each one's comparison, and a form
 * that starts one (POST /runs/{id}/shadow). Filled in once they are read. */
export function shadowLinks(run) {
  const box = h("div", { class: "shadows" });
  // A shadow re-runs agent steps: a run still writing its calls, or one with no agent
  // step, has nothing to shadow.
  const agents = [...flatten(run.steps).values()].some((s) => s.kind === "agent");
  if (run.status === "running" || !agents) return box;
  get(`/runs/${run.id}/shadows`).then((list) => {
    const items = list.map((s) => h("li", { class: "shadow-item", dataset: { n: s.n } },
      h("a", { class: "shadow-link", href: `/compare/${run.id}/shadow/${s.n}` }, `shadow ${s.n}`),
      ` on ${s.model || "the pipeline's models"} · `,
      s.status === "done" ? (s.changed ? "changed" : "unchanged") : s.status));
    const model = h("input", { class: "shadow-model", placeholder: "provider/model (empty: as the pipeline says)", size: "40" });
    const error = h("span", { class: "error" });
    const start = async (event) => {
      event.preventDefault();
      replace(error);
      try {
        const body = model.value.trim() ? { model: model.value.trim() } : {};
        const begun = await post(`/runs/${run.id}/shadow`, body);
        location.assign(`/compare/${run.id}/shadow/${begun.n}`);
      } catch (e) {
        replace(error, String(e.message || e));
      }
    };
    replace(box,
      items.length ? h("ul", { class: "shadow-list" }, items) : null,
      h("form", { class: "shadow-form", onsubmit: start },
        "shadow its agent steps on ", model, " ", h("button", { type: "submit" }, "Shadow"), " ", error));
  }).catch(() => {});
  return box;
}
