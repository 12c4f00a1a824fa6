// The runs list's "Start run" form: the job (when the pipeline has several) and a field
// for each `((var))` the pipeline uses. The vars are sent as data (`vars` of
// POST /api/v1/runs); the server says which it refuses and why, shown beside the button.

import { h } from "./dom.js";
import { post } from "./api.js";

/** The form of pipeline `p` ({name, jobs, vars}). */
export function startForm(p) {
  const job = h("select", { class: "job", name: "job", "aria-label": "job" }, p.jobs.map((j) => h("option", { value: j }, j)));
  const fields = (p.vars || []).map((name) => [name, h("input", { type: "text", class: "var", name: `var-${name}`, "aria-label": `var ${name}`, placeholder: name })]);
  const status = h("span", { class: "start-status" });
  const form = h("form", { class: "start-form", novalidate: true },
    p.jobs.length > 1 ? h("label", null, "job", job) : null,
    fields.map(([name, input]) => h("label", null, h("code", null, `((${name}))`), input)),
    h("button", { type: "submit", class: "start" }, "Start run"),
    status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.textContent = "starting…";
    const vars = Object.fromEntries(fields.filter(([, input]) => input.value !== "").map(([name, input]) => [name, input.value]));
    const body = { pipeline: p.name, job: job.value, trigger: "web" };
    if (Object.keys(vars).length) body.vars = vars;
    try {
      const answer = await post("/runs", body);
      location.assign(`/runs/${answer.id}`);
    } catch (error) {
      status.textContent = error.message;
    }
  });
  return form;
}
