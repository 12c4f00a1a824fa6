// What a step's body shows besides its output and conversation: when each model call and
// tool call happened and how long it took, the prompts (folded), the files the step
// added, changed or removed (with diffs and downloads), and the version a `get:` used.
// The times come from the journal (`at_ms` of each agent event, `model_call` events); the
// files and versions from the API, fetched once when the step's body is first shown.

import { h, append, duration } from "./dom.js";
import { get, download } from "./api.js";

/** "14:03:07" in the reader's time zone. */
export function clock(ms) {
  if (!ms) return "";
  return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
}

/** One model call's line, numbered `number` in its step: when, how long, time to first
 * token, tokens per second. */
export function modelCall(c, number) {
  const latency = c.started_ms ? c.ended_ms - c.started_ms : null;
  const ttft = c.first_token_ms && c.started_ms ? c.first_token_ms - c.started_ms : null;
  const speaking = c.first_token_ms ? c.ended_ms - c.first_token_ms : latency;
  const rate = speaking > 0 && c.completion_tokens ? (c.completion_tokens * 1000) / speaking : null;
  const parts = [
    h("span", { class: "t-at", title: new Date(c.started_ms ?? c.ended_ms).toISOString() }, clock(c.started_ms ?? c.ended_ms)),
    latency !== null ? h("span", { class: "t-latency" }, `latency ${duration(latency)}`) : null,
    ttft !== null ? h("span", { class: "t-ttft" }, `first token ${duration(ttft)}`) : null,
    rate !== null ? h("span", { class: "t-rate" }, `${rate.toFixed(1)} tok/s`) : null,
    h("span", { class: "t-tokens" }, `${c.prompt_tokens ?? 0} → ${c.completion_tokens ?? 0} tokens`),
  ];
  const shown = number ?? (c.index ?? 0) + 1;
  const facts = { index: c.index, number: shown, latency: latency ?? "", ttft: ttft ?? "", rate: rate === null ? "" : rate.toFixed(1) };
  return h("div", { class: "model-call", dataset: facts },
    h("span", { class: "t-label" }, `model call ${shown}`), c.model ? h("span", { class: "muted" }, c.model) : null, parts);
}

/** A tool call's time and duration, for its head line. */
export function callTime(item) {
  if (!item.at_ms) return null;
  const took = item.result?.at_ms ? item.result.at_ms - item.at_ms : null;
  return h("span", { class: "call-time", dataset: { at: item.at_ms, took: took ?? "" } },
    clock(item.at_ms), took !== null ? ` · ${duration(took)}` : " · running");
}

/** The system prompt or a turn's input, folded. */
export function prompt(role, text) {
  const label = role === "system" ? "system prompt" : "prompt";
  return h("details", { class: `prompt prompt-${role}` },
    h("summary", null, label, h("span", { class: "muted" }, ` · ${text.length.toLocaleString("en-US")} chars`)),
    h("pre", { class: "output" }, text));
}

const ENDED = new Set(["succeeded", "failed", "errored", "aborted"]);

/** The step's files and version, fetched once it has ended; calls `done` to repaint. */
export function loadExtras(step, runId, done) {
  const d = step.data;
  if (step.extras || !ENDED.has(d.status) || d.cached || (d.children || []).length) return;
  step.extras = { changes: null, version: null };
  const fetches = [get(`/runs/${runId}/steps/${step.seq}/changes`).then((c) => { step.extras.changes = c; }).catch(() => {})];
  if (d.kind === "get") {
    fetches.push(get(`/runs/${runId}/steps/${step.seq}/version`).then((v) => { step.extras.version = v; }).catch(() => {}));
  }
  Promise.all(fetches).then(() => {
    step.rev += 1;
    done();
  });
}

/** The extras' elements (none until they arrived). */
export function extras(step, runId) {
  const x = step.extras;
  if (!x) return [];
  const parts = [];
  if (x.version) parts.push(version(x.version));
  if (x.changes && x.changes.length) parts.push(changes(x.changes, runId));
  return parts;
}

function version(v) {
  const short = /^[0-9a-f]{40}$/.test(v.version) ? v.version.slice(0, 12) : v.version;
  return h("div", { class: "version" },
    h("span", { class: "muted" }, "version "), h("code", { title: v.version }, short),
    v.branch ? h("span", { class: "muted" }, ` on ${v.branch} of ${v.source}`) : h("span", { class: "muted" }, ` of ${v.source}`),
    v.message ? h("div", { class: "commit-message" }, v.message,
      h("span", { class: "muted" }, ` — ${v.author ?? ""}${v.committed_ms ? `, ${new Date(v.committed_ms).toISOString().slice(0, 16).replace("T", " ")}` : ""}`)) : null);
}

const SIGN = { added: "+", changed: "~", removed: "−" };

function changes(outputs, runId) {
  return h("div", { class: "changes" }, outputs.map((o) => h("div", { class: "output-changes", dataset: { artifact: o.artifact } },
    h("div", { class: "changes-head" }, "output ", h("strong", null, o.artifact),
      h("span", { class: "muted" }, o.before ? ` (${o.dir}, was ${o.before})` : ` (${o.dir}, new)`),
      o.files.length ? null : h("span", { class: "muted" }, " · unchanged")),
    h("ul", { class: "files" }, o.files.map((f) => fileRow(f, o, runId))))));
}

function fileRow(f, o, runId) {
  // A removed file lives on in the version the step replaced.
  const where = `${f.change === "removed" ? o.before : o.dir}/${f.path}`;
  const link = h("a", {
    class: "download", href: `/api/v1/runs/${runId}/artifacts/${where.split("/").map(encodeURIComponent).join("/")}?download=1`,
    onclick: (e) => {
      e.preventDefault();
      download(`/runs/${runId}/artifacts/${where.split("/").map(encodeURIComponent).join("/")}?download=1`, f.path.split("/").pop());
    },
  }, "download");
  const row = h("li", { class: `file ch-${f.change}`, dataset: { path: f.path, change: f.change } },
    h("span", { class: "sign" }, SIGN[f.change] ?? "?"), " ", h("code", null, f.path), " ",
    h("span", { class: "muted" }, `${f.change} · ${f.size.toLocaleString("en-US")} bytes `), link);
  if (f.diff) {
    append(row, h("details", { class: "diff" }, h("summary", null, "diff"),
      h("pre", { class: "diff" }, f.diff.replace(/\n$/, "").split("\n").map((line) =>
        h("span", { class: line.startsWith("+") ? "d-add" : line.startsWith("-") ? "d-del" : line.startsWith("@@") ? "d-hunk" : "d-same" }, `${line}\n`)))));
  }
  return row;
}

let ticking = 0;

/** Every second, brings each running elapsed time (`.elapsed[data-since]`) up to now. */
export function tickElapsed() {
  if (ticking) return;
  ticking = setInterval(() => {
    const now = Date.now();
    for (const el of document.querySelectorAll(".elapsed[data-since]")) {
      const since = Number(el.dataset.since);
      if (since) el.textContent = duration(Math.max(0, now - since));
    }
  }, 1000);
}
