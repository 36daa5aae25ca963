// Courier console: one module, no dependencies, no build step.
//
// The key (or token) lives in `credential` below and nowhere else: not localStorage, not a
// cookie, not the URL. A reload signs out; that is the price of a stolen laptop's browser
// profile not holding a key that runs tools.
//
// Everything from the server is inserted as text (textContent), never as HTML: transcripts
// are model and tool output, and one innerHTML would make a tool result script the console.

let credential = null;
let refreshTimer = null;
let liveAbort = null; // stops the live turn's event stream when the view changes

const $ = (id) => document.getElementById(id);

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, String(value));
  for (const child of children.flat()) {
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// -- API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${credential}`, ...(options.headers || {}) },
    cache: "no-store",
    credentials: "omit",
  });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const err = body && body.error ? body.error : {};
    throw new ApiError(response.status, err.message || `HTTP ${response.status}`, err.code);
  }
  return body;
}

function status(message, isError = false) {
  const el = $("status");
  el.textContent = message;
  el.classList.toggle("error", isError);
}

function usd(value) {
  if (value === null || value === undefined || value === "") return "unknown";
  const n = Number(value);
  if (!Number.isFinite(n)) return String(value);
  return n < 0.01 && n > 0 ? `$${n.toFixed(6)}` : `$${n.toFixed(4)}`;
}

function when(epochSeconds) {
  if (!epochSeconds) return "";
  const d = new Date(epochSeconds * 1000);
  return d.toISOString().replace("T", " ").slice(0, 16) + " UTC";
}

function fact(label, value) {
  return h("div", {}, h("dt", {}, label), h("dd", {}, value));
}

// -- sign in --------------------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const input = $("credential");
  credential = input.value.trim();
  input.value = "";
  try {
    await api("/v1/models");
  } catch (err) {
    credential = null;
    status(err.status === 401 ? "That key or token was refused." : `Sign-in failed: ${err.message}`, true);
    input.focus();
    return;
  }
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("view").hidden = false;
  status("Signed in.");
  if (!location.hash || location.hash === "#") location.hash = "#/sessions";
  else route();
}

function signOut() {
  credential = null;
  clearInterval(refreshTimer);
  stopLive();
  $("view").replaceChildren();
  $("view").hidden = true;
  $("nav").hidden = true;
  $("sign-in").hidden = false;
  status("Signed out.");
  $("credential").focus();
}

// -- router ---------------------------------------------------------------------------------

function route() {
  if (!credential) return;
  clearInterval(refreshTimer);
  stopLive();
  const [, view, arg] = location.hash.split("/");
  for (const link of document.querySelectorAll("#nav a")) {
    const current = link.dataset.view === view || (view === "session" && link.dataset.view === "sessions");
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const views = { sessions: sessionsView, session: transcriptView, approvals: approvalsView, spend: spendView };
  const render = views[view] || sessionsView;
  render(arg ? decodeURIComponent(arg) : undefined).catch((err) => status(explain(err), true));
  updatePendingCount();
}

function explain(err) {
  if (err instanceof ApiError && err.status === 404 && err.code === "not_found") {
    return "This server does not offer that API yet.";
  }
  return err.message || String(err);
}

function show(...nodes) {
  const view = $("view");
  view.replaceChildren(...nodes);
  const heading = view.querySelector("h2");
  if (heading) {
    heading.tabIndex = -1;
    heading.focus({ preventScroll: true });
  }
}

// -- sessions -------------------------------------------------------------------------------

// One key often serves many people (an app's end users, `user` on each session): the view
// filters by one of them, and the filter lives in the address (#/sessions/<user>).
function sessionsHref(user) {
  return user ? `#/sessions/${encodeURIComponent(user)}` : "#/sessions";
}

function userParam(user) {
  return user ? `&user=${encodeURIComponent(user)}` : "";
}

const SESSIONS_PAGE = 50;

async function sessionsView(user) {
  const filter = h(
    "form",
    { onsubmit: (e) => { e.preventDefault(); location.hash = sessionsHref(who.value.trim()); } },
    h("label", { for: "end-user" }, "End user"),
    h("input", { id: "end-user", type: "search", name: "user", value: user || null,
      placeholder: "every end user" }),
    h("button", { type: "submit" }, "Filter"),
  );
  const who = filter.querySelector("input");
  const form = h(
    "form",
    { role: "search", onsubmit: (e) => { e.preventDefault(); searchSessions(query.value, user); } },
    h("label", { for: "search" }, "Search transcripts"),
    h("input", { id: "search", type: "search", name: "q", placeholder: "words from any message" }),
    h("button", { type: "submit" }, "Search"),
  );
  const query = form.querySelector("input");
  const results = h("div", { id: "results" });
  show(h("h2", {}, user ? `Sessions of ${user}` : "Sessions"), filter, form, results);
  status("Loading sessions…");
  const page = await api(`/v1/sessions?limit=${SESSIONS_PAGE}${userParam(user)}`);
  if (!page.data.length) {
    results.replaceChildren(
      h("p", { class: "muted" }, user ? "No sessions for this end user." : "No sessions yet."));
    status("0 session(s).");
    return;
  }
  const table = sessionsTable(page.data);
  let shown = page.data.length;
  let next = page.next_cursor;
  const older = h("button", { type: "button", onclick: () => loadOlder() }, "Older sessions");
  const showing = () => {
    older.hidden = !next;
    status(`${shown} session(s)${next ? ", more available" : ""}.`);
  };
  // The next page is the one after the last row shown (`after=`, a place in the list), so
  // a session started meanwhile neither repeats a row nor pushes one out of view.
  async function loadOlder() {
    older.disabled = true;
    status("Loading older sessions…");
    try {
      const more = await api(
        `/v1/sessions?limit=${SESSIONS_PAGE}&after=${encodeURIComponent(next)}${userParam(user)}`);
      table.tBodies[0].append(...more.data.map(sessionRow));
      shown += more.data.length;
      next = more.next_cursor;
      showing();
    } catch (err) {
      status(explain(err), true);
    } finally {
      older.disabled = false;
    }
  }
  results.replaceChildren(table, older);
  showing();
}

function sessionsTable(rows) {
  const head = ["Session", "End user", "Profile", "Last activity", "Turns", "Cost", "Cache savings"];
  const numeric = new Set(["Turns", "Cost", "Cache savings"]);
  return h(
    "table",
    { class: "sessions" },
    h("caption", {}, "Sessions, newest first"),
    h("thead", {}, h("tr", {}, head.map((label) =>
      h("th", { scope: "col", class: numeric.has(label) ? "num" : null }, label)))),
    h("tbody", {}, rows.map(sessionRow)),
  );
}

function sessionRow(s) {
  return h(
    "tr",
    {},
    h("td", { class: "title", "data-label": "Session" },
      h("a", { href: `#/session/${encodeURIComponent(s.id)}` }, s.title || "(untitled)"),
      h("div", { class: "muted" }, h("code", {}, s.id))),
    h("td", { "data-label": "End user" },
      s.user ? h("a", { href: sessionsHref(s.user) }, s.user) : h("span", { class: "muted" }, "none")),
    h("td", { "data-label": "Profile" }, s.profile),
    h("td", { "data-label": "Last activity" }, when(s.last_active_at)),
    h("td", { class: "num", "data-label": "Turns" }, s.turns),
    h("td", { class: "num", "data-label": "Cost" }, usd(s.cost_usd)),
    h("td", { class: "num", "data-label": "Cache savings" }, usd(s.cache_savings_usd)),
  );
}

async function searchSessions(q, user) {
  const results = $("results");
  if (!q.trim()) return sessionsView(user);
  status("Searching…");
  const found = await api(`/v1/sessions/search?q=${encodeURIComponent(q)}${userParam(user)}`).catch((err) => {
    status(explain(err), true);
    return null;
  });
  if (!found) return;
  status(`${found.data.length} match(es) for “${q}”.`);
  if (!found.data.length) {
    results.replaceChildren(h("p", { class: "muted" }, "No messages match."));
    return;
  }
  results.replaceChildren(
    h("ul", { class: "card" }, found.data.map((hit) =>
      h("li", {},
        h("a", { href: `#/session/${encodeURIComponent(hit.session_id)}` }, hit.title || hit.session_id),
        " — ", h("span", { class: "muted" }, `${hit.role}${hit.state && hit.state !== "live" ? ` (${hit.state})` : ""}: `),
        ...highlighted(hit.snippet || "")))),
  );
}

// The search API marks matches as **word**: shown as <mark>, built as nodes, never parsed
// as markup, so a snippet cannot inject anything.
function highlighted(snippet) {
  return snippet.split("**").map((part, i) => (i % 2 ? h("mark", {}, part) : part));
}

// -- transcript -----------------------------------------------------------------------------

async function transcriptView(sessionId) {
  status("Loading transcript…");
  const [session, usage] = await Promise.all([
    api(`/v1/sessions/${encodeURIComponent(sessionId)}`),
    api(`/v1/sessions/${encodeURIComponent(sessionId)}/usage`).catch(() => null),
  ]);
  const list = h("ol", { class: "transcript", "aria-label": "Messages" });
  const totals = usage ? usage.totals : {};
  show(
    h("p", {}, h("a", { href: "#/sessions" }, "← All sessions")),
    h("h2", {}, session.title || "(untitled session)"),
    h("div", { class: "card" }, h("dl", { class: "facts" },
      fact("Session", session.id),
      fact("End user", session.user || "none"),
      fact("Profile", session.profile),
      fact("Last activity", when(session.last_active_at)),
      fact("Turns", session.turns),
      fact("Cost", usd(session.cost_usd)),
      fact("Cache savings", usd(session.cache_savings_usd)),
      fact("Upstream calls", totals.upstream_calls ?? session.upstream_calls ?? ""),
      fact("Prompt tokens", totals.prompt_tokens ?? ""),
      fact("Cache read tokens", totals.cache_read_tokens ?? ""),
    )),
    usage && usage.calls.length ? callsTable(usage.calls) : "",
    h("h3", {}, "Transcript"),
    list,
  );
  let shown = -1;
  const refresh = async () => {
    const messages = await loadMessages(sessionId);
    if (messages.length === shown) return;
    shown = messages.length;
    list.replaceChildren(...messages.map(messageItem));
    status(`${messages.length} message(s).`);
  };
  await refresh();
  // Poll for a running turn; while one runs, its events stream into the live panel.
  const live = h("section", { class: "card live", "aria-label": "Live turn", hidden: "" });
  list.after(live); // the turn in progress follows the transcript it extends
  const watch = () => watchTurns(sessionId, live, refresh).catch(() => {});
  await watch();
  refreshTimer = setInterval(() => { refresh().catch(() => {}); watch(); }, 2000);
}

// -- the live turn --------------------------------------------------------------------------

function stopLive() {
  if (liveAbort) liveAbort.abort();
  liveAbort = null;
}

async function watchTurns(sessionId, panel, onEnd) {
  if (liveAbort) return; // already following one
  const turns = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/turns?limit=1000`);
  const running = turns.data.find((t) => t.status === "running");
  if (!running) {
    panel.hidden = true; // the finished turn's answer is in the transcript by now
    return;
  }
  const controller = new AbortController();
  liveAbort = controller;
  try {
    await followTurn(sessionId, running.id, panel, controller.signal);
  } finally {
    if (liveAbort === controller) liveAbort = null;
    await onEnd().catch(() => {});
  }
}

async function followTurn(sessionId, turnId, panel, signal) {
  // EventSource cannot send a bearer token, so the stream is read with fetch; a dropped
  // connection reattaches with `after=` the last sequence number seen and loses nothing.
  const text = h("p", { class: "text" });
  const steps = h("ul", { class: "steps", "aria-label": "Tool activity" });
  const state = h("span", { class: "badge running" }, "running");
  panel.replaceChildren(
    h("header", {}, h("span", { class: "role" }, "Live turn"), state,
      h("code", { class: "muted" }, turnId)),
    text, steps);
  panel.hidden = false;
  let after = 0;
  for (let attempt = 0; attempt < 30 && !signal.aborted; attempt++) {
    let response;
    try {
      response = await fetch(
        `/v1/sessions/${encodeURIComponent(sessionId)}/events?after=${after}`,
        { headers: { Authorization: `Bearer ${credential}` }, cache: "no-store",
          credentials: "omit", signal });
    } catch (err) {
      if (signal.aborted) return;
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    if (!response.ok || !response.body) return;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        break; // dropped: reattach below
      }
      if (chunk.done) break;
      // The server ends lines with CRLF; a CR split from its LF waits for the next read.
      buffer = (buffer + decoder.decode(chunk.value, { stream: true })).replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trim()).join("\n");
        if (!data) continue; // a keepalive comment
        const event = JSON.parse(data);
        if (event.turn_id !== turnId) return; // another turn took over the session
        after = event.seq;
        if (liveEvent(event, text, steps, state)) return;
      }
    }
  }
}

function liveEvent(event, text, steps, state) {
  // Returns true once the turn has ended.
  if (event.type === "text") {
    text.append(event.text);
  } else if (event.type === "tool.started") {
    steps.append(h("li", { "data-call": event.call_id }, `Running ${event.name}…`));
  } else if (event.type === "tool.finished") {
    const item = steps.querySelector(`[data-call="${CSS.escape(event.call_id)}"]`);
    const line = `${event.name} ${event.ok ? "finished" : "failed"} in ${event.duration_ms} ms`;
    if (item) item.textContent = line; else steps.append(h("li", {}, line));
  } else if (event.type === "approval.requested") {
    steps.append(h("li", {}, h("a", { href: "#/approvals" },
      `Waiting for approval: ${event.tool} — ${event.summary}`)));
  } else if (event.type === "approval.resolved") {
    steps.append(h("li", {}, `Approval ${event.status}`));
  } else if (event.type === "finished") {
    state.className = `badge ${event.error ? "error" : "done"}`;
    state.textContent = event.error ? `ended: ${event.exit_reason}` : "finished";
    return true;
  }
  return false;
}

function callsTable(calls) {
  const head = ["Upstream call", "Model", "Input", "Cache read", "Cache write", "Output", "Cost"];
  return h("table", { class: "calls" },
    h("caption", {}, "Upstream calls and what each cost"),
    h("thead", {}, h("tr", {}, head.map((label, i) =>
      h("th", { scope: "col", class: i > 1 ? "num" : null }, label)))),
    h("tbody", {}, calls.map((c, i) => h("tr", {},
      h("th", { scope: "row" }, `${i + 1}`, h("div", { class: "muted" }, when(c.created_at))),
      h("td", {}, c.upstream_model),
      h("td", { class: "num" }, c.input_tokens),
      h("td", { class: "num" }, c.cache_read_tokens),
      h("td", { class: "num" }, c.cache_write_tokens),
      h("td", { class: "num" }, c.output_tokens),
      h("td", { class: "num" }, c.cost_status === "unknown" ? "unknown" : usd(c.cost_usd))))));
}

async function loadMessages(sessionId) {
  const all = [];
  let cursor = null;
  for (let page = 0; page < 40; page++) {
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
    const body = await api(`/v1/sessions/${encodeURIComponent(sessionId)}/messages?limit=100${q}`);
    all.push(...body.data);
    if (!body.has_more || !body.next_cursor) break;
    cursor = body.next_cursor;
  }
  return all;
}

function callParts(call) {
  const fn = call.function || call;
  let args = fn.arguments;
  if (typeof args === "string") {
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* shown verbatim */ }
  } else {
    args = JSON.stringify(args, null, 2);
  }
  return { name: fn.name || "?", args: args ?? "", id: call.id || "" };
}

function messageItem(m) {
  const state = m.state || "live";
  const badges = [];
  if (state !== "live") badges.push(h("span", { class: `badge ${state}` }, state));
  if (m.is_error) badges.push(h("span", { class: "badge error" }, "error"));
  const role = m.role === "tool"
    ? `Tool result${m.tool_name ? ` · ${m.tool_name}` : ""}`
    : m.role.charAt(0).toUpperCase() + m.role.slice(1);
  const body = [];
  if (m.content) body.push(h("p", { class: "text" }, m.content));
  for (const call of m.tool_calls || []) {
    const { name, args, id } = callParts(call);
    body.push(h("div", { class: "call" },
      h("span", { class: "name" }, `Tool call: ${name}`), " ", h("code", { class: "muted" }, id),
      h("pre", { class: "code" }, args)));
  }
  if (m.api_content && m.api_content !== m.content) {
    body.push(h("details", {}, h("summary", {}, "Exact text sent to the model"),
      h("pre", { class: "code" }, m.api_content)));
  }
  return h(
    "li",
    { class: `card msg ${m.role} ${state}`, "aria-label": `${role}${state !== "live" ? `, ${state}` : ""}` },
    h("header", {}, h("span", { class: "role" }, role), ...badges,
      h("span", { class: "muted" }, `#${m.id} · ${when(m.created_at)}`)),
    ...body,
  );
}

// -- approvals ------------------------------------------------------------------------------

async function approvalsView() {
  const list = h("div", { id: "approvals" });
  show(h("h2", {}, "Pending approvals"),
    h("p", { class: "muted" }, "Commands waiting for a person. The turn that asked resumes as soon as you decide."),
    list);
  const refresh = async () => {
    const body = await api("/v1/approvals?status=pending");
    renderApprovals(list, body.data);
  };
  status("Loading approvals…");
  await refresh();
  refreshTimer = setInterval(() => refresh().catch(() => {}), 2000);
}

function renderApprovals(list, rows) {
  const ids = rows.map((r) => r.id).join(",");
  if (list.dataset.ids === ids) return; // unchanged: keep focus where the user has it
  list.dataset.ids = ids;
  status(`${rows.length} pending approval(s).`);
  setPendingCount(rows.length);
  if (!rows.length) {
    list.replaceChildren(h("p", { class: "muted" }, "Nothing is waiting."));
    return;
  }
  list.replaceChildren(...rows.map((a) => {
    const decide = (decision) => async (event) => {
      event.target.closest(".actions").querySelectorAll("button").forEach((b) => { b.disabled = true; });
      try {
        await api(`/v1/approvals/${encodeURIComponent(a.id)}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ decision }),
        });
        status(`${decision === "deny" ? "Denied" : "Approved"}: ${a.tool}.`);
      } catch (err) {
        status(explain(err), true);
      }
      list.dataset.ids = "";
      approvalsView().catch((err) => status(explain(err), true));
    };
    return h("article", { class: "card", "aria-labelledby": `ap-${a.id}` },
      h("h3", { id: `ap-${a.id}` }, `${a.tool}`),
      h("pre", { class: "code" }, a.summary || ""),
      h("dl", { class: "facts" },
        fact("Session", h("a", { href: `#/session/${encodeURIComponent(a.session_id)}` }, a.session_id)),
        fact("Requested", when(a.created_at)),
        fact("Expires", when(a.expires_at)),
        fact("By", a.requested_by || "")),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "primary", onclick: decide("once") }, "Approve once"),
        h("button", { type: "button", onclick: decide("session") }, "Approve for this session"),
        h("button", { type: "button", onclick: decide("always") }, "Always allow"),
        h("button", { type: "button", class: "danger", onclick: decide("deny") }, "Deny")));
  }));
}

function setPendingCount(n) {
  const badge = $("pending-count");
  badge.hidden = !n;
  badge.textContent = n ? String(n) : "";
  badge.setAttribute("aria-label", `${n} pending`);
}

async function updatePendingCount() {
  try {
    const body = await api("/v1/approvals?status=pending");
    setPendingCount(body.data.length);
  } catch {
    setPendingCount(0); // no approvals API, or this key may not approve
  }
}

// -- spend ----------------------------------------------------------------------------------

async function spendView() {
  status("Loading spend…");
  const body = await api("/v1/usage?days=30");
  const days = body.data;
  const total = days.reduce((sum, d) => sum + Number(d.cost_usd || 0), 0);
  show(
    h("h2", {}, "Spend over time"),
    h("p", {}, `Last 30 days: ${usd(total)} across ${days.reduce((n, d) => n + d.calls, 0)} upstream call(s).`),
    days.length ? spendChart(days) : h("p", { class: "muted" }, "No upstream calls yet."),
    days.length ? spendTable(days) : "",
  );
  status(`${days.length} day(s) with spend.`);
}

function spendChart(days) {
  const width = 640, height = 240, left = 84, bottom = 40, top = 16;
  const max = Math.max(...days.map((d) => Number(d.cost_usd || 0)), 1e-9);
  const slot = (width - left - 8) / days.length;
  const barWidth = Math.max(4, Math.min(48, slot * 0.7));
  const scale = (v) => ((height - bottom - top) * v) / max;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-labelledby": "spend-title" },
    svg("title", { id: "spend-title" }, `Spend per day, highest ${usd(max)}`),
    svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - 4, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    svg("text", { x: left - 6, y: top + 4, "text-anchor": "end" }, usd(max)),
    svg("text", { x: left - 6, y: height - bottom, "text-anchor": "end" }, "$0"),
  );
  days.forEach((d, i) => {
    const value = Number(d.cost_usd || 0);
    const x = left + 4 + i * slot + (slot - barWidth) / 2;
    const barHeight = Math.max(1, scale(value));
    chart.append(svg("rect", { class: "bar", x, y: height - bottom - barHeight, width: barWidth, height: barHeight },
      svg("title", {}, `${d.day}: ${usd(value)}, ${d.calls} call(s)`)));
    if (days.length <= 10 || i % Math.ceil(days.length / 8) === 0) {
      chart.append(svg("text", { x: x + barWidth / 2, y: height - bottom + 16, "text-anchor": "middle" }, d.day.slice(5)));
    }
  });
  return h("figure", { class: "card chart" }, chart, h("figcaption", { class: "muted" }, "Daily spend in USD (UTC days)."));
}

function spendTable(days) {
  return h("table", {},
    h("caption", {}, "Spend per day"),
    h("thead", {}, h("tr", {}, ["Day", "Calls", "Cache read tokens", "Cost"].map((l, i) =>
      h("th", { scope: "col", class: i ? "num" : null }, l)))),
    h("tbody", {}, days.map((d) => h("tr", {},
      h("td", {}, d.day), h("td", { class: "num" }, d.calls),
      h("td", { class: "num" }, d.cache_read_tokens), h("td", { class: "num" }, usd(d.cost_usd))))));
}

// -- start ----------------------------------------------------------------------------------

$("sign-in-form").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", signOut);
window.addEventListener("hashchange", route);
$("credential").focus();
