// Overview: the landing page of a workspace — what runs now, what needs someone (asking, failed,
// stalled, over budget), what each agent
// spent today and over the last seven days (the viewer's own days), and which schedules fire next.
// Everything comes from read routes: the sessions list, /usage, and the agents' schedules.

import { h, icon, fullTime, fmtCost } from './dom.js';
import * as api from './api.js';
import { sessionRow } from './list.js';

const POLL_MS = 5000;
const SHOWN = 8;

function card(title, id, content) {
  return h('section', { class: 'card overview-card', id, 'aria-labelledby': `${id}-title` },
    h('h2', { class: 'card-title', id: `${id}-title`, text: title }), content);
}

/** How soon a future moment is, in words. */
function untilTime(at) {
  const m = Math.round((at - Date.now()) / 60000);
  if (m < 1) return 'in under a minute';
  if (m < 60) return `in ${m} min`;
  const hrs = Math.round(m / 60);
  if (hrs < 48) return `in ${hrs} h`;
  return `in ${Math.round(hrs / 24)} d`;
}

function startOfDay(daysAgo) {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  d.setDate(d.getDate() - daysAgo);
  return d.toISOString();
}

export function overviewView(ctx) {
  const running = h('ul', { class: 'session-list', id: 'overview-running' });
  const attention = h('ul', { class: 'session-list', id: 'overview-attention' });
  const costBody = h('tbody');
  const schedules = h('ul', { class: 'plain overview-schedules', id: 'overview-schedules' });
  const banner = h('div', { class: 'banner banner-error', role: 'alert', hidden: true });
  const root = h('section', { class: 'view overview-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'Overview' }), h('p', { class: 'page-sub muted', text: `Workspace ${ctx.ws} at a glance.` })),
      h('a', { class: 'btn btn-primary', href: ctx.href('/new') }, icon('plus'), 'New session')),
    banner,
    h('div', { class: 'overview-grid' },
      card('Running now', 'overview-running-card', running),
      card('Needs attention', 'overview-attention-card', attention),
      card('Cost per agent', 'overview-cost-card', h('div', { class: 'table-wrap' }, h('table', { class: 'access-table', id: 'overview-cost' },
        h('thead', null, h('tr', null, h('th', { scope: 'col', text: 'Agent' }), h('th', { scope: 'col', class: 'num', text: 'Today' }), h('th', { scope: 'col', class: 'num', text: 'Last 7 days' }), h('th', { scope: 'col', class: 'num', text: 'Turns (7 days)' }))),
        costBody))),
      card('Schedules due next', 'overview-schedules-card', schedules)));

  let stopped = false;
  let timer = null;

  function sessions(list, items, none, more) {
    list.replaceChildren(...(items.length
      ? items.slice(0, SHOWN).map((s) => sessionRow(ctx, s))
      : [h('li', { class: 'muted empty-line', text: none })]));
    if (items.length > SHOWN || more) list.append(h('li', { class: 'more-line' }, h('a', { href: more, text: 'See all' })));
  }

  // Needs attention is the server's `attention` state: a question, a failed turn (a stalled one
  // among them: the stall guard ends it failed) or a spent budget.
  async function loadSessions() {
    const q = (filter) => api.get(api.sessionsPath(ctx.ws, `?${filter}&include=state&limit=${SHOWN + 1}`));
    const [run, need] = await Promise.all([q('bucket=running'), q('state=attention')]);
    sessions(running, run.sessions || [], 'Nothing is running.', (run.sessions || []).length > SHOWN && ctx.href('/sessions?tab=running'));
    sessions(attention, need.sessions || [], 'Nothing waits for you.', (need.sessions || []).length > SHOWN && ctx.href('/sessions?tab=attention'));
  }

  async function loadCost() {
    const path = (from) => `/v1/ws/${encodeURIComponent(ctx.ws)}/usage?from=${encodeURIComponent(from)}`;
    const [today, week] = await Promise.all([api.get(path(startOfDay(0))), api.get(path(startOfDay(6)))]);
    const byId = new Map(today.agents.map((a) => [a.agentId, a]));
    const rows = week.agents.slice().sort((a, b) => b.cents - a.cents || a.name.localeCompare(b.name));
    costBody.replaceChildren(...rows.map((a) => h('tr', { 'data-agent': a.agentSlug },
      h('th', { scope: 'row' }, h('a', { href: ctx.href(`/agents/${encodeURIComponent(a.agentSlug)}`), text: a.name })),
      h('td', { class: 'num cost-today', text: fmtCost((byId.get(a.agentId)?.cents || 0) / 100) }),
      h('td', { class: 'num cost-week', text: fmtCost(a.cents / 100) }),
      h('td', { class: 'num', text: String(a.turns) }))));
  }

  async function loadSchedules() {
    const agents = ctx.agents.length ? ctx.agents : await ctx.reloadAgents();
    const lists = await Promise.all(agents.map((a) => api.get(`/agentex/agents/${encodeURIComponent(a.id)}/schedules?include_live=true`, { headers: { 'X-Sessiond-Workspace': ctx.ws } })
      .then((r) => (r.run_schedules || []).map((s) => ({ ...s, agent: a })))
      .catch(() => [])));
    const due = lists.flat()
      .filter((s) => !s.paused && (s.next_action_times || []).length)
      .map((s) => ({ s, at: Date.parse(s.next_action_times[0]) }))
      .sort((x, y) => x.at - y.at)
      .slice(0, SHOWN);
    schedules.replaceChildren(...(due.length
      ? due.map(({ s, at }) => h('li', { class: 'schedule-line' },
        icon('clock'),
        h('span', { class: 'grow' }, h('strong', { text: s.name }), h('span', { class: 'muted', text: ` · ${s.agent.name}` })),
        h('time', { datetime: new Date(at).toISOString(), title: fullTime(at), text: untilTime(at) })))
      : [h('li', { class: 'muted empty-line', text: 'No schedule is due.' })]));
  }

  async function refresh() {
    try {
      await Promise.all([loadSessions(), loadCost(), loadSchedules()]);
      banner.hidden = true;
    } catch (err) {
      banner.textContent = api.describeError(err);
      banner.hidden = false;
    }
    if (!stopped) timer = setTimeout(refresh, POLL_MS);
  }
  refresh();
  return {
    el: root,
    focus: () => {},
    destroy() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
