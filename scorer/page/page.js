// The explain page: renders the scorer's /explain JSON answers, derives nothing of its own.
// Plain DOM, no framework; every text goes in through textContent (no HTML from the data).
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// `kube-steer.github.io/score-power` -> `score-power`
const shortKey = (key) => String(key).split("/").pop();
const fmt = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? String(+v.toFixed(3)) : String(v));
const age = (s) => (s === null || s === undefined ? "" : s < 120 ? `${Math.round(s)}s` : s < 7200 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`);

// 0 (worse for placement) red .. 100 (better) green
function heat(score) {
  if (score === null || score === undefined) return "";
  const s = Math.max(0, Math.min(100, score));
  return `hsl(${(s * 1.2).toFixed(0)} ${s > 50 ? 55 : 70}% ${s > 50 ? 78 : 80}%)`;
}

async function getJson(url, options) {
  const response = await fetch(url, Object.assign({ headers: { Accept: "application/json" } }, options));
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    throw new Error(`${url}: HTTP ${response.status}, not JSON`);
  }
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}: ${body && body.error ? body.error : ""}`);
  return body;
}

function showError(error) {
  const box = $("error");
  box.textContent = error ? String(error.message || error) : "";
  box.hidden = !error;
}

function served(answer) {
  const parts = [`policy ${answer.policyVersion || "?"}`];
  if (answer.leader !== undefined) parts.push(answer.leader ? "leader (writes what it explains)" : "not the leader");
  if (answer.plannedAt) parts.push(`planned ${answer.plannedAt}`);
  if (answer.identity) parts.push(answer.identity);
  const admission = answer.admissionPolicies;
  if (admission) {
    const state = admission.current ? "current" : admission.refusedVersion ? `refused ${admission.refusedVersion}` : "not current";
    parts.push(`admission policies ${admission.version || "?"} (${state})`);
  }
  $("served").textContent = parts.join(" · ");
}

// ------------------------------------------------------------------------------- nodes view

const nodesState = { answer: null, sortKey: "node", sortDir: 1 };

function nodeColumns(answer) {
  const dims = answer.dimensions || [];
  const composites = [];
  for (const row of answer.nodes || []) {
    for (const key of Object.keys(row.composite || {})) if (!composites.includes(key)) composites.push(key);
  }
  const columns = [
    {
      key: "node",
      title: "node",
      sort: (r) => r.node,
      cell: (r) =>
        el("td", { class: "node" },
          el("a", { href: `explain/node/${encodeURIComponent(r.node)}`, target: "_blank", title: "this node's /explain answer" }, r.node),
          r.pendingTaintChange || Object.keys(r.pendingLabelChanges || {}).length
            ? el("span", { class: "sub pending" }, "changes pending")
            : null),
    },
  ];
  for (const d of dims) {
    columns.push({
      key: `dim:${d.dimension}`,
      title: d.dimension,
      unit: d.unit ? `raw in ${d.unit}` : "raw",
      sort: (r) => (r.score || {})[d.dimension] ?? (r.raw || {})[d.dimension] ?? -Infinity,
      cell: (r) => dimensionCell(r, d),
    });
  }
  for (const key of composites) {
    columns.push({
      key: `composite:${key}`,
      title: shortKey(key),
      unit: "composite",
      sort: (r) => (r.composite || {})[key] ?? -Infinity,
      cell: (r) => scoreCell((r.composite || {})[key], null, `${key} = ${(r.labels || {})[key] ?? "no label"}`),
    });
  }
  columns.push(
    { key: "taints", title: "taints", sort: (r) => (r.taints || []).length, cell: (r) => listCell((r.taints || []).map(shortKey)) },
    { key: "pools", title: "budget pools", unit: "room / taken / free", sort: (r) => poolFree(r), cell: poolsCell },
    { key: "gates", title: "gates", sort: (r) => Object.keys(r.gates || {}).length, cell: (r) => listCell(Object.entries(r.gates || {}).map(([k, v]) => `${shortKey(k)}=${v}`)) },
    { key: "labels", title: "labels written", sort: (r) => Object.keys(r.labels || {}).length, cell: labelsCell },
  );
  if ((answer.nodes || []).some((r) => (r.devices || []).length)) {
    columns.splice(columns.length - 2, 0,
      { key: "devices", title: "DRA devices", unit: "held / total, free (hot)", sort: (r) => deviceFree(r), cell: devicesCell });
  }
  return columns;
}

function dimensionCell(row, dim) {
  const name = dim.dimension;
  const raw = (row.raw || {})[name];
  const score = (row.score || {})[name];
  const status = (row.status || {})[name] || "";
  const ageS = (row.ageSeconds || {})[name];
  const title = `${name}: raw ${fmt(raw)}${dim.unit ? " " + dim.unit : ""}, score ${fmt(score)}, ${status || "no data"}` +
    (ageS !== null && ageS !== undefined ? `, data ${age(ageS)} old` : "");
  const cell = scoreCell(score, raw === null || raw === undefined ? null : `${fmt(raw)}${dim.unit ? " " + dim.unit : ""}`, title);
  if (status && status !== "fresh") cell.append(el("span", { class: `badge ${status}` }, status));
  if (ageS !== null && ageS !== undefined) cell.append(el("span", { class: "sub" }, `age ${age(ageS)}`));
  return cell;
}

function scoreCell(score, sub, title) {
  if ((score === null || score === undefined) && !sub) return el("td", { class: "score none", title }, "–");
  const cell = el("td", { class: "score", title }, el("span", { class: "val" }, fmt(score)), sub ? el("span", { class: "sub" }, sub) : null);
  cell.style.background = heat(score);
  return cell;
}

function listCell(items) {
  return items.length ? el("td", {}, el("ul", {}, items.map((t) => el("li", { class: "mono" }, t)))) : el("td", { class: "none" }, "–");
}

function poolFree(row) {
  const usage = Object.values(row.poolUsage || {});
  return usage.length ? Math.min(...usage.map((p) => p.free)) : -Infinity;
}

function poolsCell(row) {
  const usage = Object.entries(row.poolUsage || {});
  if (!usage.length) return listCell(Object.entries(row.pools || {}).map(([k, v]) => `${shortKey(k)}=${v}`));
  return el("td", {}, el("ul", {}, usage.map(([resource, p]) =>
    el("li", { class: "mono", title: `${resource}: room ${p.room}, taken ${p.taken}, free ${p.free} ${p.unit}` },
      `${shortKey(resource)} ${p.room} / ${p.taken} / ${p.free} ${p.unit}`))));
}

// A node's DRA devices by DeviceClass (ResourceSlices): held by claims, total, free, and how
// many free ones read hot (spec.devices.heat); the node's /explain answer lists each device.
function deviceFree(row) {
  const devices = row.devices || [];
  return devices.length ? devices.reduce((n, d) => n + d.free - d.hotFree, 0) : -Infinity;
}

function deviceText(d) {
  return `${d.deviceClass} ${d.allocated} / ${d.total}, ${d.free} free` + (d.hotFree ? ` (${d.hotFree} hot)` : "");
}

function devicesCell(row) {
  return listCell((row.devices || []).map(deviceText));
}

function labelsCell(row) {
  const labels = Object.entries(row.labels || {});
  if (!labels.length) return el("td", { class: "none" }, "–");
  return el("td", {}, el("details", {}, el("summary", {}, `${labels.length} labels`),
    el("ul", {}, labels.map(([k, v]) => el("li", { class: "mono" }, `${shortKey(k)}=${v}`)))));
}

function rowText(row) {
  return [row.node, ...Object.entries(row.labels || {}).map(([k, v]) => `${k}=${v}`), ...(row.taints || [])]
    .join(" ").toLowerCase();
}

function renderNodes() {
  const answer = nodesState.answer;
  if (!answer) return;
  served(answer);
  const chips = $("dimensions");
  chips.replaceChildren(...(answer.dimensions || []).map((d) => {
    const problems = d.problems || [];
    const held = problems.some((p) => p.blocking);
    const state = !d.ok || held ? "failed" : d.stale || problems.length ? "stale" : "";
    const status = d.ok ? "ok" : held ? "held back" : "query failed";
    const text = `${d.dimension}${d.unit ? " (" + d.unit + ")" : ""}: ${status}${d.stale ? ", stale" : ""}` +
      (d.ageSeconds !== null && d.ageSeconds !== undefined ? `, data ${age(d.ageSeconds)} old` : "") +
      `, ${d.nodes}${d.expectedNodes !== null && d.expectedNodes !== undefined ? " of " + d.expectedNodes : ""} nodes` +
      (d.unknownNodes ? `, ${d.unknownNodes} unknown` : "") +
      (problems.length ? `, ${problems.length} data problem${problems.length > 1 ? "s" : ""}` : "");
    // What the data lacks, each with its fix: in the tooltip and in the list under the chips.
    const title = problems.length ? problems.map((p) => `${p.message}; fix: ${p.fix}`).join("\n") : d.error || d.query;
    return el("span", { class: `chip ${state}`, title }, text);
  }));
  const lines = (answer.dimensions || []).flatMap((d) => (d.problems || []).map((p) =>
    el("li", {}, el("b", {}, p.dimension), `: ${p.message}${p.blocking ? " (not published)" : ""}; fix: ${p.fix}`)));
  $("data-problems").replaceChildren(...lines);
  $("data-problems").hidden = lines.length === 0;
  const devices = [
    ...(answer.devices || []).map((d) => el("li", {}, el("b", {}, d.deviceClass),
      `: ${d.free} of ${d.total} devices free` + (d.hotFree ? `, ${d.hotFree} of them hot` : "") +
      `; ${d.wholeFreeNodes} nodes with every device free; fragmentation ${fmt(d.fragmentation)}`)),
    ...(answer.deviceProblems || []).map((p) => el("li", {}, el("b", {}, "devices"), `: ${p}`)),
  ];
  $("device-summary").replaceChildren(...devices);
  $("device-summary").hidden = devices.length === 0;
  const columns = nodeColumns(answer);
  const head = el("tr", {}, columns.map((c) => {
    const th = el("th", { class: "sortable", dataset: { key: c.key } }, c.title, c.unit ? el("span", { class: "unit" }, c.unit) : null);
    if (c.key === nodesState.sortKey) th.classList.add(nodesState.sortDir > 0 ? "sorted-asc" : "sorted-desc");
    th.addEventListener("click", () => {
      nodesState.sortDir = nodesState.sortKey === c.key ? -nodesState.sortDir : c.key === "node" ? 1 : -1;
      nodesState.sortKey = c.key;
      renderNodes();
    });
    return th;
  }));
  $("nodes-table").tHead.replaceChildren(head);
  const terms = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
  const rows = (answer.nodes || []).filter((r) => {
    const text = rowText(r);
    return terms.every((t) => text.includes(t));
  });
  const column = columns.find((c) => c.key === nodesState.sortKey) || columns[0];
  rows.sort((a, b) => {
    const x = column.sort(a), y = column.sort(b);
    const order = typeof x === "string" ? String(x).localeCompare(String(y)) : x - y;
    return (order || a.node.localeCompare(b.node)) * (order ? nodesState.sortDir : 1);
  });
  $("nodes-table").tBodies[0].replaceChildren(...rows.map((r) =>
    el("tr", { dataset: { node: r.node } }, columns.map((c) => c.cell(r)))));
  const total = (answer.nodes || []).length;
  $("node-count").textContent = rows.length === total ? `${total} nodes` : `${rows.length} of ${total} nodes`;
}

async function loadNodes() {
  nodesState.answer = await getJson("explain/nodes");
  renderNodes();
}

// ---------------------------------------------------------------------------------- a pod

// What an exclusion's evidence says, in one line: the label and its value, the observation,
// the gate or pool and what is free there.
function exclusionValue(x) {
  const d = x.data || {};
  const parts = [];
  const label = d.label && typeof d.label === "object" ? d.label : d.key ? d : null;
  if (d.taint) parts.push(`${d.taint.key}${d.taint.value ? "=" + d.taint.value : ""}:${d.taint.effect}`);
  if (label && label.key && !d.taint) parts.push(`${shortKey(label.key)}=${label.label ?? "(none)"}`);
  if (label && label.condition) parts.push(`${label.condition}, observed ${fmt(label.observed)}`);
  else if (label && label.raw !== undefined && label.raw !== null) parts.push(`raw ${fmt(label.raw)}`);
  if (d.gate) parts.push(`${shortKey(d.gate.resource)} ${d.gate.open ? "open" : "closed"}, ${d.gate.free} free`);
  if (d.pool) parts.push(`needs ${d.needs}, ${d.pool.free} ${d.pool.unit} free`);
  if (d.resource) parts.push(`${d.resource}: allocatable ${d.allocatable ?? "0"}`);
  if (d.wanted && d.node && typeof d.node === "object") {
    const pairs = (o) => Object.entries(o).map(([k, v]) => `${shortKey(k)}=${v}`).join(",") || "none";
    parts.push(`wants ${pairs(d.wanted)}; node has ${pairs(d.node)}`);
  }
  if (!parts.length && Object.keys(d).length) parts.push(JSON.stringify(d));
  return parts.join("; ");
}

function schedulerPanel(s) {
  const panel = el("div", { class: "panel scheduler" }, el("h2", {}, "The kube-scheduler says"));
  const c = s.podScheduled;
  panel.append(el("h3", {}, "PodScheduled condition"));
  if (c) {
    panel.append(el("dl", {},
      el("dt", {}, "status"), el("dd", {}, `${c.status}${c.reason ? " (" + c.reason + ")" : ""}`),
      el("dt", {}, "since"), el("dd", {}, c.lastTransitionTime || "–")));
    if (c.message) panel.append(el("div", { class: "message pod-scheduled-message" }, c.message));
  } else {
    panel.append(el("p", { class: "hint" }, "none yet: the scheduler has not looked at the pod"));
  }
  panel.append(el("h3", {}, "Latest FailedScheduling event"));
  const e = s.failedScheduling;
  if (e) {
    panel.append(el("dl", {},
      el("dt", {}, "seen"), el("dd", {}, `${e.count}×, last ${e.lastSeen || "?"}`),
      el("dt", {}, "by"), el("dd", {}, e.reporter || "–")));
    panel.append(el("div", { class: "message failed-scheduling-message" }, e.message));
  } else {
    panel.append(el("p", { class: "hint" }, s.eventsError || "no FailedScheduling event"));
  }
  return panel;
}

function steerPanel(answer) {
  const panel = el("div", { class: "panel steer" }, el("h2", {}, "kube-steer says"));
  const facts = [
    ["tenant", answer.tenant || "none"],
    ["pod class", answer.podClass || "none"],
    ["steered", answer.steered ? "yes" : `no (${answer.audit ? "audit mode: the rules below are recorded, not applied" : answer.skipped || "not steered"})`],
    ["allowed nodes", `${(answer.allowed || []).length} of ${(answer.allowed || []).length + (answer.excluded || []).length}`],
  ];
  if ((answer.deviceAsks || []).length) facts.push(["devices asked", answer.deviceAsks.map((a) => a.text).join("; ")]);
  if ((answer.gates || []).length) facts.push(["gates requested", answer.gates.map(shortKey).join(", ")]);
  if ((answer.injectedTolerations || []).length) facts.push(["tolerations", answer.injectedTolerations.map((t) => `${shortKey(t.key || "*")}:${t.effect || "*"}`).join(", ")]);
  panel.append(el("dl", {}, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
  panel.append(el("h3", {}, "Rules in effect"));
  panel.append((answer.rules || []).length
    ? el("div", { class: "chips rules" }, answer.rules.map((r) => el("span", { class: "chip" }, r)))
    : el("p", { class: "hint" }, answer.skipped ? `the webhook leaves the pod alone: ${answer.skipped}` : "none"));
  for (const problem of answer.problems || []) panel.append(el("div", { class: "message problem" }, problem));
  for (const note of answer.deviceNotes || []) panel.append(el("p", { class: "hint" }, `note: ${note}`));
  for (const note of answer.notes || []) panel.append(el("p", { class: "hint" }, `note: ${note}`));
  return panel;
}

function verdictLine(s, answer) {
  if (s && s.node) return el("div", { class: "verdict bound" }, `Bound to ${s.node}`, s.phase ? ` (${s.phase})` : "");
  if (s) {
    const why = s.podScheduled && s.podScheduled.reason ? s.podScheduled.reason : "not scheduled yet";
    return el("div", { class: "verdict waiting" }, `Waiting: ${why}${s.phase ? " (" + s.phase + ")" : ""}`);
  }
  const n = (answer.allowed || []).length;
  return el("div", { class: n ? "verdict bound" : "verdict waiting" }, n ? `Would fit ${n} node(s)` : "Would fit no node");
}

function renderPod(answer, into) {
  const s = answer.scheduler;
  const allowed = el("table", { class: "allowed" },
    el("thead", {}, el("tr", {}, ["rank", "node", "steering weight", "own weight", "soft taints"].map((h) => el("th", {}, h)))),
    el("tbody", {}, (answer.allowed || []).map((a) =>
      el("tr", { dataset: { node: a.node } }, el("td", {}, a.rank), el("td", {}, a.node), el("td", {}, a.steeringWeight),
        el("td", {}, a.userWeight), el("td", { class: "mono" }, (a.softTaints || []).map(shortKey).join(", ") || "–")))));
  // kube-steer's own rules first; what the pod's own fields or the node's cordon exclude after.
  const own = (rule) => rule.startsWith("pod.") || rule.startsWith("node.spec");
  const pairs = [];
  for (const v of answer.excluded || []) for (const x of v.exclusions || []) pairs.push([v.node, x]);
  pairs.sort(([a, x], [b, y]) => own(x.rule) - own(y.rule) || a.localeCompare(b));
  const exclusions = pairs.map(([node, x]) =>
    el("tr", { class: own(x.rule) ? "exclusion own" : "exclusion", dataset: { node, rule: x.rule } },
      el("td", { class: "node" }, node), el("td", { class: "rule" }, x.rule),
      el("td", { class: "value" }, exclusionValue(x)), el("td", {}, x.reason)));
  const excluded = el("table", { class: "excluded" },
    el("thead", {}, el("tr", {}, ["node", "rule", "value", "why"].map((h) => el("th", {}, h)))),
    el("tbody", {}, exclusions));
  into.replaceChildren(
    verdictLine(s, answer),
    el("div", { class: s ? "cols" : "" }, s ? schedulerPanel(s) : null, steerPanel(answer)),
    el("div", { class: "cols ranked" },
      el("div", { class: "panel" }, el("h2", {}, "Allowed nodes, by rank"), (answer.allowed || []).length ? allowed : el("p", { class: "hint" }, "none")),
      el("div", { class: "panel" }, el("h2", {}, "Excluded nodes: kube-steer's reasons"), exclusions.length ? excluded : el("p", { class: "hint" }, "none"))),
  );
}

async function loadPod(namespace, name) {
  $("pod-result").replaceChildren(el("p", { class: "hint" }, `asking about ${namespace}/${name}…`));
  const answer = await getJson(`explain/pod/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`);
  served(answer);
  renderPod(answer, $("pod-result"));
}

async function whatIf() {
  const namespace = $("whatif-namespace").value.trim();
  const url = "explain/pod" + (namespace ? `?namespace=${encodeURIComponent(namespace)}` : "");
  // The scorer reads the body as YAML, a superset of JSON: either may be pasted.
  const answer = await getJson(url, { method: "POST", headers: { Accept: "application/json", "Content-Type": "application/yaml" }, body: $("whatif-pod").value });
  served(answer);
  renderPod(answer, $("whatif-result"));
}

// -------------------------------------------------------------------------------- audit mode

function renderAudit(answer) {
  served(answer);
  const share = answer.pods ? ` (${Math.round((100 * answer.agreed) / answer.pods)} %)` : "";
  const summary = el("dl", { class: "audit-summary" },
    el("dt", {}, "audited pods judged"), el("dd", {}, answer.pods),
    el("dt", {}, "on the policy's first choice"), el("dd", {}, `${answer.agreed}${share}`),
    el("dt", {}, "on a node enforce mode excludes"), el("dd", {}, answer.onExcluded));
  const notes = [];
  if (answer.leftOut) notes.push(`${answer.leftOut} audited pods bound earlier were not judged`);
  if (answer.unjudged) notes.push(`${answer.unjudged} pods have a field the policy cannot read`);
  const byRule = el("table", { class: "audit-rules" },
    el("thead", {}, el("tr", {}, el("th", {}, "rule"), el("th", {}, "pods"))),
    el("tbody", {}, (answer.byRule || []).map((r) => el("tr", { dataset: { rule: r.rule } }, el("td", { class: "rule" }, r.rule), el("td", {}, r.pods)))));
  const ranks = Object.entries(answer.ranks || {}).map(([rank, pods]) => `rank ${rank}: ${pods}`).join(", ");
  const divergent = el("table", { class: "audit-divergent" },
    el("thead", {}, el("tr", {}, ["pod", "node", "tenant", "excluded by", "rank"].map((h) => el("th", {}, h)))),
    el("tbody", {}, (answer.divergent || []).map((p) =>
      el("tr", { dataset: { pod: `${p.namespace}/${p.name}` } },
        el("td", {}, el("a", { href: `#pod/${encodeURIComponent(p.namespace)}/${encodeURIComponent(p.name)}` }, `${p.namespace}/${p.name}`)),
        el("td", {}, p.node), el("td", {}, p.tenant || "–"),
        el("td", { class: "rule" }, (p.excludedBy || []).join(", ") || "–"),
        el("td", {}, p.rank === null || p.rank === undefined ? "–" : `${p.rank} of ${p.allowed}`)))));
  $("audit-result").replaceChildren(
    el("div", { class: "cols" },
      el("div", { class: "panel" }, el("h2", {}, "Scheduler against policy"), summary,
        ranks ? el("p", {}, `chosen node's rank among the allowed ones: ${ranks}`) : null,
        notes.map((n) => el("p", { class: "hint" }, `note: ${n}`))),
      el("div", { class: "panel" }, el("h2", {}, "Where a rule would disagree"),
        (answer.byRule || []).length ? byRule : el("p", { class: "hint" }, "nowhere"))),
    el("div", { class: "panel" }, el("h2", {}, "Pods that disagree"),
      (answer.divergent || []).length ? divergent : el("p", { class: "hint" }, "none")));
}

async function loadAudit() {
  $("audit-result").replaceChildren(el("p", { class: "hint" }, "reading the bound pods…"));
  renderAudit(await getJson("explain/audit"));
}

// ---------------------------------------------------------------------------------- routing

// #nodes, #pod, #pod/NAMESPACE/NAME, #whatif, #audit
const VIEWS = ["nodes", "pod", "whatif", "audit"];

function route() {
  const [view, ...rest] = (location.hash.slice(1) || "nodes").split("/");
  const shown = VIEWS.includes(view) ? view : "nodes";
  for (const v of VIEWS) {
    $(`view-${v}`).hidden = v !== shown;
    $(`tab-${v}`).classList.toggle("active", v === shown);
  }
  showError(null);
  let work = Promise.resolve();
  if (shown === "nodes") work = loadNodes();
  if (shown === "audit") work = loadAudit();
  if (shown === "pod" && rest.length === 2) {
    const [namespace, name] = rest.map(decodeURIComponent);
    $("pod-namespace").value = namespace;
    $("pod-name").value = name;
    work = loadPod(namespace, name);
  }
  work.catch((error) => showError(error));
}

document.addEventListener("DOMContentLoaded", () => {
  $("filter").addEventListener("input", renderNodes);
  $("pod-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const target = `#pod/${encodeURIComponent($("pod-namespace").value.trim())}/${encodeURIComponent($("pod-name").value.trim())}`;
    if (location.hash === target) route();
    else location.hash = target;
  });
  $("whatif-form").addEventListener("submit", (event) => {
    event.preventDefault();
    showError(null);
    whatIf().catch((error) => showError(error));
  });
  $("refresh").addEventListener("click", () => {
    if (location.hash.startsWith("#whatif")) whatIf().catch((error) => showError(error));
    else route();
  });
  window.addEventListener("hashchange", route);
  route();
});
