// The session's details beyond its timeline: cost and budget, metadata, provenance and lineage
// from the `/v2` Session record, the AgentEx task's status and params, every loaded event as the
// Sessions API's JSON (each one a point to fork the session from), and "copy as curl" for the
// session's routes, and its files: the folder it works in and the files its tools wrote (its
// `file.changed` events), each opening in the Files view. Everything is read through
// the documented HTTP routes, with the workspace named in X-Sessiond-Workspace where the path
// carries none.

import { h, icon, openDialog, toast } from './dom.js';
import * as api from './api.js';
import { fileHref, folderHref, normalisePath } from './files.js';

/** HAST envelopes per timeline event (`hast::SLOTS`). */
const HAST_SLOTS = 10;

function panel(title, ic, ...body) {
  return h('section', { class: 'panel' }, h('h3', { class: 'panel-title' }, icon(ic), title), ...body);
}

function kv(rows) {
  return h('dl', { class: 'kv' }, rows.filter(Boolean).map(([k, v]) => [h('dt', { text: k }), v instanceof Node ? h('dd', null, v) : h('dd', { text: String(v) })]));
}

/** Options naming the workspace of a request whose path carries none (`/v2`, `/agentex`). */
export function inWorkspace(ws) {
  return { headers: { 'X-Sessiond-Workspace': ws } };
}

/** The `/v2` record, the AgentEx task and the written files of a session (null where none). */
export async function loadExtras(ws, id) {
  const opts = inWorkspace(ws);
  const [record, task, written] = await Promise.all([
    api.get(`/v2/sessions/${encodeURIComponent(id)}`, opts).catch(() => null),
    api.get(`/agentex/tasks/${encodeURIComponent(id)}`, opts).catch(() => null),
    loadWritten(ws, id).catch(() => null),
  ]);
  return { record, task, written };
}

/** Per session: how far its `/v2` events were read, and the files they said were written. */
const writtenSoFar = new Map();

/**
 * The files a session's tools wrote, newest first, as `{path, operation}` (`update` or `delete`)
 * from its `file.changed` events on `/v2`; each call reads on from where the last one stopped.
 */
export async function loadWritten(ws, id) {
  let seen = writtenSoFar.get(id);
  if (!seen) {
    seen = { after: 0, files: new Map() };
    writtenSoFar.set(id, seen);
  }
  for (let page = 0; page < 50; page++) {
    const res = await api.get(`/v2/sessions/${encodeURIComponent(id)}/events?after=${seen.after}`, inWorkspace(ws));
    const events = res.events || [];
    for (const e of events) {
      seen.after = Math.max(seen.after, e.sequence);
      if (e.type === 'file.changed' && e.data?.path) {
        seen.files.delete(e.data.path);
        seen.files.set(e.data.path, e.data.operation || 'update');
      }
    }
    if (!res.has_more || !events.length) break;
  }
  return [...seen.files].map(([path, operation]) => ({ path, operation })).reverse();
}

/**
 * The drive path of a file a tool named: relative to the session's folder, or absolute inside
 * this workspace's drive (`…/drive/{ws}/…`, as agent CLIs name it); null when it is elsewhere.
 */
export function drivePathOf(ws, cwd, path) {
  if (path.startsWith('/')) {
    const marker = `/drive/${ws}/`;
    const i = path.indexOf(marker);
    return i < 0 ? null : normalisePath(path.slice(i + marker.length));
  }
  const base = cwd && cwd !== '.' ? cwd : '';
  return normalisePath(base ? `${base}/${path}` : path);
}

/** The session's folder and the files its tools wrote, as links into the Files view. */
function filesPanel(ctx, d, written) {
  const cwd = d?.cwd && d.cwd !== '.' ? d.cwd : '';
  const items = (written || []).slice(0, 100).map((f) => {
    const at = drivePathOf(ctx.ws, cwd, f.path);
    const label = h('span', { class: 'mono small', text: at ?? f.path });
    return h('li', { dataset: { path: at ?? '', operation: f.operation } },
      f.operation === 'delete'
        ? [h('span', { class: 'written-deleted' }, icon('trash'), label), h('span', { class: 'muted small', text: ' deleted' })]
        : at
          ? h('a', { href: fileHref(ctx, at), class: 'written-link' }, icon('file'), label)
          : [icon('file'), label, h('span', { class: 'muted small', text: ' (outside the drive)' })]);
  });
  return panel('Files', 'folder',
    h('p', { class: 'small' }, 'Folder: ',
      h('a', { href: folderHref(ctx, cwd), class: 'mono session-folder-link', text: cwd || 'Drive root' })),
    written === undefined
      ? h('p', { class: 'muted small', text: 'Loading the files its tools wrote…' })
      : written === null
      ? h('p', { class: 'muted small', text: 'The written files could not be read.' })
      : items.length
        ? [h('p', { class: 'muted small', text: 'Written by its tools (newest first):' }), h('ul', { class: 'written-list' }, items)]
        : h('p', { class: 'muted small', text: 'Its tools have written no files.' }));
}

/** Copies `text`, or selects it in `el` where the clipboard is not allowed. */
async function copy(text, el) {
  try {
    await navigator.clipboard.writeText(text);
    toast('Copied');
  } catch {
    const range = document.createRange();
    range.selectNodeContents(el);
    const sel = getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    toast('Selected: copy it with your keyboard');
  }
}

function codeBlock(text, label) {
  const pre = h('pre', { class: 'code-block mono small', tabindex: 0, text });
  return h('div', { class: 'code-wrap' }, pre,
    h('button', { type: 'button', class: 'btn btn-ghost sm copy-btn', 'aria-label': `Copy ${label}`, onclick: () => copy(text, pre) }, icon('file'), 'Copy'));
}

/** `curl` for one of the session's routes (the key from the environment, never the page's). */
export function curl(method, path, body) {
  const url = `${location.origin}${path}`;
  const parts = [`curl -sS${method === 'GET' ? '' : ` -X ${method}`} '${url}'`, '-H "Authorization: Bearer $SESSIOND_KEY"'];
  if (body !== undefined) parts.push("-H 'Content-Type: application/json'", `-d '${JSON.stringify(body).replaceAll("'", "'\\''")}'`);
  return parts.join(' \\\n  ');
}

/**
 * "Fork from here": a new session whose conversation is this one's up to event `seq`
 * (`POST …/fork {atSeq, prompt?}`), opened once made. The session itself is only read.
 */
export async function forkFrom(ctx, id, seq) {
  const prompt = h('textarea', { id: 'fork-prompt', rows: 3, placeholder: 'Optional: a first message for the fork' });
  const made = await openDialog({
    title: `Fork from event ${seq}`,
    body: [
      h('p', { class: 'muted small', text: `A new session with this session's timeline up to event ${seq}; this session is not changed.` }),
      h('label', { for: 'fork-prompt', text: 'First message' }),
      prompt,
    ],
    submitLabel: 'Fork',
    submit: async () => {
      const body = { atSeq: seq };
      if (prompt.value.trim()) body.prompt = prompt.value;
      return api.post(api.sessionPath(ctx.ws, id, '/fork'), body);
    },
  });
  const sid = made?.session?.sessionId;
  if (sid) {
    toast(`Forked from event ${seq}`);
    location.hash = ctx.href(`/s/${encodeURIComponent(sid)}`);
  }
}

/** The Sessions API JSON of one event, in a dialog, with a curl that reads it. */
export function showRawEvent(ctx, id, entry) {
  const ws = ctx.ws;
  const json = JSON.stringify(entry, null, 2);
  const path = api.sessionPath(ws, id, `/history?cursor=${Math.max(0, entry.seq - 1)}&limit=1`);
  // Timeline event N projects to the HAST envelopes N × 10 … N × 10 + 9 (`hast::SLOTS`).
  const first = entry.seq * HAST_SLOTS;
  const hastPath = `/v2/sessions/${encodeURIComponent(id)}/events?after=${first - 1}&limit=${HAST_SLOTS}`;
  const hast = h('div', { dataset: { kind: 'raw-hast' } }, h('p', { class: 'muted small', text: 'Loading…' }));
  api.get(hastPath, { headers: { 'X-Sessiond-Workspace': ws } })
    .then((page) => {
      const mine = (page.events || []).filter((e) => e.sequence >= first && e.sequence < first + HAST_SLOTS);
      hast.replaceChildren(mine.length
        ? codeBlock(JSON.stringify(mine, null, 2), 'HAST JSON')
        : h('p', { class: 'muted small', text: 'This event has no HAST envelope (the Task events API does not project it).' }));
    })
    .catch((err) => hast.replaceChildren(h('p', { class: 'form-error', text: api.describeError(err) })));
  openDialog({
    title: `Event ${entry.seq}: ${entry.event?.type || 'unknown'}`,
    body: [
      h('p', { class: 'muted small', text: 'As the Sessions API serves it (a HistoryEntry).' }),
      h('div', { dataset: { kind: 'raw-event' } }, codeBlock(json, 'event JSON')),
      h('p', { class: 'muted small', text: 'Read it again:' }),
      codeBlock(curl('GET', path), 'curl'),
      h('p', { class: 'muted small', text: `As the Task events API serves it (the HAST envelopes numbered ${entry.seq * HAST_SLOTS} to ${entry.seq * HAST_SLOTS + HAST_SLOTS - 1}):` }),
      hast,
      codeBlock(curl('GET', hastPath), 'HAST curl'),
    ],
    submitLabel: 'Fork from here',
    cancelLabel: 'Close',
  }).then((fork) => fork && forkFrom(ctx, id, entry.seq));
}

function cents(n) {
  return `${n} ¢ ($${(n / 100).toFixed(2)})`;
}

/**
 * The panels of a session's details: `record` and `task` from [`loadExtras`], `derived` what the
 * loaded events tell (whether usage was estimated), `onBudget` opens the budget dialog.
 */
export function detailPanels(ctx, pane, extras, derived, onBudget) {
  const d = pane.detail;
  const { record, task } = extras || {};
  const out = [];
  const link = (sid, text) => h('a', { href: ctx.href(`/s/${encodeURIComponent(sid)}`), text: text || sid });
  if (d) out.push(filesPanel(ctx, d, extras ? extras.written : undefined));
  if (record) {
    const est = derived?.usage?.estimated;
    const budget = record.budget?.cents || 0;
    out.push(panel('Cost and budget', 'sparkles', kv([
      ['Cost', `${est ? '≈ ' : ''}${cents(record.cost?.total ?? 0)}${est ? ' (estimated)' : ''}`],
      ['Tokens in / out', `${record.tokens?.input ?? 0} / ${record.tokens?.output ?? 0}`],
      record.tokens?.model && ['Model', record.tokens.model],
      ['Budget', h('span', { class: 'budget-line' }, h('span', { dataset: { kind: 'budget' }, text: budget > 0 ? cents(budget) : 'No cap' }),
        h('button', { type: 'button', class: 'btn btn-ghost sm', onclick: () => onBudget() }, 'Change'))],
    ])));
    const meta = Object.entries(record.metadata || {});
    out.push(panel('Metadata', 'list', meta.length
      ? kv(meta.map(([k, v]) => [k, v]))
      : h('p', { class: 'muted small', text: 'None.' })));
    const attr = record.attribution || {};
    out.push(panel('Provenance', 'user', kv([
      ['Source', record.source || 'api'],
      attr.type && ['Attribution', `${attr.type}${attr.id ? `: ${attr.id}` : ''}`],
      attr.user && ['Caused by', typeof attr.user === 'object' ? (attr.user.login || attr.user.name || attr.user.id || JSON.stringify(attr.user)) : String(attr.user)],
      record.webhook_type && ['Webhook', `${record.webhook_type}${record.webhook_id ? ` (${record.webhook_id})` : ''}`],
      ['Harness', record.harness],
      record.runner_id && ['Runner', record.runner_id],
    ])));
    const parent = record.parent || {};
    const successor = d?.inputClosed?.successorId;
    if (parent.session_id || successor) {
      out.push(panel('Lineage', 'branch', kv([
        parent.session_id && [parent.kind ? `Parent (${parent.kind})` : 'Parent', link(parent.session_id)],
        successor && ['Handed off to', link(successor)],
      ])));
    }
  }
  if (task) {
    const params = task.params && Object.keys(task.params).length ? JSON.stringify(task.params, null, 2) : null;
    out.push(panel('Task', 'layers', kv([
      ['Status', task.status || '—'],
      task.status_reason && ['Reason', task.status_reason],
      task.name && ['Name', task.name],
    ]), params ? codeBlock(params, 'task params') : h('p', { class: 'muted small', text: 'No params.' })));
  }
  // Every loaded event, newest first, each viewable as JSON; and each input's request ids.
  const entries = pane.entries.slice(-200).reverse();
  out.push(panel('Events', 'terminal',
    h('details', { class: 'raw-events' },
      h('summary', { text: `${pane.entries.length} loaded events (raw JSON)` }),
      h('ul', { class: 'raw-list' }, entries.map((e) => h('li', null,
        h('button', { type: 'button', class: 'btn btn-ghost sm raw-btn', dataset: { seq: e.seq }, onclick: () => showRawEvent(ctx, pane.id, e) },
          h('span', { class: 'mono', text: `#${e.seq}` }), ' ', e.event?.type || 'unknown',
          e.event?.clientRequestId ? h('span', { class: 'muted small mono', text: ` · request ${e.event.clientRequestId}` }) : null),
        h('button', { type: 'button', class: 'btn btn-ghost sm fork-btn', dataset: { seq: e.seq }, title: `Fork from event ${e.seq}`, 'aria-label': `Fork from event ${e.seq}`, onclick: () => forkFrom(ctx, pane.id, e.seq) },
          icon('branch'))))))));
  const id = pane.id;
  out.push(panel('API', 'external',
    h('p', { class: 'muted small', text: 'This session through the API (set SESSIOND_KEY to an API key):' }),
    h('div', { class: 'curls' },
      codeBlock(curl('GET', api.sessionPath(ctx.ws, id, '?include=state')), 'the detail curl'),
      codeBlock(curl('GET', api.sessionPath(ctx.ws, id, '/history?before=0&limit=100')), 'the history curl'),
      codeBlock(curl('GET', api.sessionPath(ctx.ws, id, '/events?since=0')), 'the events curl'),
      codeBlock(curl('POST', api.sessionPath(ctx.ws, id, '/messages'), { prompt: 'Hello' }), 'the message curl'),
      codeBlock(curl('GET', `/v2/sessions/${encodeURIComponent(id)}`), 'the record curl'))));
  return out;
}
