// Two runs side by side (/compare/A/B): their totals, each step's status, verdict,
// duration, tokens and cost, each agent step's prompts side by side (the lines one side
// lacks marked: a fork's edited prompt is what changed), and each agent step's tool calls
// aligned by their order in the step. A fork's page links here against its parent.
//
// The steps come from GET /runs/{id}; the tool calls from each run's event stream, read
// from its start (a finished run's stream ends once it has caught up, a running one's
// goes on, and the page follows it). Rows that differ are marked.
//
// A run beside one of its shadows (/compare/A/shadow/N) is in shadow.js, which shares
// the pieces exported here.

import { h, replace, badge, duration, spent, tokens, cost } from "./dom.js";
import { get, follow } from "./api.js";

export async function showCompare(main, a, b) {
  const page = new ComparePage(main, [a, b]);
  await page.load();
  return page;
}

class ComparePage {
  constructor(main, ids) {
    this.main = main;
    this.ids = ids;
    this.calls = ids.map(() => new Map()); // seq -> [{name, arguments, is_error}]
    this.prompts = ids.map(() => new Map()); // seq -> [text of each user prompt]
    this.ended = ids.map(() => false); // its stream has caught up and ended
    this.settled = ids.map(() => false); // and its final totals were fetched
    this.frame = 0;
  }

  async load() {
    this.runs = await Promise.all(this.ids.map((id) => get(`/runs/${id}`)));
    this.paint();
    this.ids.forEach((id, side) => this.listen(id, side));
  }

  listen(id, side) {
    const stream = follow(id, {
      event: (kind, e) => {
        if (kind === "agent") this.onAgent(side, e);
      },
      end: () => {
        stream.close();
        this.ended[side] = true;
        // The totals are final once the run has ended.
        get(`/runs/${id}`).then((run) => {
          this.runs[side] = run;
        }).catch(() => {}).finally(() => {
          this.settled[side] = true;
          this.schedule();
        });
      },
    });
  }

  onAgent(side, e) {
    if (noteCall(this.calls[side], e) || notePrompt(this.prompts[side], e)) this.schedule();
  }

  schedule() {
    this.frame = paintOnce(this.frame, () => {
      this.frame = 0;
      this.paint();
    });
  }

  paint() {
    const [ra, rb] = this.runs;
    document.title = `run #${ra.id} ⇄ run #${rb.id}`;
    replace(this.main,
      h("h1", null, `Run #${ra.id} ⇄ run #${rb.id}`),
      totals(this.runs),
      h("h2", null, "Steps"),
      this.stepsTable());
    // For readers of the page (the tests): painted with everything both runs will say.
    if (this.settled.every(Boolean)) document.body.dataset.compare = "ready";
  }

  stepsTable() {
    const sides = this.runs.map((r) => flatten(r.steps));
    const paths = [...new Set(sides.flatMap((s) => [...s.keys()]))];
    const rows = [];
    for (const path of paths) {
      const [sa, sb] = sides.map((s) => s.get(path));
      const any = sa || sb;
      const differs = !sa || !sb || sa.status !== sb.status || (sa.verdict ?? null) !== (sb.verdict ?? null);
      rows.push(h("tr", { class: `step-row${differs ? " differs" : ""}`, dataset: { path } },
        h("td", { class: "step-name" },
          h("span", { class: "indent" }, "  ".repeat(any.depth)),
          h("span", { class: "kind" }, any.kind), " ", h("strong", null, any.name)),
        stepCell(sa, "side-a"), stepCell(sb, "side-b")));
      if (any.kind === "agent") {
        const prompts = [sa, sb].map((s, i) => (s ? this.prompts[i].get(s.seq) : null) ?? []);
        rows.push(promptsRow(prompts, path));
        const calls = [sa, sb].map((s, i) => (s ? this.calls[i].get(s.seq) : null) ?? []);
        rows.push(h("tr", { class: "calls-row", dataset: { path } },
          h("td", { colspan: "3" }, callsTable(calls, this.ended))));
      }
    }
    return h("table", { class: "compare-steps" },
      h("thead", null, h("tr", null, h("th", null, "step"),
        h("th", null, h("a", { href: `/runs/${this.runs[0].id}` }, `run #${this.runs[0].id}`)),
        h("th", null, h("a", { href: `/runs/${this.runs[1].id}` }, `run #${this.runs[1].id}`)))),
      h("tbody", null, rows));
  }
}

/** At most one paint a frame: `frame` is the one already asked for (0: none); answers the
 * frame to keep. */
export function paintOnce(frame, paint) {
  return frame || requestAnimationFrame(paint);
}

/** Notes a tool call (or its result) of the step's own agent in `calls` (seq -> list);
 * a sub-agent's calls are its own. Whether it was one. */
export function noteCall(calls, e) {
  const data = e.data && typeof e.data === "object" ? e.data : {};
  if (typeof data.agent === "string" && data.agent !== "") return false;
  const list = calls.get(e.seq) ?? [];
  calls.set(e.seq, list);
  if (e.what === "tool_call") {
    list.push({ name: data.name ?? "?", arguments: data.arguments, is_error: false });
  } else if (e.what === "tool_result") {
    const call = list.findLast((c) => c.name === data.name && c.result === undefined);
    if (call) Object.assign(call, { result: true, is_error: !!data.is_error });
  } else return false;
  return true;
}

/** Notes a prompt (a user message a turn started with) of the step's own agent in
 * `prompts` (seq -> texts); a sub-agent's are its own. Whether it was one. */
export function notePrompt(prompts, e) {
  const data = e.data && typeof e.data === "object" ? e.data : {};
  if (e.what !== "prompt" || (typeof data.agent === "string" && data.agent !== "")) return false;
  if (typeof data.text !== "string") return false;
  const list = prompts.get(e.seq) ?? [];
  list.push(data.text);
  prompts.set(e.seq, list);
  return true;
}

/** An agent step's prompts, side by side: each side's lines, those the other side lacks
 * marked `changed`, and the row marked `differs` when the texts differ. */
function promptsRow(sides, path) {
  const texts = sides.map((list) => list.join("\n\n"));
  const lines = texts.map((t) => new Set(t.split("\n")));
  const cell = (text, other, cls) => h("td", { class: `prompt ${cls}` },
    text === "" ? h("span", { class: "muted" }, "–")
      : text.split("\n").map((line) => h("div", { class: other.has(line) ? "line" : "line changed" }, line || " ")));
  return h("tr", { class: `prompts-row${texts[0] === texts[1] ? "" : " differs"}`, dataset: { path } },
    h("td", { class: "step-name muted" }, "prompts"),
    cell(texts[0], lines[1], "side-a"), cell(texts[1], lines[0], "side-b"));
}

/** The two runs' facts, one row per fact. */
function totals(runs) {
  const row = (label, f, cls) => h("tr", { class: cls },
    h("th", null, label), runs.map((r, i) => h("td", { class: i ? "side-b" : "side-a" }, f(r))));
  return h("table", { class: "compare-totals" },
    row("run", (r) => h("a", { href: `/runs/${r.id}` }, `#${r.id}`), "t-run"),
    row("pipeline / job", (r) => `${r.pipeline} / ${r.job}`, "t-job"),
    row("status", (r) => badge(r.status), "t-status"),
    row("forked from", (r) => (r.forked_from ? `run #${r.forked_from.run} at ${r.forked_from.step ?? r.forked_from.at}` : "–"), "t-fork"),
    row("duration", (r) => duration(r.duration_ms) || "running", "t-duration"),
    row("tokens", (r) => tokens(r.tokens) || "no tokens", "t-tokens"),
    row("cost", (r) => spent(r), "t-cost"),
    row("trigger", (r) => r.trigger, "t-trigger"));
}

/** path -> {seq, name, kind, status, verdict, ..., depth}, in plan order. */
export function flatten(nodes) {
  const out = new Map();
  const walk = (list, depth) => {
    for (const n of list || []) {
      out.set(n.path, { ...n, depth });
      walk(n.children, depth + 1);
    }
  };
  walk(nodes, 0);
  return out;
}

export function stepCell(s, cls) {
  if (!s) return h("td", { class: `${cls} absent` }, "not in this run");
  const meta = [duration(s.duration_ms), tokens(s.tokens)];
  if (s.kind === "agent") meta.push(cost(s.cost_usd));
  return h("td", { class: cls },
    badge(s.status),
    s.cached ? h("span", { class: "cached-label" }, ` cached${s.from_run ? ` from #${s.from_run}` : ""}`) : null,
    s.verdict ? h("span", { class: "verdict" }, " verdict: ", h("strong", null, s.verdict)) : null,
    h("div", { class: "meta" }, meta.filter(Boolean).join(" · ")));
}

/** The calls of one agent step in both runs, the Nth beside the Nth. */
export function callsTable(calls, ended) {
  const n = Math.max(calls[0].length, calls[1].length);
  if (n === 0) {
    const text = ended.every(Boolean) ? "no tool calls" : "reading the transcripts…";
    return h("div", { class: "muted calls-none" }, text);
  }
  const rows = [];
  for (let i = 0; i < n; i++) {
    const [ca, cb] = calls.map((c) => c[i]);
    const same = ca && cb && ca.name === cb.name && JSON.stringify(ca.arguments) === JSON.stringify(cb.arguments);
    rows.push(h("tr", { class: `call-row${same ? "" : " differs"}`, dataset: { index: i + 1 } },
      h("td", { class: "call-n" }, `#${i + 1}`), callCell(ca, "call-a"), callCell(cb, "call-b")));
  }
  return h("table", { class: "compare-calls" }, rows);
}

function callCell(c, cls) {
  if (!c) return h("td", { class: `${cls} absent` }, "–");
  let args = c.arguments === undefined ? "" : JSON.stringify(c.arguments);
  if (args.length > 160) args = `${args.slice(0, 157)}…`;
  return h("td", { class: `${cls}${c.is_error ? " call-error" : ""}` },
    h("span", { class: "tool" }, c.name), " ", h("code", null, args));
}
