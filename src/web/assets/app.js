// The page's entry: picks the view from the address (/, /p/NAME, /runs/ID, /approvals,
// /compare/A/B) and shows errors in place instead of a blank page.

import { h, replace } from "./dom.js";
import { showRuns } from "./runs.js";
import { showRun } from "./run.js";
import { showApprovals } from "./approvals.js";
import { showCompare } from "./compare.js";
import { showShadow } from "./shadow.js";

const main = document.getElementById("main");
const conn = document.getElementById("conn");

function setConn(text) {
  conn.textContent = text;
}

async function route() {
  const path = location.pathname;
  let m;
  if ((m = /^\/runs\/(\d+)\/?$/.exec(path))) return showRun(main, Number(m[1]), setConn);
  if ((m = /^\/p\/([^/]+)\/?$/.exec(path))) return showRuns(main, decodeURIComponent(m[1]));
  if (/^\/approvals\/?$/.test(path)) return showApprovals(main);
  if ((m = /^\/compare\/(\d+)\/(\d+)\/?$/.exec(path))) return showCompare(main, Number(m[1]), Number(m[2]));
  if ((m = /^\/compare\/(\d+)\/shadow\/(\d+)\/?$/.exec(path))) return showShadow(main, Number(m[1]), Number(m[2]));
  return showRuns(main, null);
}

route().then(() => {
  document.body.dataset.ready = "true";
}).catch((error) => {
  replace(main, h("div", { class: "error page-error" }, String(error.message || error)));
  document.body.dataset.ready = "error";
});
