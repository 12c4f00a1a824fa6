// Tool arguments and results as highlighted JSON, built from spans. A string holding a
// JSON document (a file a tool read, say) is shown as that document, still inside its
// quotes, so the nesting stays legible. A bulky payload folds behind a summary.

import { h } from "./dom.js";

/** Payloads longer than this (serialized) start folded. */
const FOLD_BYTES = 1200;

function nested(text) {
  const t = text.trim();
  if (!(t.startsWith("{") && t.endsWith("}")) && !(t.startsWith("[") && t.endsWith("]"))) return undefined;
  try {
    return JSON.parse(t);
  } catch (_) {
    return undefined;
  }
}

function walk(value, indent, out) {
  const pad = "  ".repeat(indent);
  if (value === null) out.push(h("span", { class: "j-null" }, "null"));
  else if (typeof value === "boolean") out.push(h("span", { class: "j-bool" }, String(value)));
  else if (typeof value === "number") out.push(h("span", { class: "j-num" }, String(value)));
  else if (typeof value === "string") {
    const inner = nested(value);
    if (inner !== undefined && typeof inner === "object" && inner !== null) {
      out.push(h("span", { class: "j-str" }, '"'));
      walk(inner, indent, out);
      out.push(h("span", { class: "j-str" }, '"'));
    } else out.push(h("span", { class: "j-str" }, JSON.stringify(value)));
  } else if (Array.isArray(value)) {
    if (value.length === 0) return void out.push("[]");
    out.push("[\n");
    value.forEach((item, n) => {
      out.push(`${pad}  `);
      walk(item, indent + 1, out);
      out.push(n + 1 < value.length ? ",\n" : "\n");
    });
    out.push(`${pad}]`);
  } else {
    const keys = Object.keys(value);
    if (keys.length === 0) return void out.push("{}");
    out.push("{\n");
    keys.forEach((key, n) => {
      out.push(`${pad}  `, h("span", { class: "j-key" }, JSON.stringify(key)), ": ");
      walk(value[key], indent + 1, out);
      out.push(n + 1 < keys.length ? ",\n" : "\n");
    });
    out.push(`${pad}}`);
  }
}

function walkInline(value, out) {
  if (value === null || typeof value !== "object") return walk(value, 0, out);
  const array = Array.isArray(value);
  const keys = Object.keys(value);
  out.push(array ? "[" : "{");
  keys.forEach((key, n) => {
    if (n > 0) out.push(", ");
    if (!array) out.push(h("span", { class: "j-key" }, JSON.stringify(key)), ": ");
    walkInline(value[key], out);
  });
  out.push(array ? "]" : "}");
}

/** Small payloads sit on one line. */
const INLINE_CHARS = 90;

/** Highlighted nodes for a JSON value. */
export function highlight(value) {
  const out = [];
  walk(value, 0, out);
  return out;
}

/** Highlighted nodes for text that may be JSON; other text stays as it is. */
export function highlightText(text) {
  try {
    return highlight(JSON.parse(text));
  } catch (_) {
    return [String(text)];
  }
}

function highlightTextInline(text) {
  try {
    const out = [];
    walkInline(JSON.parse(text), out);
    return out;
  } catch (_) {
    return [text];
  }
}

function size(bytes) {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KB`;
}

/** A <pre> of the value; on one line when small, folded behind "name · 3.2 KB" when bulky. */
export function payload(value, label) {
  const text = typeof value === "string" ? value : JSON.stringify(value);
  if (text.length <= INLINE_CHARS && !text.includes("\n")) {
    const out = [];
    if (typeof value === "string") out.push(...highlightTextInline(value));
    else walkInline(value, out);
    return h("code", { class: "json inline" }, out);
  }
  const pre = h("pre", { class: "json" }, typeof value === "string" ? highlightText(value) : highlight(value));
  if (text.length <= FOLD_BYTES) return pre;
  const keys = value && typeof value === "object" && !Array.isArray(value) ? Object.keys(value).join(", ") : "";
  return h("details", { class: "payload" },
    h("summary", null, `${label}${keys ? ` · ${keys}` : ""} · ${size(new Blob([text]).size)}`),
    pre);
}


