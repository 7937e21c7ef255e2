// The sessions list: bucket tabs with counts, search, agent filter, archived view, unread
// markers, infinite scroll and cheap polling for live updates.

import { h, add, clear, icon, relTime, fullTime, debounce } from './dom.js';
import * as api from './api.js';
import { stateBadge, stateIcon } from './state.js';

const BUCKETS = ['asking', 'running', 'scheduled', 'done'];
// Tabs that filter by the server's state rather than by bucket (`state=attention|failed`).
const STATE_TABS = ['attention', 'failed'];
const TABS = ['all', 'attention', ...BUCKETS, 'failed'];
const TAB_WORDS = { all: 'All', attention: 'Needs attention', asking: 'Asking', running: 'Running', scheduled: 'Scheduled', done: 'Done', failed: 'Failed' };
const PAGE = 20;
const POLL_MS = 4000;

export function sessionRow(ctx, s) {
  const m = s.machine;
  const sub = [
    h('span', { class: 'row-agent' }, icon('bot'), s.agent?.name || 'Agent'),
    s.cwd && s.cwd !== '.' && h('span', { class: 'row-cwd mono', title: s.cwd }, icon('folder'), s.cwd),
    m && h('span', { class: 'row-job' }, icon('layers'), `${m.definitionName || 'Job'} · ${m.progress?.completed ?? 0}/${m.progress?.total ?? 0}${m.currentState ? ` · ${m.currentState}` : ''}`),
    s.createdBySessionId && h('span', { class: 'row-child' }, icon('branch'), 'Child session'),
  ];
  return h('li', { class: `session-item${s.unread ? ' unread' : ''}`, dataset: { id: s.id, bucket: s.bucket, state: s.state || 'unknown' } },
    h('a', { class: 'session-row', href: ctx.href(`/s/${encodeURIComponent(s.id)}`) },
      h('span', { class: `row-status status-${s.state || 'unknown'}`, 'aria-hidden': 'true' }, stateIcon(s.state)),
      h('span', { class: 'row-main' },
        h('span', { class: 'row-title' },
          s.unread && h('span', { class: 'unread-dot', role: 'img', 'aria-label': 'Unread' }),
          h('span', { class: 'row-title-text', text: s.title || 'Untitled session' }),
          s.titleStatus === 'generating' && h('span', { class: 'muted small', text: ' · naming…' })),
        h('span', { class: 'row-sub' }, sub)),
      h('span', { class: 'row-side' },
        stateBadge(s.state, 'sm', s.stateReason),
        h('time', { class: 'row-time', datetime: new Date(s.updatedAt).toISOString(), title: fullTime(s.updatedAt), text: relTime(s.updatedAt) }))));
}

export function listView(ctx, params) {
  const state = {
    tab: TAB_WORDS[params.get('tab')] ? params.get('tab') : 'all',
    q: params.get('q') || '',
    agent: params.get('agent') || '',
    archived: params.get('archived') === '1',
    items: [],
    cursor: null,
    loading: false,
    gen: 0,
    error: null,
    loaded: false,
  };

  const search = h('input', { type: 'search', class: 'input search-input', placeholder: 'Search sessions', 'aria-label': 'Search sessions', value: state.q });
  const agentSel = h('select', { class: 'select', 'aria-label': 'Filter by agent' },
    h('option', { value: '', text: 'All agents' }),
    ctx.agents.map((a) => h('option', { value: a.id, text: a.name, selected: a.id === state.agent })));
  const archivedBtn = h('button', { type: 'button', class: 'btn toggle', 'aria-pressed': String(state.archived), onclick: () => {
    state.archived = !state.archived;
    archivedBtn.setAttribute('aria-pressed', String(state.archived));
    reload();
  } }, icon('archive'), 'Archived');

  const tabBtns = {};
  const counts = {};
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Buckets' }, TABS.map((t) => {
    counts[t] = h('span', { class: 'count', hidden: true });
    const b = h('button', {
      type: 'button', role: 'tab', class: 'tab', id: `tab-${t}`, dataset: { tab: t }, 'aria-selected': String(t === state.tab), tabindex: t === state.tab ? 0 : -1,
      'aria-controls': 'session-list', onclick: () => selectTab(t),
    }, h('span', { text: TAB_WORDS[t] }), counts[t]);
    tabBtns[t] = b;
    return b;
  }));
  tabs.addEventListener('keydown', (e) => {
    const order = TABS;
    const i = order.indexOf(state.tab);
    let next = null;
    if (e.key === 'ArrowRight') next = order[(i + 1) % order.length];
    if (e.key === 'ArrowLeft') next = order[(i + order.length - 1) % order.length];
    if (e.key === 'Home') next = order[0];
    if (e.key === 'End') next = order[order.length - 1];
    if (next) {
      e.preventDefault();
      selectTab(next);
      tabBtns[next].focus();
    }
  });

  const banner = h('div', { class: 'banner banner-error', role: 'alert', hidden: true });
  const list = h('ul', { class: 'session-list' });
  const empty = h('div', { class: 'empty-state', hidden: true });
  const more = h('div', { class: 'list-more', 'aria-hidden': 'true' });
  // The tab panel holds the list (a list keeps its own role, so its items stay list items).
  const panel = h('div', { class: 'list-wrap', id: 'session-list', role: 'tabpanel', 'aria-labelledby': `tab-${state.tab}` }, list, empty, more);
  const root = h('section', { class: 'view list-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'Sessions' }), h('p', { class: 'page-sub muted', text: 'Every session and Job in this workspace, newest first.' })),
      h('a', { class: 'btn btn-primary', href: ctx.href('/new'), 'aria-label': 'New session' }, icon('plus'), h('span', { text: 'New session' }))),
    h('div', { class: 'toolbar' },
      h('div', { class: 'search-wrap' }, icon('search'), search),
      agentSel,
      archivedBtn),
    tabs,
    banner,
    panel);

  function syncUrl() {
    const q = new URLSearchParams();
    if (state.tab !== 'all') q.set('tab', state.tab);
    if (state.q) q.set('q', state.q);
    if (state.agent) q.set('agent', state.agent);
    if (state.archived) q.set('archived', '1');
    const qs = q.toString();
    history.replaceState(null, '', `#/w/${encodeURIComponent(ctx.ws)}/sessions${qs ? `?${qs}` : ''}`);
  }

  function query(tab, cursor, limit = PAGE) {
    const q = new URLSearchParams({ limit: String(limit), include: 'state' });
    if (STATE_TABS.includes(tab)) q.set('state', tab);
    else if (tab && tab !== 'all') q.set('bucket', tab);
    if (state.q) q.set('search', state.q);
    if (state.agent) q.set('agentId', state.agent);
    if (state.archived) q.set('archived', 'only');
    if (cursor) q.set('cursor', cursor);
    return api.sessionsPath(ctx.ws, `?${q}`);
  }

  function selectTab(t) {
    if (t === state.tab) return;
    state.tab = t;
    for (const [k, b] of Object.entries(tabBtns)) {
      b.setAttribute('aria-selected', String(k === t));
      b.tabIndex = k === t ? 0 : -1;
    }
    panel.setAttribute('aria-labelledby', `tab-${t}`);
    reload();
  }

  // Rows are kept per session and rebuilt only when what they show changed, so a poll does not
  // steal the keyboard focus from a row.
  const rows = new Map();
  function rowFor(s) {
    const key = JSON.stringify([s.title, s.titleStatus, s.bucket, s.state, s.stateReason, s.unread, s.cwd, s.agent?.name, s.machine, s.createdBySessionId, relTime(s.updatedAt)]);
    const cached = rows.get(s.id);
    if (cached && cached.key === key) return cached.el;
    const el = sessionRow(ctx, s);
    rows.set(s.id, { key, el });
    return el;
  }

  function render() {
    const els = state.items.map(rowFor);
    const keep = new Set(els);
    for (const el of [...list.children]) if (!keep.has(el)) el.remove();
    els.forEach((el, i) => {
      if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
    });
    for (const id of rows.keys()) if (!state.items.some((s) => s.id === id)) rows.delete(id);
    const none = state.loaded && state.items.length === 0 && !state.error;
    empty.hidden = !none;
    if (none) {
      const filtered = state.q || state.agent;
      add(clear(empty), [
        h('div', { class: 'empty-icon' }, icon(state.archived ? 'archive' : 'inbox')),
        h('h2', { text: filtered ? 'No matching sessions' : state.archived ? 'Nothing archived' : state.tab === 'all' ? 'No sessions yet' : `Nothing ${TAB_WORDS[state.tab].toLowerCase()}` }),
        h('p', { class: 'muted', text: filtered ? 'Try another search or agent.' : state.tab === 'all' && !state.archived ? 'Start a session to put an agent to work.' : 'Sessions show up here as their state changes.' }),
        !filtered && !state.archived && state.tab === 'all' ? h('a', { class: 'btn btn-primary', href: ctx.href('/new') }, icon('plus'), 'New session') : null]);
    }
    more.replaceChildren(state.loading && state.loaded ? h('span', { class: 'spinner sm' }) : '');
    if (!state.loaded) {
      list.replaceChildren(...Array.from({ length: 5 }, () => h('li', { class: 'session-item skeleton', 'aria-hidden': 'true' }, h('div', { class: 'sk-line' }), h('div', { class: 'sk-line short' }))));
    }
  }

  function showError(err) {
    state.error = err;
    if (!err) {
      banner.hidden = true;
      return;
    }
    banner.replaceChildren(icon(err.code === 'network' ? 'wifiOff' : 'alert'),
      h('span', { text: err.code === 'network' ? 'Cannot reach sessiond. Retrying…' : api.describeError(err) }),
      h('button', { type: 'button', class: 'btn btn-ghost sm', onclick: () => reload() }, 'Retry'));
    banner.hidden = false;
  }

  async function loadCounts() {
    await Promise.all([...BUCKETS, ...STATE_TABS].map(async (b) => {
      try {
        const page = await api.get(query(b, null, PAGE));
        const n = page.sessions.length;
        counts[b].textContent = page.nextCursor ? `${n}+` : String(n);
        counts[b].hidden = n === 0;
      } catch {
        /* the list request reports errors */
      }
    }));
  }

  async function reload() {
    syncUrl();
    const gen = ++state.gen;
    state.loading = true;
    state.loaded = false;
    state.items = [];
    state.cursor = null;
    render();
    loadCounts();
    try {
      const page = await api.get(query(state.tab, null));
      if (gen !== state.gen) return;
      state.items = page.sessions;
      state.cursor = page.nextCursor || null;
      showError(null);
    } catch (err) {
      if (gen !== state.gen) return;
      showError(err);
    } finally {
      if (gen === state.gen) {
        state.loading = false;
        state.loaded = true;
        render();
        fillViewport();
      }
    }
  }

  /** Keeps loading while the end of the list is on screen (the observer only fires on change). */
  function fillViewport() {
    requestAnimationFrame(() => {
      if (state.cursor && !state.loading && !state.error && more.getBoundingClientRect().top < window.innerHeight + 400) loadMore();
    });
  }

  async function loadMore() {
    if (state.loading || !state.cursor) return;
    const gen = state.gen;
    state.loading = true;
    render();
    try {
      const page = await api.get(query(state.tab, state.cursor));
      if (gen !== state.gen) return;
      const known = new Set(state.items.map((s) => s.id));
      state.items = state.items.concat(page.sessions.filter((s) => !known.has(s.id)));
      state.cursor = page.nextCursor || null;
    } catch (err) {
      if (gen === state.gen) showError(err);
    } finally {
      if (gen === state.gen) {
        state.loading = false;
        render();
        fillViewport();
      }
    }
  }

  /** Refreshes what is on screen (up to 100 rows) and the counts; skipped while hidden. */
  async function poll() {
    if (document.visibilityState !== 'visible' || state.loading || polling) return;
    polling = true;
    const gen = state.gen;
    try {
      const limit = Math.min(100, Math.max(PAGE, state.items.length));
      const page = await api.get(query(state.tab, null, limit));
      if (gen !== state.gen || state.loading) return;
      const head = page.sessions;
      const headIds = new Set(head.map((s) => s.id));
      // Rows past the refreshed window stay as they are (they only change on scroll).
      const tail = state.items.length > limit ? state.items.slice(limit).filter((s) => !headIds.has(s.id)) : [];
      state.items = head.concat(tail);
      if (state.items.length <= limit) state.cursor = page.nextCursor || null;
      showError(null);
      render();
      await loadCounts();
    } catch (err) {
      if (gen === state.gen) showError(err);
    } finally {
      polling = false;
    }
  }
  let polling = false;

  const onSearch = debounce(() => {
    state.q = search.value.trim().slice(0, 200);
    reload();
  }, 250);
  search.addEventListener('input', onSearch);
  search.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && search.value) {
      search.value = '';
      onSearch();
    }
  });
  agentSel.addEventListener('change', () => {
    state.agent = agentSel.value;
    reload();
  });

  const io = new IntersectionObserver((items) => {
    if (items.some((i) => i.isIntersecting)) loadMore();
  }, { rootMargin: '400px' });
  io.observe(more);
  const timer = setInterval(poll, POLL_MS);
  const onVis = () => {
    if (document.visibilityState === 'visible') poll();
  };
  document.addEventListener('visibilitychange', onVis);
  reload();

  return {
    el: root,
    destroy() {
      clearInterval(timer);
      io.disconnect();
      onSearch.cancel();
      document.removeEventListener('visibilitychange', onVis);
      state.gen++;
    },
  };
}
