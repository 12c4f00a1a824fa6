// The approvals page: pending approvals with approve and reject buttons (a question gets
// a form built from its schema), then the decisions already made.

import { h, replace, badge, ago } from "./dom.js";
import { get, post } from "./api.js";
import { questionForm } from "./form.js";

export async function showApprovals(main) {
  const pending = h("section", { class: "approvals-pending" });
  const decided = h("section", { class: "approvals-decided" });
  replace(main, h("h1", null, "Approvals"), pending, decided);
  let last = "";
  const refresh = async () => {
    const [open, done] = await Promise.all([get("/approvals?state=pending"), get("/approvals?state=decided")]);
    // Unchanged lists are left alone, so a button is never replaced under the pointer.
    const key = JSON.stringify([open, done]);
    if (key === last) return;
    last = key;
    replace(pending, h("h2", null, `Pending (${open.length})`),
      open.length ? h("ul", { class: "approval-list" }, open.map((a) => pendingRow(a, refresh))) : h("p", { class: "muted" }, "Nothing is waiting."));
    replace(decided, h("h2", null, "Decided"),
      done.length ? decidedTable(done) : h("p", { class: "muted" }, "No decisions yet."));
  };
  await refresh();
  setInterval(() => {
    if (!document.hidden && !document.activeElement?.matches("input")) refresh().catch(() => {});
  }, 3000);
}

function pendingRow(a, refresh) {
  const comment = h("input", { type: "text", class: "ap-comment", placeholder: "comment (optional)" });
  const status = h("span", { class: "ap-status" });
  const decide = async (decision) => {
    try {
      const body = { decision, by: "web" };
      if (comment.value) body.comment = comment.value;
      await post(`/runs/${a.run}/approvals/${a.seq}`, body);
      await refresh();
    } catch (error) {
      status.textContent = error.message;
    }
  };
  return h("li", { class: "approval ap-pending", dataset: { run: a.run, seq: a.seq } },
    h("a", { href: `/runs/${a.run}#step-${a.seq}` }, `${a.pipeline} / ${a.job} #${a.run}`), " ",
    h("strong", null, a.step), " ", h("span", { class: "muted" }, `asked ${ago(a.asked_ms)}`),
    a.deadline_ms ? h("span", { class: "muted" }, ` · deadline ${new Date(a.deadline_ms).toISOString().slice(11, 19)} UTC`) : null, " ",
    a.question ? questionForm(a.question, async (value) => {
      await post(`/runs/${a.run}/approvals/${a.seq}`, { decision: "answer", value, by: "web" });
      await refresh();
    }) : [
      a.message ? h("div", { class: "ap-message" }, a.message) : null,
      h("button", { class: "approve", onclick: () => decide("approve") }, "Approve"),
    ],
    h("button", { class: "reject", onclick: () => decide("reject") }, a.question ? "Decline" : "Reject"),
    comment, status);
}

function decidedTable(rows) {
  return h("table", { class: "runs" },
    h("thead", null, h("tr", null, ["run", "step", "question", "decision", "by", "when", "comment"].map((c) => h("th", null, c)))),
    h("tbody", null, rows.map((a) => h("tr", null,
      h("td", null, h("a", { href: `/runs/${a.run}#step-${a.seq}` }, `${a.pipeline} #${a.run}`)),
      h("td", null, a.step),
      h("td", null, a.message ?? ""),
      h("td", null, badge(a.status)),
      h("td", null, a.by ?? ""),
      h("td", null, ago(a.decided_ms)),
      h("td", null, a.comment ?? "")))));
}
