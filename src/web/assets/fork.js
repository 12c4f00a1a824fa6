// Forking from the run page: a finished agent step's "fork from here" (one per committed
// turn of its session, the message editable), and the line on a fork's page that names its
// parent and opens the two side by side.
//
// The turns come from GET /runs/{id}/steps/{seq}/turns when the box is first opened; a
// fork is POST /runs/{id}/fork, the same start as `treadle run --fork`, and its page opens.

import { h, replace } from "./dom.js";
import { get, post } from "./api.js";

/** The "fork from here" box of a step, or null when it has none: only an agent step that
 * ran in this run (not taken from the cache) and has ended, in a run that has ended. The
 * box is made once per step and kept across repaints, so what is typed in it stays. */
export function forkBox(step, runId, runEnded) {
  const d = step.data;
  const ended = d.status !== "running" && d.status !== "pending" && d.status !== "skipped";
  if (d.kind !== "agent" || d.cached || !ended || !runEnded) return null;
  if (!step.view.fork) step.view.fork = makeBox(step, runId);
  return step.view.fork;
}

function makeBox(step, runId) {
  const list = h("div", { class: "fork-turns" });
  const box = h("details", { class: "fork" }, h("summary", null, "fork from here…"), list);
  let loaded = false;
  box.addEventListener("toggle", () => {
    if (!box.open || loaded) return;
    loaded = true;
    replace(list, h("span", { class: "muted" }, "loading turns…"));
    get(`/runs/${runId}/steps/${step.seq}/turns`).then(
      (view) => replace(list, turnForms(view, runId)),
      (error) => {
        loaded = false;
        replace(list, h("div", { class: "error" }, String(error.message)));
      },
    );
  });
  return box;
}

/** One form per committed turn (ask it again, the message prefilled), and one after the
 * last turn that ended (go on from there, with a new message). */
function turnForms(view, runId) {
  if (!view.turns.length) return h("span", { class: "muted" }, "this step committed no turn");
  const forms = view.turns.map((t) => forkForm(runId, {
    label: `turn ${t.turn}`,
    title: `a new run in which this step asks turn ${t.turn} again with this message`,
    at: t.before,
    message: t.message,
    button: "fork from here",
    turn: t.turn,
  }));
  const last = view.turns.findLast((t) => t.after);
  if (last) {
    forms.push(forkForm(runId, {
      label: `after turn ${last.turn}`,
      title: `a new run in which this step goes on after turn ${last.turn} with a new message`,
      at: last.after,
      message: "",
      button: "continue in a fork",
      turn: `after-${last.turn}`,
    }));
  }
  return forms;
}

function forkForm(runId, o) {
  const message = h("textarea", { class: "fork-message", rows: "3", placeholder: "the message (empty: the step's own prompt)" });
  message.value = o.message;
  const status = h("span", { class: "fork-status" });
  const button = h("button", { class: "fork-submit", title: o.title }, o.button);
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "starting…";
    try {
      const text = message.value;
      const body = { at: o.at, trigger: "web" };
      if (text.trim() !== "") body.prompt = text;
      const answer = await post(`/runs/${runId}/fork`, body);
      location.assign(`/runs/${answer.id}`);
    } catch (error) {
      status.textContent = String(error.message);
      status.className = "fork-status error";
      button.disabled = false;
    }
  });
  return h("div", { class: "fork-turn", dataset: { turn: o.turn, at: o.at } },
    h("div", { class: "fork-label" }, o.label, " ", h("code", null, `--at ${o.at}`)),
    message, h("div", null, button, " ", status));
}

/** The line of a fork's run page: its parent, the point, and the comparison with it. */
export function forkNote(run) {
  const from = run.forked_from;
  if (!from) return null;
  // The step by its name (`at` may be an outline path such as `3`), and the turn after
  // which the fork goes on, when there is one.
  const turn = from.at.includes("/") ? from.at.split("/").pop() : null;
  const at = from.step ?? from.at.split("/")[0];
  return h("div", { class: "fork-note" },
    "fork of ", h("a", { href: `/runs/${from.run}` }, `run #${from.run}`), " at ", h("code", null, at),
    turn ? ` after turn ${turn}` : "", " · ",
    h("a", { class: "compare-link", href: `/compare/${from.run}/${run.id}` }, "compare with it"));
}
