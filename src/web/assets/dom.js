// Building elements without HTML strings: every text goes through a text node, so nothing
// the server or a model sends is ever parsed as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

/** Appends children (nodes, strings, numbers, arrays; null and false are skipped). */
export function append(parent, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Sets attributes: `class`, `on<event>` (functions only), `dataset`, else setAttribute. */
function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.setAttribute("class", value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key.startsWith("on")) {
      throw new Error(`handler ${key} must be a function`);
    } else el.setAttribute(key, value === true ? "" : String(value));
  }
  return el;
}

/** An HTML element: h("a", {href: "/x"}, "text"). */
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), ...children);
}

/** An SVG element. */
export function svg(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), ...children);
}

/** Replaces all children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, ...children);
}

/** "1.2 s", "3 m 4 s", "" for null. */
export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms} ms`;
  // Rounded once, to the unit shown last, before it is split: 239.6 s is "4 m 0 s", never
  // "3 m 60 s" (a part rounded on its own can reach its carry).
  const tenths = Math.round(ms / 100);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)} s`;
  const secs = Math.round(ms / 1000);
  if (secs < 3600) return `${Math.floor(secs / 60)} m ${secs % 60} s`;
  const mins = Math.round(ms / 60000);
  return `${Math.floor(mins / 60)} h ${mins % 60} m`;
}

/** Dollars, or "unpriced" when no price is known: never "$0.00" for an unknown cost. */
export function cost(usd) {
  if (usd === null || usd === undefined) return "unpriced";
  if (usd === 0) return "$0";
  if (usd < 0.01) return `$${usd.toFixed(4)}`;
  return `$${usd.toFixed(2)}`;
}

/** A run's cost: "unpriced" when its agents' model has no price, "–" when it has no agent;
 * the part replayed from the cache (recorded when its steps ran) is said. */
export function spent(run) {
  if (run.tokens === null || run.tokens === undefined) return "–";
  const all = cost(run.cost_usd);
  if (run.replayed_tokens === null || run.replayed_tokens === undefined) return all;
  return run.replayed_tokens === run.tokens ? `${all} replayed` : `${all} (${cost(run.replayed_cost_usd)} replayed)`;
}

/** "1,234 tokens", or "" when nothing was counted. */
export function tokens(n) {
  if (n === null || n === undefined) return "";
  return `${n.toLocaleString("en-US")} tokens`;
}

/** "5 s ago" / a date. */
export function ago(ms) {
  if (!ms) return "";
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ");
}

/** A status badge. */
export function badge(status) {
  return h("span", { class: `badge st-${status}` }, status);
}

/** A running run parked on a person (the API's `waiting`): its status. */
export function waitingBadge(w) {
  return h("span", { class: "badge st-waiting" }, w.kind === "answer" ? "waiting for an answer" : "waiting for approval");
}

/** What it waits for and until when: "gate: 14 m 5 s left, then reject". */
export function waitingText(w, now = Date.now()) {
  if (w.deadline_ms === null || w.deadline_ms === undefined) return `${w.step}: no deadline`;
  const then = w.on_timeout ? `, then ${w.on_timeout}` : "";
  return `${w.step}: ${duration(Math.max(0, w.deadline_ms - now))} left${then}`;
}
