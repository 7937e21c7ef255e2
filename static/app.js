// sessiond web UI: boot, sign-in, the app shell (sidebar, workspace switcher, theme) and the
// fragment router (#/w/{ws}/...).

import { h, icon, iconButton, clear, toast } from './dom.js';
import * as api from './api.js';
import { loginPage, setupPage, fatalPage } from './auth.js';
import { listView } from './list.js';
import { sessionView } from './session.js';
import { agentsView, agentView } from './agents.js';
import { agentPageView } from './agentpage.js';
import { webhooksView } from './webhooks.js';
import { filesView } from './files.js';
import { newSessionView } from './newsession.js';
import { accessView, isOwner } from './access.js';
import { overviewView } from './overview.js';
import { resetPage } from './reset.js';

const app = document.getElementById('app');
const THEMES = ['system', 'light', 'dark'];
const WS_KEY = 'sessiond.ws';

const state = {
  me: null,
  ws: null,
  agents: [],
  view: null,
  created: new Map(),
  shell: null,
};

// ---------------------------------------------------------------------------------------------
// Theme

function currentTheme() {
  try {
    return localStorage.getItem('sessiond.theme') || 'system';
  } catch {
    return 'system';
  }
}

// Saves the choice; theme.js (loaded first) resolves it, with the system's preference for 'system'.
function applyTheme(t) {
  try {
    if (t === 'system') localStorage.removeItem('sessiond.theme');
    else localStorage.setItem('sessiond.theme', t);
  } catch {
    /* not persisted: the choice still applies to this page */
  }
  document.dispatchEvent(new CustomEvent('sessiond-theme', { detail: t }));
}

function themeButton() {
  const btn = h('button', { type: 'button', class: 'icon-btn theme-btn' });
  const paint = () => {
    const t = currentTheme();
    const next = THEMES[(THEMES.indexOf(t) + 1) % THEMES.length];
    btn.replaceChildren(icon({ system: 'monitor', light: 'sun', dark: 'moon' }[t]));
    const label = `Theme: ${t}. Switch to ${next}`;
    btn.setAttribute('aria-label', label);
    btn.title = label;
  };
  btn.addEventListener('click', () => {
    const t = currentTheme();
    applyTheme(THEMES[(THEMES.indexOf(t) + 1) % THEMES.length]);
    for (const b of document.querySelectorAll('.theme-btn')) b.dispatchEvent(new Event('repaint'));
  });
  btn.addEventListener('repaint', paint);
  paint();
  return btn;
}

// ---------------------------------------------------------------------------------------------
// Boot and sign-in

async function boot() {
  clear(app).append(h('div', { class: 'boot', role: 'status', 'aria-label': 'Loading sessiond' }, h('div', { class: 'spinner' })));
  // A password link is for whoever holds it, signed in here or not.
  if (location.pathname === '/reset') return showSignIn();
  let me;
  try {
    me = await api.get('/auth/me', { quiet401: true });
  } catch (err) {
    if (err.status === 401) return showSignIn();
    clear(app).append(fatalPage(err, boot));
    return;
  }
  if (location.pathname !== '/') {
    history.replaceState(null, '', `/${location.hash.startsWith('#/') ? location.hash : ''}`);
  }
  startApp(me);
}

async function showSignIn(notice) {
  stopApp();
  const status = await api.get('/auth/status').catch(() => null);
  const signedIn = (me) => {
    const next = sessionStorage.getItem('sessiond.next') || '';
    sessionStorage.removeItem('sessiond.next');
    history.replaceState(null, '', `/${next.startsWith('#/') ? next : ''}`);
    startApp(me);
  };
  if (location.pathname === '/reset') {
    const token = decodeURIComponent(location.hash.replace(/^#/, ''));
    document.title = 'Choose a password · sessiond';
    clear(app).append(resetPage({
      token,
      onDone: (notice) => {
        history.replaceState(null, '', '/login');
        showSignIn(notice);
      },
    }));
    return;
  }
  if (location.pathname === '/setup') {
    const token = decodeURIComponent(location.hash.replace(/^#/, ''));
    document.title = 'Set up · sessiond';
    clear(app).append(setupPage({
      token,
      status,
      onSignedIn: signedIn,
      onLogin: () => {
        history.replaceState(null, '', '/login');
        showSignIn();
      },
    }));
    return;
  }
  if (location.hash.startsWith('#/')) sessionStorage.setItem('sessiond.next', location.hash);
  if (location.pathname !== '/login') history.replaceState(null, '', '/login');
  document.title = 'Sign in · sessiond';
  clear(app).append(loginPage({ status, onSignedIn: signedIn, notice }));
}

api.onUnauthorized(() => {
  if (!state.me) return;
  if (location.hash.startsWith('#/')) sessionStorage.setItem('sessiond.next', location.hash);
  showSignIn('Your session ended. Sign in again.');
});

async function logout() {
  try {
    await api.post('/auth/logout', {});
  } catch {
    /* signed out anyway from the page's point of view */
  }
  state.me = null;
  sessionStorage.removeItem('sessiond.next');
  history.replaceState(null, '', '/login');
  showSignIn();
}

// ---------------------------------------------------------------------------------------------
// The app

function stopApp() {
  if (state.view) state.view.destroy();
  state.view = null;
  state.me = null;
  state.shell = null;
  window.removeEventListener('hashchange', route);
}

function startApp(me) {
  state.me = me;
  const spaces = me.workspaces || [];
  if (!spaces.length) {
    clear(app).append(h('main', { class: 'auth-page' }, h('div', { class: 'auth-card center' },
      h('h1', { text: 'No workspace' }),
      h('p', { class: 'muted', text: 'Your account is not a member of any workspace yet.' }),
      h('button', { type: 'button', class: 'btn', onclick: logout }, icon('logout'), 'Sign out'))));
    return;
  }
  buildShell();
  window.addEventListener('hashchange', route);
  route();
}

function wsHref(ws, path) {
  return `#/w/${encodeURIComponent(ws)}${path}`;
}

function buildShell() {
  const wsSelect = h('select', { class: 'select ws-select', 'aria-label': 'Workspace', id: 'ws-select' },
    state.me.workspaces.map((w) => h('option', { value: w.slug, text: w.slug })));
  wsSelect.addEventListener('change', () => {
    location.hash = wsHref(wsSelect.value, '/overview');
  });
  const nav = h('nav', { class: 'nav', 'aria-label': 'Main' });
  const agentNav = h('div', { class: 'nav-agents' });
  const sidebar = h('aside', { class: 'sidebar', id: 'sidebar', 'aria-label': 'Navigation' },
    h('div', { class: 'sidebar-top' },
      h('a', { class: 'brand', href: '#/', 'aria-label': 'sessiond home' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, icon('terminal')), h('span', { text: 'sessiond' })),
      iconButton('x', 'Close menu', () => setDrawer(false), 'drawer-close')),
    h('a', { class: 'btn btn-primary btn-block new-btn', id: 'nav-new' }, icon('plus'), h('span', { text: 'New session' })),
    nav,
    h('div', { class: 'nav-section', text: 'Agents' }),
    agentNav,
    h('div', { class: 'sidebar-foot' },
      h('label', { class: 'field compact' }, h('span', { class: 'field-label', text: 'Workspace' }), wsSelect),
      h('div', { class: 'user-row' },
        h('span', { class: 'avatar sm', 'aria-hidden': 'true' }, icon('user')),
        h('span', { class: 'user-email', title: state.me.user?.email || '', text: state.me.user?.email || 'API key' }),
        themeButton(),
        iconButton('logout', 'Sign out', logout))));
  const scrim = h('div', { class: 'scrim', onclick: () => setDrawer(false) });
  const menuBtn = iconButton('menu', 'Open menu', () => setDrawer(true), 'menu-btn');
  menuBtn.setAttribute('aria-controls', 'sidebar');
  menuBtn.setAttribute('aria-expanded', 'false');
  const topbar = h('header', { class: 'topbar' }, menuBtn,
    h('a', { class: 'brand', href: '#/' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, icon('terminal')), h('span', { text: 'sessiond' })),
    themeButton());
  const main = h('main', { class: 'main', id: 'main', tabindex: -1 });
  const shellEl = h('div', { class: 'shell' }, h('a', { class: 'skip', href: '#main', onclick: (e) => {
    e.preventDefault();
    main.focus();
  } }, 'Skip to content'), sidebar, scrim, h('div', { class: 'main-col' }, topbar, main));
  clear(app).append(shellEl);

  function setDrawer(open) {
    shellEl.classList.toggle('drawer-open', open);
    menuBtn.setAttribute('aria-expanded', String(open));
    if (open) sidebar.querySelector('a, button')?.focus();
  }
  sidebar.addEventListener('click', (e) => {
    if (e.target.closest('a')) setDrawer(false);
  });
  shellEl.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && shellEl.classList.contains('drawer-open')) {
      setDrawer(false);
      menuBtn.focus();
    }
  });
  state.shell = { el: shellEl, main, nav, agentNav, wsSelect, newBtn: sidebar.querySelector('#nav-new') };
}

function renderNav(routeName, slug) {
  const { nav, agentNav, wsSelect, newBtn } = state.shell;
  wsSelect.value = state.ws;
  newBtn.href = wsHref(state.ws, '/new');
  const item = (href, ic, label, active) => h('a', { class: `nav-item${active ? ' active' : ''}`, href, 'aria-current': active ? 'page' : null }, icon(ic), h('span', { text: label }));
  nav.replaceChildren(...[
    item(wsHref(state.ws, '/overview'), 'layers', 'Overview', routeName === 'overview'),
    item(wsHref(state.ws, '/sessions'), 'inbox', 'Sessions', routeName === 'list' || routeName === 'session'),
    item(wsHref(state.ws, '/agents'), 'bot', 'All agents', routeName === 'agents'),
    item(wsHref(state.ws, '/files'), 'folder', 'Files', routeName === 'files'),
    item(wsHref(state.ws, '/webhooks'), 'send', 'Webhooks', routeName === 'webhooks'),
    isOwner(state.me, state.ws) && item(wsHref(state.ws, '/access/keys'), 'user', 'Access', routeName === 'access'),
  ].filter(Boolean));
  agentNav.replaceChildren(...state.agents.map((a) => item(wsHref(state.ws, `/agents/${encodeURIComponent(a.slug)}`), 'message', a.name, (routeName === 'agent' || routeName === 'agentPage') && slug === a.slug)));
}

async function loadAgents() {
  try {
    const res = await api.get(api.agentsPath(state.ws));
    state.agents = res.agents || [];
  } catch (err) {
    if (err.status !== 401) toast(api.describeError(err), 'error');
  }
  return state.agents;
}

function parseHash() {
  const raw = location.hash.replace(/^#/, '');
  const [pathPart, query = ''] = raw.split('?');
  const parts = pathPart.split('/').filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  return { parts, params: new URLSearchParams(query) };
}

function preferredWs() {
  const spaces = state.me.workspaces.map((w) => w.slug);
  let saved = null;
  try {
    saved = localStorage.getItem(WS_KEY);
  } catch {
    /* ignore */
  }
  return spaces.includes(saved) ? saved : spaces.includes('default') ? 'default' : spaces[0];
}

async function route() {
  if (!state.me || !state.shell) return;
  const { parts, params } = parseHash();
  const spaces = state.me.workspaces.map((w) => w.slug);
  if (parts[0] !== 'w' || !spaces.includes(parts[1])) {
    history.replaceState(null, '', `/${wsHref(preferredWs(), '/overview')}`);
    return route();
  }
  const ws = parts[1];
  const rest = parts.slice(2);
  if (ws !== state.ws) {
    state.ws = ws;
    try {
      localStorage.setItem(WS_KEY, ws);
    } catch {
      /* ignore */
    }
    state.agents = [];
    await loadAgents();
    if (!state.me || state.ws !== ws) return;
  }
  let name = 'list';
  let arg = null;
  if (rest[0] === 's' && rest[1]) [name, arg] = ['session', rest[1]];
  else if (rest[0] === 'agents' && rest[1] && rest[2]) [name, arg] = ['agentPage', rest[1]];
  else if (rest[0] === 'agents' && rest[1]) [name, arg] = ['agent', rest[1]];
  else if (rest[0] === 'agents') name = 'agents';
  else if (rest[0] === 'new') name = 'new';
  else if (rest[0] === 'webhooks') name = 'webhooks';
  else if (rest[0] === 'files') [name, arg] = ['files', rest.slice(1).join('/')];
  else if (rest[0] === 'overview') name = 'overview';
  else if (rest[0] === 'access') [name, arg] = ['access', rest[1] || 'keys'];
  else if (rest[0] !== 'sessions' && rest.length) {
    history.replaceState(null, '', `/${wsHref(ws, '/sessions')}`);
  }

  if (state.view) state.view.destroy();
  const ctx = makeCtx();
  const view = {
    list: () => listView(ctx, params),
    session: () => sessionView(ctx, arg),
    agents: () => agentsView(ctx),
    agent: () => agentView(ctx, arg),
    agentPage: () => agentPageView(ctx, arg, rest[2], rest[3]),
    new: () => newSessionView(ctx, params),
    webhooks: () => webhooksView(ctx),
    files: () => filesView(ctx, arg, params),
    overview: () => overviewView(ctx),
    access: () => accessView(ctx, arg),
  }[name]();
  state.view = view;
  const titles = { list: 'Sessions', agents: 'Agents', new: 'New session', webhooks: 'Webhooks', files: 'Files', overview: 'Overview', access: 'Access' };
  document.title = titles[name] ? `${titles[name]} · sessiond` : 'sessiond';
  const main = state.shell.main;
  main.className = `main main-${name}`;
  main.replaceChildren(view.el);
  main.scrollTop = 0;
  renderNav(name, arg);
  if (view.focus && name !== 'session' && name !== 'agent') view.focus();
}

function makeCtx() {
  const ws = state.ws;
  return {
    ws,
    me: state.me,
    agents: state.agents,
    href: (path) => wsHref(ws, path),
    navigate: (path) => {
      location.hash = wsHref(ws, path);
    },
    reloadAgents: async () => {
      await loadAgents();
      renderNav('agents');
      return state.agents;
    },
    reloadMe: async () => {
      state.me = await api.get('/auth/me');
      const { wsSelect } = state.shell;
      wsSelect.replaceChildren(...state.me.workspaces.map((w) => h('option', { value: w.slug, text: w.slug })));
      wsSelect.value = state.ws;
      return state.me;
    },
    rememberCreated: (id, res) => state.created.set(id, res),
    takeCreated: (id) => {
      const res = state.created.get(id);
      state.created.delete(id);
      return res;
    },
  };
}

boot();
