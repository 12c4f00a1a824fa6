// One step of the run page: its state (what the snapshot and the events say about it) and
// its view (a row, a body with output, conversation or approval, and child steps).

import { h, append, replace, duration, cost, tokens } from "./dom.js";
import { render as markdown } from "./markdown.js";
import { payload } from "./json.js";
import { questionForm } from "./form.js";
import { forkBox } from "./fork.js";
import { modelCall, callTime, prompt, loadExtras, extras } from "./details.js";

const BLOCK_KINDS = new Set(["do", "in_parallel", "try", "across", "race", "ensemble"]);

/** Everything known about one step. */
export function newStep(seq) {
  return {
    seq,
    data: { seq, name: `step ${seq}`, kind: "step", status: "pending", children: [] },
    output: null, // lines from `output` events; null until the first arrives
    convo: [], // conversation items, in order
    live: "", // token text not yet confirmed by a journaled line
    rev: 0, // bumped by every event and token of the step
    approval: null, // {status, message, by, deadline_ms}
    folded: null, // null: not chosen by the reader yet
  };
}

export function isBlock(step) {
  return BLOCK_KINDS.has(step.data.kind) || (step.data.children || []).length > 0;
}

/** Adds an agent event (`what`, `data`, journaled at `at_ms`) to a step's conversation.
 * Sub-agent events carry the sub-agent's name in `data.agent`; they nest under a block of
 * their own. */
export function addAgentEvent(step, what, data, at_ms) {
  let items = step.convo;
  const agent = data && typeof data === "object" && !Array.isArray(data) ? data.agent : undefined;
  if (typeof agent === "string" && agent !== "") {
    let sub = items.findLast((i) => i.type === "sub" && i.name === agent);
    if (!sub || sub !== items[items.length - 1]) {
      sub = { type: "sub", name: agent, items: [] };
      items.push(sub);
    }
    items = sub.items;
  }
  const last = items[items.length - 1];
  if (timed(step, items, what, data)) return;
  if (what === "text") {
    const line = typeof data === "string" ? data : String(data?.text ?? "");
    if (last && last.type === "text") last.lines.push(line);
    else items.push({ type: "text", lines: [line] });
    if (step.live.startsWith(line)) step.live = step.live.slice(line.length).replace(/^\r?\n/, "");
    else step.live = "";
  } else if (what === "tool_call") {
    items.push({ type: "call", name: data?.name ?? "?", arguments: data?.arguments, result: null, at_ms });
    step.live = "";
  } else if (what === "tool_result") {
    const call = items.findLast((i) => i.type === "call" && i.result === null && i.name === data?.name);
    const result = { content: data?.content ?? "", is_error: !!data?.is_error, at_ms };
    if (call) call.result = result;
    else items.push({ type: "call", name: data?.name ?? "?", arguments: undefined, result });
  } else if (what === "fixer") {
    // A `fix:` agent starts on the task it repairs: its conversation follows, under its name.
    items.push({ type: "fixer", name: String(data?.fixer ?? "?"), text: String(data?.text ?? "") });
  } else if (what === "usage" && items !== step.convo) {
    // A sub-agent's own usage is part of the step's, which its own `usage` event gives.
    items.push({ type: "notice", text: `${data?.model ?? "model"}: ${tokens((data?.prompt_tokens ?? 0) + (data?.completion_tokens ?? 0))}` });
  } else if (what === "usage") {
    step.usage = data;
    step.live = "";
  } else {
    const text = typeof data === "string" ? data : typeof data?.text === "string" ? data.text : JSON.stringify(data);
    items.push({ type: "notice", text });
  }
}

/** The prompts and model-call times: the system prompt heads the step, a turn's prompt
 * starts its part of the conversation, and a call's times are put where its output began
 * (the session says them when its step commits, after the call's tools ran). */
function timed(step, items, what, data) {
  if (what === "prompt" && data?.role === "system" && items === step.convo) {
    step.system = String(data.text ?? "");
  } else if (what === "prompt") {
    items.push({ type: "prompt", role: data?.role ?? "user", text: String(data?.text ?? "") });
    items.mark = items.length;
  } else if (what === "model_call") {
    items.splice(Math.min(items.mark ?? 0, items.length), 0, { type: "model", call: data });
    items.mark = items.length;
  } else return false;
  return true;
}

/** The statuses of a step that ended without succeeding. */
const ENDED_BADLY = new Set(["failed", "errored", "aborted"]);

function countText(step, steps) {
  const kids = (step.data.children || []).map((c) => steps.get(c.seq)?.data.status ?? c.status);
  if (kids.length === 0) return "";
  if (kids.length === 1 && !ENDED_BADLY.has(kids[0])) return "";
  const by = {};
  for (const s of kids) by[s] = (by[s] || 0) + 1;
  const words = { succeeded: "passed", failed: "failed", errored: "errored", aborted: "aborted", running: "running", queued: "queued", skipped: "skipped", pending: "pending" };
  const parts = [`${kids.length} steps`];
  for (const key of ["succeeded", "failed", "errored", "aborted", "running", "queued", "skipped", "pending"]) {
    if (by[key]) parts.push(`${by[key]} ${words[key]}`);
  }
  return parts.join(" · ");
}

/** Builds the element of a step (children are appended by the caller). The row's parts
 * are made once and updated in place, so a row under the pointer is never replaced. */
export function createView(step, actions) {
  const parts = {
    chev: h("span", { class: "chev", "aria-hidden": "true" }),
    kind: h("span", { class: "kind" }),
    name: h("span", { class: "name" }),
    badge: h("span", { class: "badge" }),
    count: h("span", { class: "count" }),
    // Ticks while the step runs (details.js), from the server's start time.
    elapsed: h("span", { class: "elapsed" }),
    cached: h("span", { class: "cached-label" }),
    meta: h("span", { class: "meta" }),
    anchor: h("a", { class: "anchor", href: `#step-${step.seq}`, title: "link to this step" }, "#"),
    // A new run in which this step and what depends on it run even when cached
    // (`treadle run --rerun STEP`); offered on a finished run's leaf steps.
    rerun: h("button", {
      class: "rerun", hidden: true, title: "start a new run in which this step and the steps after it run again, even when cached",
      onclick: () => actions.rerun(step),
    }, "run again from this step"),
  };
  const row = h("div", { class: "row", tabindex: "0" }, Object.values(parts));
  const body = h("div", { class: "body" });
  const children = h("ul", { class: "children" });
  const el = h("li", { class: "step", id: `step-${step.seq}`, dataset: { seq: step.seq } }, row, body, children);
  row.addEventListener("click", (e) => {
    if (e.target.closest("a,button,input")) return;
    actions.toggle(step);
  });
  row.addEventListener("keydown", (e) => {
    if (e.key === "Enter") actions.toggle(step);
  });
  step.view = { el, row, parts, body, children, actions };
  return el;
}

/** Sets a node's text only when it changed. */
function text(node, value) {
  if (node.textContent !== value) node.textContent = value;
}

function hasBody(step) {
  const d = step.data;
  return !!(d.error || (step.output && step.output.length) || d.output_tail || step.convo.length ||
    step.live || step.approval || d.verdict || d.exit_code || step.system || extras(step).length);
}

/** Whether a step starts folded when the reader has not chosen. */
function foldedByDefault(step) {
  if (step.data.cached) return true;
  // A person's decision is what a reader of the run looks for: a step that asked stays open
  // (and its box is repainted when the answer comes, even after the step has ended).
  if (step.approval) return false;
  if (ENDED_BADLY.has(step.data.status) || step.data.status === "running") return false;
  if (isBlock(step)) return false;
  return step.data.kind !== "agent";
}

export function isFolded(step) {
  return step.folded ?? foldedByDefault(step);
}

/** Brings a step's element up to date with its state. */
export function paint(step, steps, runId) {
  const v = step.view;
  if (!v) return;
  const d = step.data;
  const expandable = isBlock(step) || hasBody(step);
  const folded = expandable && isFolded(step);
  v.el.className = `step st-${d.status} kind-${d.kind}${d.cached ? " cached" : ""}${folded ? " folded" : ""}${isBlock(step) ? " block" : ""}`;
  // Where it ran, under `treadle serve --nats`: the worker that took it.
  const meta = [d.worker ? `on ${d.worker}` : "", duration(d.duration_ms), tokens(d.tokens ?? usageTokens(step))];
  if (d.kind === "agent" || d.cost_usd !== null && d.cost_usd !== undefined) {
    // A step from the cache shows what it cost when it ran, said to be replayed.
    meta.push(cost(d.cost_usd ?? step.usage?.cost_usd) + (d.cached ? " replayed" : ""));
  }
  const p = v.parts;
  const shown = step.approval?.status === "pending" ? "waiting" : d.status;
  text(p.chev, expandable ? (folded ? "▸" : "▾") : "");
  text(p.kind, d.kind);
  text(p.name, d.name);
  text(p.badge, shown);
  p.badge.className = `badge st-${shown}`;
  text(p.count, isBlock(step) ? countText(step, steps) : "");
  text(p.cached, d.cached ? `unchanged — replayed from cache${d.from_run ? ` (run #${d.from_run})` : ""}` : keptText(d));
  text(p.meta, meta.filter(Boolean).join(" · "));
  paintElapsed(p.elapsed, d);
  const rerunnable = v.actions.canRerun() && !isBlock(step);
  if (p.rerun.hidden === rerunnable) p.rerun.hidden = !rerunnable;
  if (!folded) paintBody(step, runId);
}

/** What `keep_on_failure:` did for a step: the outputs it kept when it failed, or the run whose kept outputs it started from. */
function keptText(d) {
  if (d.kept) return `failed — outputs kept (${d.kept.outputs.join(", ")}) in ${d.kept.dir}`;
  if (d.from_kept) return `started from the outputs run #${d.from_kept} kept`;
  return "";
}

/** A running step's elapsed time, from its start as the server recorded it. */
function paintElapsed(el, d) {
  const since = d.status === "running" && d.started_ms ? String(d.started_ms) : "";
  if ((el.dataset.since ?? "") === since) return;
  if (since) {
    el.dataset.since = since;
    el.textContent = duration(Math.max(0, Date.now() - d.started_ms));
  } else {
    delete el.dataset.since;
    el.textContent = "";
  }
}

function usageTokens(step) {
  const u = step.usage;
  if (!u) return null;
  return (u.prompt_tokens || 0) + (u.completion_tokens || 0);
}

function paintBody(step, runId) {
  const d = step.data;
  // Rebuilt only when something in it changed, so a button is never replaced under the pointer.
  const runEnded = step.view.actions.canRerun();
  const key = JSON.stringify([step.rev, d.error, d.verdict, d.exit_code, d.output_tail, d.kind, step.approval, runEnded]);
  loadExtras(step, runId, () => step.view.actions.repaint(step));
  if (key === step.view.bodyKey) return;
  step.view.bodyKey = key;
  const parts = [];
  if (step.system) parts.push(prompt("system", step.system));
  if (d.error) parts.push(h("div", { class: "error" }, d.error));
  if (d.verdict) parts.push(h("div", { class: "verdict" }, "verdict: ", h("strong", null, d.verdict)));
  if (d.exit_code !== null && d.exit_code !== undefined && d.exit_code !== 0) {
    parts.push(h("div", { class: "exit" }, `exit code ${d.exit_code}`));
  }
  if (step.approval) parts.push(approvalBox(step, runId));
  // An agent's tail is its answer, which the conversation already shows.
  const tail = d.kind === "agent" && (step.convo.length || step.live) ? "" : d.output_tail;
  const lines = step.output ?? (tail ? tail.replace(/\n$/, "").split("\n") : null);
  if (lines && lines.length) parts.push(h("pre", { class: "output" }, lines.join("\n")));
  if (step.convo.length || step.live) {
    parts.push(h("div", { class: "convo" }, conversation(step.convo),
      step.live ? h("div", { class: "live" }, step.live) : null));
  }
  parts.push(forkBox(step, runId, runEnded));
  parts.push(...extras(step, runId));
  replace(step.view.body, parts);
}

function conversation(items) {
  // Model calls are numbered through the conversation: the session restarts its count at
  // each turn, and a verdict reminder is a turn of its own (1, 2, 3, 4, not 1, 2, 1, 2).
  let calls = 0;
  return items.map((item) => {
    if (item.type === "text") return h("div", { class: "turn-text" }, markdown(item.lines.join("\n")));
    if (item.type === "notice") return h("div", { class: "notice" }, item.text);
    if (item.type === "fixer") {
      return h("div", { class: "fixer", dataset: { agent: item.name } },
        h("span", { class: "sub-name" }, `fixer agent ${item.name}`), " ", h("span", { class: "notice" }, item.text));
    }
    if (item.type === "prompt") return prompt(item.role, item.text);
    if (item.type === "model") return modelCall(item.call, ++calls);
    if (item.type === "sub") {
      return h("div", { class: "sub-agent" }, h("div", { class: "sub-name" }, `sub-agent ${item.name}`), conversation(item.items));
    }
    const result = item.result;
    return h("div", { class: `call${result?.is_error ? " call-error" : ""}` },
      h("div", { class: "call-head" }, h("span", { class: "arrow" }, "→ "), h("span", { class: "tool" }, item.name), " ", callTime(item), " ",
        item.arguments !== undefined ? payload(item.arguments, "arguments") : null),
      result ? h("div", { class: "result" }, h("span", { class: "arrow" }, result.is_error ? "✗ " : "← "),
        payload(result.content, "result")) : h("div", { class: "result pending" }, "…"));
  });
}

function approvalBox(step, runId) {
  const a = step.approval;
  const box = h("div", { class: `approval ap-${a.status}` });
  if (a.message) append(box, h("div", { class: "ap-message" }, a.message));
  if (a.status !== "pending") {
    return append(box, h("div", null, `${a.status}${a.by ? ` by ${a.by}` : ""}${a.comment ? `: ${a.comment}` : ""}`));
  }
  const comment = h("input", { type: "text", class: "ap-comment", placeholder: "comment (optional)" });
  const decide = (decision) => step.view.actions.decide(step, decision, comment.value, runId);
  if (a.question) {
    // The same form as the approvals page's, generated from the question's schema.
    return append(box,
      questionForm(a.question, (value) => step.view.actions.answer(step, value)),
      h("button", { class: "reject", onclick: () => decide("reject") }, "Decline"),
      comment);
  }
  return append(box,
    h("span", null, "waiting for approval "),
    h("button", { class: "approve", onclick: () => decide("approve") }, "Approve"),
    h("button", { class: "reject", onclick: () => decide("reject") }, "Reject"),
    comment);
}
