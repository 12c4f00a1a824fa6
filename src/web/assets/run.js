// The run page: the run's header, its step tree (from the run's snapshot), and the live
// part: every journaled event after the snapshot, and token deltas while an agent speaks.
//
// The tree is built once from GET /runs/{id}; the event stream is then read from its
// start, so a step's output and conversation come from the journal whether the run
// finished an hour ago or is still going. Events only set a step's state or append to it,
// and the reader never hands on an event twice, so a reload rebuilds the same page.

import { h, append, replace, badge, waitingBadge, waitingText, duration, spent, tokens } from "./dom.js";
import { get, post, follow } from "./api.js";
import { newStep, createView, paint, addAgentEvent, isFolded } from "./steps.js";
import { forkNote } from "./fork.js";
import { tickElapsed } from "./details.js";
import { artifactsPanel } from "./files.js";
import { shadowLinks } from "./shadow.js";

const TITLE_MARK = { running: "◐", succeeded: "✓", failed: "✗", errored: "✗", aborted: "✗" };

export async function showRun(main, runId, conn) {
  const page = new RunPage(main, runId, conn);
  await page.load();
  page.listen();
  return page;
}

class RunPage {
  constructor(main, runId, conn) {
    this.main = main;
    this.runId = runId;
    this.conn = conn;
    this.steps = new Map();
    this.dirty = new Set();
    this.frame = 0;
    this.refetching = null;
    this.header = h("section", { class: "run-head" });
    this.failure = h("section", { class: "failure" });
    this.notices = h("ul", { class: "notices" });
    this.tree = h("ul", { class: "tree", id: "tree" });
    this.actions = {
      toggle: (step) => this.toggle(step),
      decide: (step, decision, comment) => this.decide(step, decision, comment),
      answer: (step, value) => this.answer(step, value),
      rerun: (step) => this.rerun(step),
      canRerun: () => !!this.run && this.run.status !== "running",
      repaint: (step) => this.schedule(step.seq),
    };
  }

  async load() {
    const run = await get(`/runs/${this.runId}`);
    this.adopt(run);
    replace(this.main, this.header, this.failure, this.notices, this.tree, artifactsPanel(this.runId));
    this.paintAll();
    this.installKeys();
    this.showHash();
    tickElapsed();
    // A mark the benchmark reads: the frame holding the tree has been produced.
    requestAnimationFrame(() => setTimeout(() => performance.mark("treadle:tree-painted")));
  }

  step(seq) {
    let step = this.steps.get(seq);
    if (!step) {
      step = newStep(seq);
      this.steps.set(seq, step);
    }
    return step;
  }

  /** Takes a snapshot: the run's fields and its tree. Known steps keep what the events
   * gave them (output, conversation, approval, fold state). */
  adopt(run) {
    this.run = run;
    const walk = (nodes, parent) => {
      for (const node of nodes || []) {
        const step = this.step(node.seq);
        // A step the events already moved on keeps the newer status.
        const status = step.view && rank(step.data.status) > rank(node.status) ? step.data.status : node.status;
        step.data = { ...node, status };
        step.parent = parent;
        walk(node.children, step);
      }
    };
    walk(run.steps, null);
    this.roots = (run.steps || []).map((n) => this.steps.get(n.seq));
    this.build();
  }

  /** Creates the elements of steps that have none, and puts every element in tree order. */
  build() {
    const place = (steps, list) => {
      const want = [];
      for (const step of steps) {
        if (!step.view) createView(step, this.actions);
        want.push(step.view.el);
        place((step.data.children || []).map((c) => this.steps.get(c.seq)), step.view.children);
        this.dirty.add(step.seq);
      }
      want.forEach((el, i) => {
        if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
      });
    };
    place(this.roots, this.tree);
  }

  paintAll() {
    for (const seq of this.dirty) paint(this.steps.get(seq), this.steps, this.runId);
    this.dirty.clear();
    this.paintHeader();
    this.paintFailure();
  }

  schedule(seq) {
    if (seq !== undefined) {
      this.dirty.add(seq);
      // A block's count moves with its children.
      for (let p = this.steps.get(seq)?.parent; p; p = p.parent) this.dirty.add(p.seq);
    }
    if (!this.frame) {
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.paintAll();
      });
    }
  }

  paintHeader() {
    const r = this.run;
    // Rebuilt only when it changed, so the Cancel button is not replaced under the pointer.
    const key = JSON.stringify([r.status, r.duration_ms, r.tokens, r.cost_usd, r.trigger, r.interrupted, r.waiting]);
    if (key === this.headerKey) return;
    this.headerKey = key;
    const controls = [];
    // Marked running, but its process stopped and this server did not adopt it.
    const stood = r.interrupted ? h("span", { class: "badge st-aborted interrupted" }, "interrupted — resumable")
      : r.waiting ? waitingBadge(r.waiting) : badge(r.status);
    if (r.status === "running" && !r.interrupted) {
      controls.push(h("button", { class: "cancel", onclick: () => this.cancel() }, "Cancel run"));
    }
    replace(this.header,
      h("div", { class: "crumbs" }, h("a", { href: `/p/${encodeURIComponent(r.pipeline)}` }, r.pipeline), " / ", r.job),
      h("h1", null, `Run #${r.id} `, stood),
      h("div", { class: "facts" },
        r.duration_ms !== null && r.duration_ms !== undefined ? h("span", { class: "run-duration" }, duration(r.duration_ms))
          : h("span", { class: "run-duration elapsed", dataset: { since: r.started_ms } }, duration(Math.max(0, Date.now() - r.started_ms))),
        h("span", null, tokens(r.tokens) || "no tokens"),
        h("span", { class: "run-cost" }, spent(r)),
        h("span", null, `trigger: ${r.trigger}`),
        r.waiting && !r.interrupted ? h("span", { class: "run-wait" }, waitingText(r.waiting)) : null),
      forkNote(r),
      shadowLinks(r),
      controls);
    document.title = `${TITLE_MARK[r.status] || ""} run #${r.id} · ${r.pipeline}`.trim();
  }

  /** A failed run leads with its error and the innermost failing step. */
  paintFailure() {
    const r = this.run;
    if (r.status === "running" || r.status === "succeeded") return void replace(this.failure);
    const failed = this.innermostFailure(this.roots);
    const parts = [h("h2", null, r.status === "aborted" ? "Aborted" : "Failed")];
    if (r.error) parts.push(h("div", { class: "error" }, r.error));
    if (failed) {
      const d = failed.data;
      parts.push(h("div", { class: "failed-step" }, "failing step: ",
        h("a", { href: `#step-${failed.seq}` }, `${d.kind} ${d.name}`),
        d.error ? h("div", { class: "error" }, d.error) : null,
        d.output_tail ? h("pre", { class: "output" }, d.output_tail) : null));
      // Unfold the way to it, once.
      if (!this.failureShown) {
        this.failureShown = true;
        for (let s = failed; s; s = s.parent) {
          if (s.folded === null) s.folded = false;
          this.dirty.add(s.seq);
        }
      }
    }
    replace(this.failure, parts);
  }

  /** The failed step deepest in the tree: the one that broke, not the block reporting it. */
  innermostFailure(steps) {
    for (const step of steps) {
      if (!["failed", "errored", "aborted"].includes(step.data.status)) continue;
      const kids = (step.data.children || []).map((c) => this.steps.get(c.seq)).filter(Boolean);
      return this.innermostFailure(kids) || step;
    }
    return null;
  }

  /** Unfolds the way to a step and brings its row into view. */
  reveal(step) {
    for (let s = step.parent; s; s = s.parent) {
      s.folded = false;
      this.dirty.add(s.seq);
    }
    this.paintAll();
    step.view?.row.scrollIntoView({ block: "center" });
    step.view?.row.focus({ preventScroll: true });
  }

  /** `#step-N` in the address opens that step. */
  showHash() {
    const m = /^#step-(\d+)$/.exec(location.hash);
    const step = m && this.steps.get(Number(m[1]));
    if (step) this.reveal(step);
  }

  /** j/k walk the rows, e/c expand and collapse everything, f jumps to the failure. */
  installKeys() {
    document.addEventListener("keydown", (e) => {
      if (e.target.closest?.("input,textarea,select") || e.ctrlKey || e.metaKey || e.altKey) return;
      const rows = [...this.tree.querySelectorAll(".row")].filter((r) => r.offsetParent);
      const at = rows.indexOf(document.activeElement);
      if (e.key === "j") rows[Math.min(at + 1, rows.length - 1)]?.focus();
      else if (e.key === "k") rows[Math.max(at - 1, 0)]?.focus();
      else if (e.key === "e" || e.key === "c") {
        for (const s of this.steps.values()) {
          s.folded = e.key === "c";
          this.dirty.add(s.seq);
        }
        this.paintAll();
      } else if (e.key === "f") {
        const failed = this.innermostFailure(this.roots);
        if (failed) this.reveal(failed);
      } else return;
      e.preventDefault();
    });
  }

  toggle(step) {
    step.folded = !isFolded(step);
    paint(step, this.steps, this.runId);
  }

  async decide(step, decision, comment) {
    try {
      const body = { decision, by: "web" };
      if (comment) body.comment = comment;
      const answer = await post(`/runs/${this.runId}/approvals/${step.seq}`, body);
      step.approval = { ...step.approval, status: answer?.status ?? decision, by: answer?.by, comment: answer?.comment };
    } catch (error) {
      step.approval = { ...step.approval, error: String(error.message) };
      append(this.notices, h("li", { class: "error" }, `approval: ${error.message}`));
    }
    this.schedule(step.seq);
  }

  /** A question (an `input:` step, an agent's `ask_human`) is an approval with a schema,
   * which the event does not carry: the pending approval gives it, and its form. */
  async loadQuestion(step) {
    try {
      const open = await get("/approvals?state=pending");
      const mine = open.find((a) => String(a.run) === String(this.runId) && a.seq === step.seq);
      if (mine?.question && step.approval?.status === "pending") {
        step.approval = { ...step.approval, question: mine.question };
        this.schedule(step.seq);
      }
    } catch (error) {
      append(this.notices, h("li", { class: "error" }, `question: ${error.message}`));
    }
  }

  /** Answers a question; a refusal (the answer does not fit) is thrown to the form, which
   * shows the server's reason while the question stays open. */
  async answer(step, value) {
    const answer = await post(`/runs/${this.runId}/approvals/${step.seq}`, { decision: "answer", value, by: "web" });
    step.approval = { ...step.approval, status: answer?.status ?? "approved", by: answer?.by, value };
    this.schedule(step.seq);
  }

  /** Starts a new run of the pipeline's job in which `step` and what depends on it run
   * again even when cached, and opens it. */
  async rerun(step) {
    const r = this.run;
    try {
      const answer = await post("/runs", { pipeline: r.pipeline, job: r.job, rerun: step.data.path, trigger: "web" });
      location.assign(`/runs/${answer.id}`);
    } catch (error) {
      append(this.notices, h("li", { class: "error" }, `run again: ${error.message}`));
    }
  }

  async cancel() {
    try {
      await post(`/runs/${this.runId}/cancel`, {});
      append(this.notices, h("li", null, "cancelling…"));
    } catch (error) {
      append(this.notices, h("li", { class: "error" }, `cancel: ${error.message}`));
    }
  }

  listen() {
    this.stream = follow(this.runId, {
      event: (kind, data) => this.onEvent(kind, data),
      token: (data) => {
        const step = this.step(data.seq);
        step.live += data.text ?? "";
        step.rev += 1;
        this.schedule(data.seq);
      },
      end: () => {
        this.conn("");
        this.ended = true;
        this.refetch();
      },
      state: (s) => this.conn(s === "live" ? "live" : "reconnecting…"),
      error: (e) => this.conn(`stream: ${e.message}`),
    });
  }

  onEvent(kind, e) {
    if (e.seq === undefined) return this.onRunEvent(kind, e);
    const step = this.step(e.seq);
    const d = step.data;
    step.rev += 1;
    switch (kind) {
      case "step_started":
        Object.assign(d, { name: e.name, kind: e.kind, status: "running", error: null, duration_ms: null });
        // Its start time (for the elapsed time) is in the snapshot.
        if (!d.started_ms) this.refetch();
        break;
      case "step_queued":
        // On the NATS queue until a worker takes it (`treadle serve --nats`).
        Object.assign(d, { status: "queued", worker: null });
        break;
      case "step_taken":
        Object.assign(d, { status: "running", worker: e.worker });
        break;
      case "step_finished":
        Object.assign(d, { status: e.status, duration_ms: e.duration_ms, exit_code: e.exit_code ?? null,
          verdict: e.verdict ?? null, error: e.error ?? null });
        step.live = "";
        break;
      case "step_skipped":
        d.status = "skipped";
        break;
      case "step_cached":
        Object.assign(d, { status: "succeeded", cached: true, from_run: e.from_run });
        break;
      case "output":
        (step.output ??= []).push(e.line);
        break;
      case "agent":
        addAgentEvent(step, e.what, e.data, e.at_ms);
        break;
      case "approval_waiting":
        step.approval = { status: "pending", message: e.message, deadline_ms: e.deadline_ms };
        d.status = "running";
        this.loadQuestion(step);
        // The run's header says what it waits on, from the run as the server gives it.
        this.refetch();
        break;
      case "approval_answered":
        step.approval = { ...step.approval, status: e.status, by: e.by };
        this.refetch();
        break;
      default:
        break;
    }
    if (!step.view) this.refetch();
    this.schedule(e.seq);
  }

  onRunEvent(kind, e) {
    if (kind === "notice") append(this.notices, h("li", null, e.text));
    if (kind === "run_finished") {
      Object.assign(this.run, { status: e.status, duration_ms: e.duration_ms, error: e.error ?? null });
      this.refetch();
    }
    this.schedule();
  }

  /** Fetches the snapshot again (a step the tree did not have, final totals); at most one
   * fetch at a time, and one more if asked meanwhile. */
  refetch() {
    if (this.refetching) {
      this.refetchAgain = true;
      return;
    }
    this.refetching = get(`/runs/${this.runId}`).then((run) => {
      this.adopt(run);
      this.schedule();
      // For readers of the page's state (tests, the benchmark): everything has arrived.
      if (this.ended && !this.refetchAgain && !document.body.dataset.stream) {
        document.body.dataset.stream = "ended";
        performance.mark("treadle:settled");
      }
    }).catch(() => {}).finally(() => {
      this.refetching = null;
      if (this.refetchAgain) {
        this.refetchAgain = false;
        this.refetch();
      }
    });
  }
}

const RANK = { pending: 0, queued: 1, running: 2, succeeded: 3, failed: 3, errored: 3, aborted: 3, skipped: 3 };
function rank(status) {
  return RANK[status] ?? 0;
}
