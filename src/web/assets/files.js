// The run page's artifact browser: the versions of the run's artifacts (`NAME.N`, one per
// step that made or changed NAME), each directory unfolded on demand, each file viewable
// as text in place or downloaded (`GET /api/v1/runs/{id}/artifacts/...`).

import { h, replace, append } from "./dom.js";
import { get, getText, download } from "./api.js";

const enc = (path) => path.split("/").map(encodeURIComponent).join("/");

/** A folded section that lists the run's artifacts when opened. */
export function artifactsPanel(runId) {
  const list = h("ul", { class: "artifact-list" });
  const panel = h("details", { class: "artifacts", id: "artifacts" }, h("summary", null, h("strong", null, "Artifacts")), list);
  let loaded = false;
  panel.addEventListener("toggle", () => {
    if (!panel.open || loaded) return;
    loaded = true;
    fill(list, runId, "");
  });
  return panel;
}

async function fill(list, runId, path) {
  try {
    const entries = await get(`/runs/${runId}/artifacts${path ? `/${enc(path)}` : ""}`);
    if (!entries.length) return void replace(list, h("li", { class: "muted" }, path ? "(empty)" : "no artifacts kept for this run"));
    replace(list, entries.map((e) => entry(runId, path ? `${path}/${e.name}` : e.name, e)));
  } catch (error) {
    replace(list, h("li", { class: "error" }, `artifacts: ${error.message}`));
  }
}

function entry(runId, path, e) {
  if (e.dir) {
    const inner = h("ul");
    let open = false;
    const li = h("li", { class: "entry dir", dataset: { path } },
      h("span", { class: "entry", onclick: () => {
        open = !open;
        if (open) fill(inner, runId, path);
        else replace(inner);
      } }, `▸ ${e.name}/`), inner);
    return li;
  }
  const view = h("div", { class: "file-view" });
  return h("li", { class: "entry file", dataset: { path } },
    h("code", null, e.name), " ", h("span", { class: "muted" }, `${e.size.toLocaleString("en-US")} bytes `),
    h("a", { href: "#", class: "view", onclick: async (ev) => {
      ev.preventDefault();
      try {
        replace(view, h("pre", { class: "output" }, await getText(`/runs/${runId}/artifacts/${enc(path)}`)));
      } catch (error) {
        replace(view, h("span", { class: "error" }, error.message));
      }
    } }, "view"), " ",
    h("a", { href: `/api/v1/runs/${runId}/artifacts/${enc(path)}?download=1`, class: "download", onclick: (ev) => {
      ev.preventDefault();
      download(`/runs/${runId}/artifacts/${enc(path)}?download=1`, e.name).catch((error) => append(view, h("span", { class: "error" }, error.message)));
    } }, "download"),
    view);
}
