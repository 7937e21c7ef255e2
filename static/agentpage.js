// An agent's management pages: About (engine, model, status, description, registration, tasks;
// edit and delete), Schedules (and one schedule's page) and Deployments. Every read and action is
// a documented route: /v1/ws/{ws}/agents/{slug} and the agent platform API (/agentex/…, with the
// workspace named in X-Sessiond-Workspace), with the same checks as for any other client.

import { h, icon, relTime, fullTime, toast, openDialog, confirmDialog } from './dom.js';
import * as api from './api.js';

const SECTIONS = [['about', 'About'], ['schedules', 'Schedules'], ['deployments', 'Deployments']];
const NEXT_SHOWN = 5;

const inWs = (ctx) => ({ headers: { 'X-Sessiond-Workspace': ctx.ws } });
const ax = (ctx, method, path, body) => api.request(method, `/agentex${path}`, body, inWs(ctx));
/** Epoch milliseconds of an RFC 3339 time (the platform API) or of a number (the `/v1` API). */
const ms = (t) => (typeof t === 'number' ? t : t ? Date.parse(t) : null);
const enc = encodeURIComponent;

function when(at) {
  if (!at) return h('span', { class: 'muted', text: '—' });
  const t = ms(at);
  return h('time', { datetime: new Date(t).toISOString(), title: fullTime(t), text: relTime(t) });
}

/** A time still to come, relative to now. */
function until(iso) {
  const at = ms(iso);
  const m = Math.round((at - Date.now()) / 60000);
  let text;
  if (m < 1) text = 'in under a minute';
  else if (m < 60) text = `in ${m} min`;
  else if (m < 48 * 60) text = `in ${Math.round(m / 60)} h`;
  else text = `in ${Math.round(m / 1440)} d`;
  return h('time', { datetime: iso, title: fullTime(at), text });
}

function exact(iso) {
  return h('time', { datetime: iso, text: fullTime(ms(iso)) });
}

function errorBox(err, id) {
  return h('div', { class: 'callout callout-error', role: 'alert', id }, icon('alert'), h('div', { class: 'callout-text', text: api.describeError(err) }));
}

function table(id, heads, rows, empty) {
  return h('div', { class: 'table-wrap' }, h('table', { class: 'access-table', id },
    h('thead', null, h('tr', null, ...heads.map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', null, rows.length ? rows : h('tr', null, h('td', { colspan: heads.length, class: 'muted', text: empty })))));
}

function kv(pairs) {
  return h('dl', { class: 'kv agent-kv' }, pairs.filter(Boolean).flatMap(([k, v, id]) => [h('dt', { text: k }), h('dd', { id }, v)]));
}

function statusBadge(status) {
  const ok = status === 'Ready';
  return h('span', { class: `badge ${ok ? 'badge-running' : 'badge-interrupted'}`, id: 'agent-status' }, status || 'Unknown');
}

function parseJson(text, field) {
  if (!text.trim()) return {};
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${field}: not valid JSON (${e.message})`);
  }
}

/** The agent platform API's view of the agent named `slug` (id, status, registration). */
function agentex(ctx, slug) {
  return ax(ctx, 'GET', `/agents/name/${enc(slug)}`);
}

/** `#/w/{ws}/agents/{slug}/{section}[/{item}]`. */
export function agentPageView(ctx, slug, section, item) {
  const current = SECTIONS.some(([k]) => k === section) ? section : 'about';
  const titleText = h('span', { text: ctx.agents.find((a) => a.slug === slug)?.name || slug });
  const body = h('div', { class: 'agent-page-body' });
  const root = h('section', { class: 'view access-view agent-page' },
    h('header', { class: 'page-head' },
      h('div', null,
        h('a', { class: 'small', href: ctx.href('/agents') }, 'All agents'),
        h('h1', { class: 'with-avatar', tabindex: -1 }, h('span', { class: 'avatar', 'aria-hidden': 'true' }, icon('bot')), titleText))),
    h('nav', { class: 'tabs access-tabs', 'aria-label': 'Agent sections' },
      h('a', { class: 'tab', href: ctx.href(`/agents/${enc(slug)}`), id: 'agent-tab-chat' }, 'Chat'),
      SECTIONS.map(([k, label]) => h('a', {
        class: 'tab', href: ctx.href(`/agents/${enc(slug)}/${k}`), id: `agent-tab-${k}`,
        'aria-current': k === current ? (item ? 'true' : 'page') : null,
      }, label))),
    body);
  const page = { ctx, slug, body, setTitle: (t) => { titleText.textContent = t; } };
  body.append(h('div', { class: 'empty-state' }, h('span', { class: 'spinner' })));
  (async () => {
    try {
      const [agent, ext] = await Promise.all([api.get(api.agentsPath(ctx.ws, `/${enc(slug)}`)), agentex(ctx, slug)]);
      page.agent = agent;
      page.ext = ext;
      page.setTitle(agent.name);
      document.title = `${agent.name} · ${SECTIONS.find(([k]) => k === current)[1]} · sessiond`;
      body.replaceChildren();
      if (current === 'about') aboutSection(page);
      else if (current === 'schedules') {
        if (item) scheduleSection(page, item);
        else schedulesSection(page);
      } else deploymentsSection(page);
    } catch (err) {
      body.replaceChildren(err.code === 'agent_not_found'
        ? h('div', { class: 'empty-state' }, h('h2', { text: 'Agent not found' }), h('p', { class: 'muted', text: 'It may have been deleted.' }))
        : errorBox(err));
    }
  })();
  return { el: root, focus: () => root.querySelector('h1')?.focus(), destroy() {} };
}

// ---------------------------------------------------------------------------------------------
// About

function aboutSection(page) {
  const { ctx, agent, ext, body } = page;
  const engine = agent.engine || {};
  const kind = engine.kind || 'server default';
  const acp = engine.kind === 'acp' || ext.registered_at;
  const tasks = h('div', { id: 'agent-tasks-wrap' }, h('p', { class: 'muted small', text: 'Loading…' }));
  body.append(
    h('section', { class: 'stack', 'aria-labelledby': 'agent-about-title' },
      h('h2', { class: 'section-title', id: 'agent-about-title', text: 'Agent' }),
      kv([
        ['Engine', h('span', { class: 'mono', text: kind }), 'agent-engine-kind'],
        ['Model', engine.model ? h('span', { class: 'mono', text: engine.model }) : h('span', { class: 'muted', text: 'The engine’s default' }), 'agent-model'],
        ['Status', [statusBadge(ext.status), ext.status_reason ? h('p', { class: 'small danger-text agent-reason', id: 'agent-status-reason', text: ext.status_reason }) : null]],
        ['Description', ext.description ? ext.description : h('span', { class: 'muted', text: 'No description' }), 'agent-description'],
        ['Folder', h('span', { class: 'mono', text: agent.anchor || 'whole drive' })],
        ['Slug', h('span', { class: 'mono', text: agent.slug })],
        ['Created', when(agent.createdAt)],
      ])),
    acp && h('section', { class: 'stack', 'aria-labelledby': 'agent-reg-title', id: 'agent-registration' },
      h('h2', { class: 'section-title', id: 'agent-reg-title', text: 'Registration' }),
      kv([
        engine.kind === 'acp' && ['ACP URL', h('span', { class: 'mono', text: engine.url }), 'agent-acp-url'],
        engine.kind === 'acp' && ['ACP type', ext.acp_type],
        ['Registered', ext.registered_at ? when(ext.registered_at) : h('span', { class: 'muted', text: 'Not registered' }), 'agent-registered'],
        engine.kind === 'acp' && ['Last contact', h('span', { id: 'agent-last-contact', class: 'muted', text: '…' })],
        engine.kind === 'acp' && ['Last error', h('span', { id: 'agent-last-error', class: 'muted', text: '…' })],
        ext.registration_metadata && ['Metadata', h('pre', { class: 'code-block mono small', text: JSON.stringify(ext.registration_metadata, null, 2) })],
      ])),
    engineForm(page),
    h('section', { class: 'stack', 'aria-labelledby': 'agent-tasks-title' },
      h('div', { class: 'access-toolbar' },
        h('h2', { class: 'section-title', id: 'agent-tasks-title', text: 'Tasks and sessions' }),
        h('a', { class: 'btn sm', href: ctx.href(`/sessions?agent=${enc(agent.id)}`) }, icon('list'), 'All sessions')),
      tasks),
    agent.slug !== 'root' && h('section', { class: 'stack', 'aria-labelledby': 'agent-delete-title' },
      h('h2', { class: 'section-title', id: 'agent-delete-title', text: 'Delete' }),
      h('div', { class: 'access-toolbar' },
        h('p', { class: 'muted small', text: 'An agent that still has sessions cannot be deleted.' }),
        h('button', { type: 'button', class: 'btn btn-danger', id: 'agent-delete', onclick: () => deleteAgent(page) }, icon('trash'), 'Delete agent'))));
  loadTasks(ctx, agent, tasks);
  if (engine.kind === 'acp') loadContact(page);
}

/** When sessiond last reached the agent's ACP server, and the last call that failed. */
async function loadContact(page) {
  const { ctx, agent, body } = page;
  const contactEl = body.querySelector('#agent-last-contact');
  const errorEl = body.querySelector('#agent-last-error');
  try {
    const c = await api.get(api.agentsPath(ctx.ws, `/${enc(agent.slug)}/contact`));
    contactEl.replaceWith(h('span', { id: 'agent-last-contact' }, c.lastContactAt ? when(c.lastContactAt) : h('span', { class: 'muted', text: 'Never answered' })));
    errorEl.replaceWith(c.lastError
      ? h('span', { id: 'agent-last-error' }, h('span', { class: 'danger-text', text: c.lastError }), ' ', h('span', { class: 'muted small' }, '(', when(c.lastErrorAt), ')'))
      : h('span', { id: 'agent-last-error', class: 'muted', text: 'None' }));
  } catch (err) {
    errorEl.replaceWith(h('span', { id: 'agent-last-error', class: 'danger-text', text: api.describeError(err) }));
  }
}

async function loadTasks(ctx, agent, box) {
  try {
    const list = await ax(ctx, 'GET', `/tasks?agent_id=${enc(agent.id)}&limit=20&order_by=created_at&order_direction=desc`);
    box.replaceChildren(table('agent-tasks', ['Task', 'Status', 'Created'], list.map((t) => h('tr', { 'data-task-id': t.id },
      h('td', null, h('a', { href: ctx.href(`/s/${enc(t.id)}`), text: t.name || t.id })),
      h('td', { class: 'small mono', text: t.status + (t.status_reason ? ` · ${t.status_reason}` : '') }),
      h('td', null, when(t.created_at)))), 'No tasks or sessions yet.'));
  } catch (err) {
    box.replaceChildren(errorBox(err));
  }
}

function engineForm(page) {
  const { ctx, agent } = page;
  const name = h('input', { class: 'input', id: 'agent-name', type: 'text', value: agent.name, autocomplete: 'off', required: true });
  const engine = h('textarea', { class: 'input mono', id: 'agent-engine', rows: 8, spellcheck: 'false', value: JSON.stringify(agent.engine || {}, null, 2) });
  const error = h('p', { class: 'form-error', id: 'agent-engine-error', role: 'alert', hidden: true });
  const save = h('button', { type: 'submit', class: 'btn btn-primary', id: 'agent-save' }, 'Save');
  const form = h('form', { class: 'stack', id: 'agent-engine-form', 'aria-labelledby': 'agent-engine-title' },
    h('h2', { class: 'section-title', id: 'agent-engine-title', text: 'Engine configuration' }),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'agent-name', text: 'Name' }), name),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'agent-engine', text: 'Engine (JSON)' }), engine,
      h('span', { class: 'field-hint muted', text: '{} runs the server’s default engine. The server checks what an engine may run and call against its [policy].' })),
    error,
    h('div', null, save));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    save.disabled = true;
    try {
      const body = { name: name.value, engine: parseJson(engine.value, 'Engine') };
      const updated = await api.patch(api.agentsPath(ctx.ws, `/${enc(agent.slug)}`), body);
      toast(`Saved ${updated.name}`);
      await ctx.reloadAgents();
      ctx.navigate(`/agents/${enc(agent.slug)}/about`);
      window.dispatchEvent(new HashChangeEvent('hashchange'));
    } catch (err) {
      error.textContent = err.userMessage || err.message;
      error.hidden = false;
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

async function deleteAgent(page) {
  const { ctx, agent } = page;
  const ok = await openDialog({
    title: `Delete ${agent.name}?`,
    body: h('p', { text: `The agent “${agent.name}” and its default chat binding are removed. Its folder in the drive stays.` }),
    submitLabel: 'Delete',
    danger: true,
    submit: () => api.del(api.agentsPath(ctx.ws, `/${enc(agent.slug)}`)),
  });
  if (!ok) return;
  toast(`Deleted ${agent.name}`);
  await ctx.reloadAgents();
  ctx.navigate('/agents');
}

/** "New agent": a slug, a name and an engine, then its About page. */
export async function newAgentDialog(ctx) {
  const slug = h('input', { class: 'input mono', id: 'new-agent-slug', type: 'text', autocomplete: 'off', required: true, spellcheck: 'false', placeholder: 'research' });
  const name = h('input', { class: 'input', id: 'new-agent-name', type: 'text', autocomplete: 'off', placeholder: 'Research' });
  const engine = h('textarea', { class: 'input mono', id: 'new-agent-engine', rows: 5, spellcheck: 'false', value: '{}' });
  const made = await openDialog({
    title: 'New agent',
    body: h('div', { class: 'stack' },
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'new-agent-slug', text: 'Slug' }), slug,
        h('span', { class: 'field-hint muted', text: 'a-z, 0-9 and -; its folder is agents/<slug>.' })),
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'new-agent-name', text: 'Name (optional)' }), name),
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'new-agent-engine', text: 'Engine (JSON)' }), engine,
        h('span', { class: 'field-hint muted', text: '{} runs the server’s default engine.' }))),
    submitLabel: 'Create agent',
    submit: async () => {
      const body = { slug: slug.value.trim(), engine: parseJson(engine.value, 'Engine') };
      if (name.value.trim()) body.name = name.value.trim();
      return api.post(api.agentsPath(ctx.ws), body);
    },
  });
  if (!made) return;
  toast(`Created ${made.name}`);
  await ctx.reloadAgents();
  ctx.navigate(`/agents/${enc(made.slug)}/about`);
}

// ---------------------------------------------------------------------------------------------
// Schedules

function cadence(s) {
  if (s.cron_expression) return `${s.cron_expression} (${s.timezone || 'UTC'})`;
  const n = s.interval_seconds;
  if (n % 86400 === 0) return `every ${n / 86400} d`;
  if (n % 3600 === 0) return `every ${n / 3600} h`;
  if (n % 60 === 0) return `every ${n / 60} min`;
  return `every ${n} s`;
}

function stateBadge(s) {
  return h('span', { class: `badge sm ${s.paused ? 'badge-interrupted' : 'badge-running'} schedule-state`, text: s.paused ? 'Paused' : 'Active' });
}

function schedulePath(page, id, rest = '') {
  return `/agents/${enc(page.ext.id)}/schedules/${enc(id)}${rest}`;
}

async function act(ctx, fn, done, what) {
  try {
    await fn();
    if (what) toast(what);
  } catch (err) {
    toast(api.describeError(err), 'error');
  }
  done();
}

function schedulesSection(page) {
  const { ctx, ext, slug, body } = page;
  const box = h('div', null, h('p', { class: 'muted small', text: 'Loading…' }));
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', id: 'schedule-new' }, icon('plus'), 'New schedule');
  body.append(
    h('div', { class: 'access-toolbar' },
      h('p', { class: 'muted small', text: 'Each run opens a new task of this agent with the schedule’s message.' }),
      newBtn),
    box);

  async function load() {
    try {
      const res = await ax(ctx, 'GET', `/agents/${enc(ext.id)}/schedules?include_live=true`);
      box.replaceChildren(table('schedules-table', ['Name', 'Cadence', 'State', 'Next run', 'Runs', ''], (res.run_schedules || []).map((s) => {
        const next = (s.next_action_times || [])[0];
        return h('tr', { 'data-schedule-id': s.id },
          h('td', null, h('a', { class: 'schedule-link', href: ctx.href(`/agents/${enc(slug)}/schedules/${enc(s.id)}`), text: s.name })),
          h('td', { class: 'mono small', text: cadence(s) }),
          h('td', null, stateBadge(s)),
          h('td', null, next ? until(next) : h('span', { class: 'muted', text: '—' })),
          h('td', { class: 'num', text: String(s.num_actions_taken) }),
          h('td', { class: 'actions-cell' },
            h('button', {
              type: 'button', class: 'btn btn-ghost sm schedule-toggle', 'aria-label': `${s.paused ? 'Resume' : 'Pause'} ${s.name}`,
              onclick: () => act(ctx, () => ax(ctx, 'POST', schedulePath(page, s.id, s.paused ? '/resume' : '/pause'), {}), load, `${s.paused ? 'Resumed' : 'Paused'} ${s.name}`),
            }, s.paused ? 'Resume' : 'Pause'),
            h('button', {
              type: 'button', class: 'btn btn-ghost sm schedule-trigger', 'aria-label': `Run now: ${s.name}`,
              onclick: () => act(ctx, () => ax(ctx, 'POST', schedulePath(page, s.id, '/trigger'), {}), load, `Started a run of ${s.name}`),
            }, 'Run now')));
      }), 'No schedules yet.'));
    } catch (err) {
      box.replaceChildren(errorBox(err));
    }
  }
  newBtn.addEventListener('click', async () => {
    const made = await newScheduleDialog(page);
    if (made) ctx.navigate(`/agents/${enc(slug)}/schedules/${enc(made.id)}`);
  });
  load();
}

function timeZones() {
  try {
    return Intl.supportedValuesOf('timeZone');
  } catch {
    return ['UTC'];
  }
}

async function newScheduleDialog(page) {
  const { ctx, ext } = page;
  const name = h('input', { class: 'input mono', id: 'schedule-name', type: 'text', autocomplete: 'off', required: true, spellcheck: 'false', placeholder: 'daily-report' });
  const kindCron = h('input', { type: 'radio', name: 'schedule-kind', id: 'schedule-kind-cron', value: 'cron', checked: true });
  const kindInterval = h('input', { type: 'radio', name: 'schedule-kind', id: 'schedule-kind-interval', value: 'interval' });
  const cron = h('input', { class: 'input mono', id: 'schedule-cron', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: '0 9 * * MON-FRI' });
  const local = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  const zones = h('datalist', { id: 'schedule-zones' }, timeZones().map((z) => h('option', { value: z })));
  const zone = h('input', { class: 'input', id: 'schedule-timezone', type: 'text', list: 'schedule-zones', autocomplete: 'off', value: local });
  const interval = h('input', { class: 'input', id: 'schedule-interval', type: 'number', step: 1, placeholder: '3600' });
  const message = h('textarea', { class: 'input', id: 'schedule-message', rows: 3, required: true, placeholder: 'What the agent is asked at each run' });
  const description = h('input', { class: 'input', id: 'schedule-description', type: 'text', autocomplete: 'off' });
  const cronFields = h('div', { class: 'field-row' },
    h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'schedule-cron', text: 'Cron expression' }), cron,
      h('span', { class: 'field-hint muted', text: 'minute hour day-of-month month day-of-week' })),
    h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'schedule-timezone', text: 'Time zone (IANA)' }), zone, zones));
  const intervalFields = h('div', { class: 'field', hidden: true }, h('label', { class: 'field-label', for: 'schedule-interval', text: 'Every (seconds)' }), interval);
  const sync = () => {
    cronFields.hidden = !kindCron.checked;
    intervalFields.hidden = kindCron.checked;
  };
  kindCron.addEventListener('change', sync);
  kindInterval.addEventListener('change', sync);
  return openDialog({
    title: 'New schedule',
    body: h('div', { class: 'stack' },
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'schedule-name', text: 'Name' }), name,
        h('span', { class: 'field-hint muted', text: 'a-z, 0-9 and inner -, unique for this agent.' })),
      h('fieldset', { class: 'field scopes' }, h('legend', { class: 'field-label', text: 'Runs' }),
        h('label', { class: 'check' }, kindCron, h('span', { text: 'On a cron expression in a time zone' })),
        h('label', { class: 'check' }, kindInterval, h('span', { text: 'At an interval' }))),
      cronFields,
      intervalFields,
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'schedule-message', text: 'Message' }), message),
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'schedule-description', text: 'Description (optional)' }), description)),
    submitLabel: 'Create schedule',
    submit: () => {
      const body = { name: name.value.trim(), initial_input: { content: message.value } };
      if (kindCron.checked) {
        body.cron_expression = cron.value.trim();
        body.timezone = zone.value.trim() || 'UTC';
      } else {
        body.interval_seconds = Number(interval.value);
      }
      if (description.value.trim()) body.description = description.value.trim();
      return ax(ctx, 'POST', `/agents/${enc(ext.id)}/schedules`, body);
    },
  });
}

function scheduleSection(page, id) {
  const { ctx, ext, slug, body } = page;
  const head = h('div');
  const next = h('div');
  const runs = h('div', null, h('p', { class: 'muted small', text: 'Loading…' }));
  body.append(
    h('a', { class: 'small', href: ctx.href(`/agents/${enc(slug)}/schedules`) }, '← All schedules'),
    head,
    h('section', { class: 'stack', 'aria-labelledby': 'schedule-next-title' },
      h('h2', { class: 'section-title', id: 'schedule-next-title', text: 'Next runs' }), next),
    h('section', { class: 'stack', 'aria-labelledby': 'schedule-runs-title' },
      h('h2', { class: 'section-title', id: 'schedule-runs-title', text: 'Recent runs' }), runs));

  const path = (rest = '') => schedulePath(page, id, rest);
  const reload = () => load();

  async function load() {
    let s;
    try {
      s = await ax(ctx, 'GET', path());
    } catch (err) {
      head.replaceChildren(errorBox(err));
      return;
    }
    document.title = `${s.name} · Schedules · sessiond`;
    const button = (cls, label, fn, what, danger) => h('button', {
      type: 'button', class: `btn sm ${danger ? 'btn-danger' : ''} ${cls}`.trim(), id: cls,
      onclick: () => act(ctx, fn, reload, what),
    }, label);
    head.replaceChildren(
      h('div', { class: 'access-toolbar' },
        h('h2', { class: 'section-title', id: 'schedule-title' }, s.name, ' ', stateBadge(s)),
        h('div', { class: 'btn-row' },
          s.paused
            ? button('schedule-resume', 'Resume', () => ax(ctx, 'POST', path('/resume'), {}), `Resumed ${s.name}`)
            : button('schedule-pause', 'Pause', () => ax(ctx, 'POST', path('/pause'), {}), `Paused ${s.name}`),
          button('schedule-trigger', 'Run now', () => ax(ctx, 'POST', path('/trigger'), {}), `Started a run of ${s.name}`),
          h('button', { type: 'button', class: 'btn sm btn-danger', id: 'schedule-delete', onclick: () => deleteSchedule(s) }, icon('trash'), 'Delete'))),
      kv([
        ['Cadence', h('span', { class: 'mono', text: cadence(s) }), 'schedule-cadence'],
        ['Message', s.initial_input?.content || ''],
        s.description && ['Description', s.description],
        ['Runs so far', String(s.num_actions_taken), 'schedule-runs-count'],
        ['Last run', when(s.last_action_time)],
        s.start_at && ['Starts', exact(s.start_at)],
        s.end_at && ['Ends', exact(s.end_at)],
      ]));
    const upcoming = (s.next_action_times || []).slice(0, NEXT_SHOWN);
    const skipped = s.skipped_action_times || [];
    const skipBtn = (t, skip) => h('button', {
      type: 'button', class: `btn btn-ghost sm ${skip ? 'schedule-skip' : 'schedule-unskip'}`, 'aria-label': `${skip ? 'Skip' : 'Put back'} the run of ${fullTime(ms(t))}`,
      onclick: () => act(ctx, () => ax(ctx, 'POST', path(skip ? '/skip' : '/unskip'), { scheduled_time: t }), reload, skip ? 'Skipped that run' : 'Put that run back'),
    }, skip ? 'Skip' : 'Unskip');
    next.replaceChildren(...[
      s.paused
        ? h('p', { class: 'muted', id: 'schedule-next-none', text: 'Paused: no run is coming until it is resumed.' })
        : h('ol', { class: 'schedule-times', id: 'schedule-next' }, upcoming.length
          ? upcoming.map((t) => h('li', { class: 'schedule-line', 'data-time': t }, icon('clock'), h('span', { class: 'grow' }, exact(t), ' ', h('span', { class: 'muted small' }, '(', until(t), ')')), skipBtn(t, true)))
          : h('li', { class: 'muted empty-line', text: 'No run is coming.' })),
      skipped.length ? h('div', null,
        h('h3', { class: 'small muted', text: 'Skipped' }),
        h('ul', { class: 'schedule-times', id: 'schedule-skipped' }, skipped.map((t) => h('li', { class: 'schedule-line', 'data-time': t }, icon('xCircle'), h('span', { class: 'grow' }, exact(t)), skipBtn(t, false))))) : null].filter(Boolean));
    loadRuns(s);
  }

  async function loadRuns(s) {
    try {
      const meta = enc(JSON.stringify({ schedule_id: s.id }));
      const list = await ax(ctx, 'GET', `/tasks?agent_id=${enc(ext.id)}&task_metadata=${meta}&limit=10&order_by=created_at&order_direction=desc`);
      runs.replaceChildren(table('schedule-runs', ['Run', 'Kind', 'Status', 'Started'], list.map((t) => {
        const m = t.task_metadata || {};
        return h('tr', { 'data-task-id': t.id },
          h('td', null, h('a', { href: ctx.href(`/s/${enc(t.id)}`), text: m.display_name || t.name || t.id })),
          h('td', { class: 'small', text: m.trigger_type || '' }),
          h('td', { class: 'small mono', text: t.status }),
          h('td', null, when(t.created_at)));
      }), 'No runs yet.'));
    } catch (err) {
      runs.replaceChildren(errorBox(err));
    }
  }

  async function deleteSchedule(s) {
    if (!(await confirmDialog(`Delete ${s.name}?`, 'It stops running. The sessions it made stay.', 'Delete', true))) return;
    try {
      await ax(ctx, 'DELETE', path());
      toast(`Deleted ${s.name}`);
      ctx.navigate(`/agents/${enc(slug)}/schedules`);
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  }
  load();
}

// ---------------------------------------------------------------------------------------------
// Deployments

function deploymentsSection(page) {
  const { ctx, ext, body } = page;
  const box = h('div', null, h('p', { class: 'muted small', text: 'Loading…' }));
  const preview = h('div', { class: 'preview-box' });
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', id: 'deployment-new' }, icon('plus'), 'New deployment');
  body.append(
    h('div', { class: 'access-toolbar' },
      h('p', { class: 'muted small', text: 'A deployment is a version of the agent’s engine. Promoting one makes its engine the agent’s; a preview runs a task on it first.' }),
      newBtn),
    box,
    preview);
  const base = `/agents/${enc(ext.id)}/deployments`;

  async function load() {
    try {
      const [list, agentNow] = await Promise.all([ax(ctx, 'GET', `${base}?order_by=created_at&order_direction=desc`), agentex(ctx, page.slug)]);
      page.ext = agentNow;
      box.replaceChildren(table('deployments-table', ['Label', 'Engine', 'Created', 'Promoted', ''], list.map((d) => {
        const engine = d.registration_metadata?.engine || {};
        return h('tr', { 'data-deployment-id': d.id, class: d.is_production ? 'is-production' : '' },
          h('td', null, h('span', { class: 'mono', text: d.docker_image }), ' ', d.is_production ? h('span', { class: 'badge sm badge-running deployment-production', text: 'Production' }) : null),
          h('td', { class: 'mono small', text: [engine.kind || 'default', engine.model].filter(Boolean).join(' · ') }),
          h('td', null, when(d.created_at)),
          h('td', null, when(d.promoted_at)),
          h('td', { class: 'actions-cell' },
            h('button', { type: 'button', class: 'btn btn-ghost sm deployment-preview', 'aria-label': `Preview ${d.docker_image}`, onclick: () => previewPanel(ctx, base, d, preview) }, 'Preview'),
            !d.is_production && h('button', {
              type: 'button', class: 'btn btn-ghost sm deployment-promote', 'aria-label': `Promote ${d.docker_image}`,
              onclick: async () => {
                if (!(await confirmDialog(`Promote ${d.docker_image}?`, 'Its engine becomes the agent’s, for every new turn.', 'Promote'))) return;
                act(ctx, () => ax(ctx, 'POST', `${base}/${enc(d.id)}/promote`, {}), load, `Promoted ${d.docker_image}`);
              },
            }, 'Promote'),
            !d.is_production && h('button', {
              type: 'button', class: 'btn btn-ghost sm danger-text deployment-delete', 'aria-label': `Delete ${d.docker_image}`,
              onclick: async () => {
                if (!(await confirmDialog(`Delete ${d.docker_image}?`, 'The deployment is removed; its history stays.', 'Delete', true))) return;
                act(ctx, () => ax(ctx, 'DELETE', `${base}/${enc(d.id)}`), load, `Deleted ${d.docker_image}`);
              },
            }, 'Delete')));
      }), 'No deployments yet.'));
    } catch (err) {
      box.replaceChildren(errorBox(err));
    }
  }

  newBtn.addEventListener('click', async () => {
    const label = h('input', { class: 'input mono', id: 'deployment-label', type: 'text', autocomplete: 'off', required: true, spellcheck: 'false', placeholder: 'v2' });
    const engine = h('textarea', { class: 'input mono', id: 'deployment-engine', rows: 6, spellcheck: 'false', value: JSON.stringify(page.agent.engine || {}, null, 2) });
    const made = await openDialog({
      title: 'New deployment',
      body: h('div', { class: 'stack' },
        h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'deployment-label', text: 'Label' }), label,
          h('span', { class: 'field-hint muted', text: 'Kept as the deployment’s docker_image.' })),
        h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'deployment-engine', text: 'Engine (JSON)' }), engine,
          h('span', { class: 'field-hint muted', text: 'Checked against the server’s [policy] now and again when it is promoted.' }))),
      submitLabel: 'Create deployment',
      submit: () => ax(ctx, 'POST', base, { docker_image: label.value.trim(), registration_metadata: { engine: parseJson(engine.value, 'Engine') } }),
    });
    if (made) {
      toast(`Created ${made.docker_image}`);
      load();
    }
  });
  load();
}

/** Runs one message on a deployment without promoting it (its preview RPC), and shows the reply. */
function previewPanel(ctx, base, d, box) {
  const message = h('textarea', { class: 'input', id: 'preview-message', rows: 3, required: true });
  const error = h('p', { class: 'form-error', id: 'preview-error', role: 'alert', hidden: true });
  const out = h('div', { id: 'preview-result', 'aria-live': 'polite' });
  const run = h('button', { type: 'submit', class: 'btn btn-primary', id: 'preview-run' }, icon('play'), 'Run preview');
  const form = h('form', { class: 'stack preview-form', id: 'preview-form', 'aria-labelledby': 'preview-title' },
    h('div', { class: 'access-toolbar' },
      h('h2', { class: 'section-title', id: 'preview-title' }, 'Preview ', h('span', { class: 'mono', text: d.docker_image })),
      h('button', { type: 'button', class: 'btn btn-ghost sm', id: 'preview-close', onclick: () => box.replaceChildren() }, 'Close')),
    h('p', { class: 'muted small', text: 'Opens a task that runs on this deployment’s engine; the agent’s production engine is not changed.' }),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'preview-message', text: 'Message' }), message),
    error,
    h('div', null, run),
    out);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    run.disabled = true;
    out.replaceChildren(h('span', { class: 'spinner' }));
    try {
      const res = await ax(ctx, 'POST', `${base}/${enc(d.id)}/rpc`, {
        jsonrpc: '2.0', id: 1, method: 'message/send',
        params: { content: { type: 'text', author: 'user', content: message.value } },
      });
      if (res?.error) throw new Error(res.error.message || 'The preview failed.');
      const msgs = [res?.result].flat().filter(Boolean);
      const task = msgs.find((m) => m.task_id)?.task_id;
      out.replaceChildren(
        h('h3', { class: 'small muted', text: 'Reply' }),
        ...msgs.map((m) => h('p', { class: 'preview-reply', text: typeof m.content?.content === 'string' ? m.content.content : JSON.stringify(m.content) })),
        task ? h('a', { class: 'small', id: 'preview-task', href: ctx.href(`/s/${enc(task)}`) }, 'Open the preview’s session') : null);
    } catch (err) {
      out.replaceChildren();
      error.textContent = err.userMessage || err.message;
      error.hidden = false;
    } finally {
      run.disabled = false;
    }
  });
  box.replaceChildren(form);
  message.focus();
}
