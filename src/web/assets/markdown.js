// Model text as markdown, rendered straight to DOM nodes. Deliberately narrow: what a
// model writes (paragraphs, headings, lists, quotes, code, tables, emphasis, links) and
// nothing that could act. Raw HTML is shown as the text it is, a link keeps its target
// only for http(s), mailto and relative addresses, and an image is never fetched: it is
// shown as its alt text and the host it wanted, linked for a reader who chooses to go.

import { h, append } from "./dom.js";
import { highlightText } from "./json.js";

/** The address a link may keep, or null. Whitespace and control characters are removed
 * before the scheme is read, as browsers do (`java\tscript:` is `javascript:`). */
export function safeHref(raw) {
  const url = String(raw).replace(/[\u0000-\u0020\u007f-\u009f]/g, "");
  if (url === "") return null;
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(url);
  if (!scheme) return url.startsWith("\\") ? null : url;
  return /^(https?|mailto)$/i.test(scheme[1]) ? url : null;
}

function hostOf(url) {
  try {
    return new URL(url, location.href).host;
  } catch (_) {
    return "";
  }
}

/** A link node: an <a> with a safe target, or plain text when the target is refused. */
function link(children, target) {
  const href = safeHref(target);
  if (href === null) return h("span", { class: "md-link-refused", title: "link removed" }, children);
  return h("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, children);
}

function image(alt, target) {
  const host = hostOf(target);
  const label = `image: ${alt || "untitled"}${host ? ` (${host})` : ""}`;
  const href = safeHref(target);
  if (href === null || !/^https?:/i.test(href)) return h("span", { class: "md-image" }, label);
  return h("a", { class: "md-image", href, rel: "noopener noreferrer nofollow", target: "_blank" }, label);
}

// Inline rules, tried at each position; the earliest match wins, then the first listed.
const INLINE = [
  { re: /\\([\\`*_{}[\]()#+\-.!~<>|])/y, make: (m) => m[1] },
  { re: /(`+)([\s\S]+?)\1/y, make: (m) => h("code", null, m[2].trim() || m[2]) },
  {
    re: /!\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/y,
    make: (m) => image(m[1], m[2]),
  },
  {
    re: /\[((?:\\.|[^\]\\])+)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/y,
    make: (m) => link(inline(m[1]), m[2]),
  },
  { re: /<(https?:\/\/[^\s>]+)>/y, make: (m) => link(m[1], m[1]) },
  { re: /(\*\*|__)(?=\S)([\s\S]*?\S)\1/y, make: (m) => h("strong", null, inline(m[2])) },
  { re: /~~(?=\S)([\s\S]*?\S)~~/y, make: (m) => h("del", null, inline(m[1])) },
  { re: /\*(?=[^\s*])([\s\S]*?[^\s*])\*/y, make: (m) => h("em", null, inline(m[1])) },
  { re: /(?<![A-Za-z0-9])_(?=[^\s_])([\s\S]*?[^\s_])_(?![A-Za-z0-9])/y, make: (m) => h("em", null, inline(m[1])) },
];
const STARTERS = /[\\`!\[<*_~]/g;

/** Inline markdown to an array of nodes and strings. */
export function inline(text) {
  const out = [];
  let plain = 0;
  STARTERS.lastIndex = 0;
  let found;
  while ((found = STARTERS.exec(text)) !== null) {
    const at = found.index;
    let matched = null;
    for (const rule of INLINE) {
      rule.re.lastIndex = at;
      const m = rule.re.exec(text);
      if (m) {
        matched = { m, rule };
        break;
      }
    }
    if (!matched) continue;
    if (at > plain) out.push(text.slice(plain, at));
    out.push(matched.rule.make(matched.m));
    plain = at + matched.m[0].length;
    STARTERS.lastIndex = plain;
  }
  if (plain < text.length) out.push(text.slice(plain));
  return out;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+.#-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const ORDERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim());
}

/** A fenced code block: ```json is highlighted like tool results; others stay plain. */
function codeBlock(lang, body) {
  const code = h("code", lang ? { class: `lang-${lang.replace(/[^\w-]/g, "")}` } : null);
  if (lang.toLowerCase() === "json") append(code, highlightText(body));
  else append(code, body);
  return h("pre", { class: "md-code" }, code);
}

function list(lines, start, ordered) {
  const re = ordered ? ORDERED : BULLET;
  const first = re.exec(lines[start]);
  const indent = first[1].length;
  const el = ordered ? h("ol", first[2] !== "1" ? { start: Number(first[2]) } : null) : h("ul");
  let i = start;
  while (i < lines.length) {
    const m = re.exec(lines[i]);
    if (!m || m[1].length !== indent) break;
    const body = [m[3]];
    i += 1;
    // Continuation lines: indented deeper than the marker, or lazy text.
    while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i], indent)) {
      body.push(lines[i].replace(/^\s+/, (s) => s.slice(Math.min(s.length, indent + 2))));
      i += 1;
    }
    el.appendChild(h("li", null, blocks(body.join("\n"), true)));
    if (i < lines.length && lines[i].trim() === "" && re.test(lines[i + 1] || "")) i += 1;
  }
  return [el, i];
}

function startsBlock(line, indent) {
  const bullet = BULLET.exec(line) || ORDERED.exec(line);
  if (bullet) return bullet[1].length <= indent;
  return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line);
}

/** Markdown text to an array of block nodes. `tight` renders lone paragraphs bare. */
export function blocks(text, tight = false) {
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (line.trim() === "") {
      i += 1;
    } else if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
      i += 1;
      out.push(codeBlock(m[2] || "", body.join("\n")));
    } else if ((m = HEADING.exec(line))) {
      // Headings mint no ids: anchors on this page are the page's own.
      out.push(h(`h${Math.min(m[1].length + 2, 6)}`, { class: "md-h" }, inline(m[2])));
      i += 1;
    } else if (RULE.test(line)) {
      out.push(h("hr"));
      i += 1;
    } else if (BULLET.test(line) || ORDERED.test(line)) {
      const [el, next] = list(lines, i, ORDERED.test(line) && !BULLET.test(line));
      out.push(el);
      i = next;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i += 1;
      }
      out.push(h("blockquote", null, blocks(body.join("\n"))));
    } else if (line.includes("|") && TABLE_RULE.test(lines[i + 1] || "")) {
      const head = cells(line);
      const rows = [];
      i += 2;
      while (i < lines.length && lines[i].includes("|") && lines[i].trim() !== "") rows.push(cells(lines[i++]));
      out.push(
        h("table", { class: "md-table" },
          h("thead", null, h("tr", null, head.map((c) => h("th", null, inline(c))))),
          h("tbody", null, rows.map((r) => h("tr", null, r.map((c) => h("td", null, inline(c)))))),
        ),
      );
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() !== "" && !startsBlock(lines[i], 99) && !RULE.test(lines[i])) {
        para.push(lines[i].trim());
        i += 1;
      }
      if (para.length === 0) {
        para.push(lines[i].trim());
        i += 1;
      }
      const content = [];
      para.forEach((p, n) => {
        if (n > 0) content.push(" ");
        content.push(...inline(p));
      });
      out.push(tight && out.length === 0 && i >= lines.length ? h("span", null, content) : h("p", null, content));
    }
  }
  return out;
}

/** Renders markdown into a new element. */
export function render(text) {
  return h("div", { class: "md" }, blocks(text));
}
