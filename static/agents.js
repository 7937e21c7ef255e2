// Agents: the index of agents (with New agent), and each agent's home (its default chat and recent
// sessions, and a link to its management pages in agentpage.js).

import { h, add, clear, icon, iconButton, relTime } from './dom.js';
import * as api from './api.js';
import { SessionPane, bucketBadge, statusBadge, sidePanel } from './session.js';
import { newAgentDialog } from './agentpage.js';

/** What the reserved `root` agent is, in words (its name alone does not say). */
export const ROOT_AGENT_ABOUT = 'The workspace’s own agent: it works anywhere in the drive, and sessions in no other agent’s folder are its.';

async function activity(ctx) {
  const res = await api.get(api.sessionsPath(ctx.ws, '/activity?limitPerAgent=24'));
  return res.owners || [];
}

export function agentsView(ctx) {
  const grid = h('div', { class: 'agent-grid' });
  const root = h('section', { class: 'view agents-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'Agents' }), h('p', { class: 'page-sub muted', text: 'Each agent has a default chat and a folder of the workspace drive.' })),
      h('button', { type: 'button', class: 'btn btn-primary', id: 'agent-new', onclick: () => newAgentDialog(ctx) }, icon('plus'), 'New agent')),
    grid);
  grid.append(h('div', { class: 'empty-state' }, h('span', { class: 'spinner' })));

  (async () => {
    try {
      const [agents, owners] = await Promise.all([ctx.reloadAgents(), activity(ctx)]);
      const byAgent = new Map(owners.map((o) => [o.agentId, o]));
      grid.replaceChildren(...agents.map((a) => {
        const o = byAgent.get(a.id) || { sessions: [] };
        const unread = o.sessions.filter((s) => s.unread).length + (o.chat?.unread ? 1 : 0);
        const active = o.sessions.filter((s) => s.bucket !== 'done').length;
        return h('a', { class: 'agent-card', href: ctx.href(`/agents/${encodeURIComponent(a.slug)}`) },
          h('div', { class: 'agent-card-head' },
            h('span', { class: 'avatar lg', 'aria-hidden': 'true' }, icon('bot')),
            h('div', null, h('div', { class: 'agent-card-name', text: a.name }), h('div', { class: 'muted small mono', text: a.anchor || 'whole drive' }))),
          a.slug === 'root' && h('p', { class: 'agent-card-desc small', text: ROOT_AGENT_ABOUT }),
          h('p', { class: 'agent-card-chat muted', text: o.chat ? `Chat: ${o.chat.title || 'Untitled'} · ${relTime(o.chat.updatedAt)}` : 'No chat yet' }),
          h('div', { class: 'agent-card-foot' },
            h('span', { class: 'small' }, `${o.sessions.length}${o.truncated ? '+' : ''} recent`),
            active > 0 && h('span', { class: 'small' }, `${active} active`),
            unread > 0 && h('span', { class: 'small unread-text' }, h('span', { class: 'unread-dot', 'aria-hidden': 'true' }), `${unread} unread`)));
      }));
    } catch (err) {
      grid.replaceChildren(h('div', { class: 'empty-state' },
        h('div', { class: 'empty-icon' }, icon('wifiOff')),
        h('h2', { text: 'Could not load the agents' }),
        h('p', { class: 'muted', text: api.describeError(err) })));
    }
  })();
  return { el: root, destroy() {} };
}

export function agentView(ctx, slug) {
  let agent = ctx.agents.find((a) => a.slug === slug) || null;
  const titleText = h('span', { text: agent?.name || slug });
  const title = h('h1', { class: 'session-title with-avatar' }, h('span', { class: 'avatar', 'aria-hidden': 'true' }, icon('bot')), titleText);
  const sub = h('div', { class: 'session-meta' });
  const recent = h('div', { class: 'recent' });
  const aside = h('aside', { class: 'session-aside agent-aside', 'aria-label': 'Recent sessions' });
  const asideBtn = iconButton('panel', 'Show recent sessions', () => side.toggle(), 'details-toggle');
  const openLink = h('a', { class: 'btn btn-ghost sm', hidden: true, 'aria-label': 'Open the chat as a session', title: 'Open the chat as a session' }, icon('external'), h('span', { text: 'Open as session' }));

  const emptyChat = h('div', { class: 'empty-state chat-empty' },
    h('div', { class: 'empty-icon' }, icon('message')),
    h('h2', { text: `Chat with ${agent?.name || slug}` }),
    slug === 'root' && h('p', { class: 'muted', text: ROOT_AGENT_ABOUT }),
    h('p', { class: 'muted', text: 'Your first message starts this agent’s default chat. Later messages continue it.' }));

  const pane = new SessionPane({
    ctx,
    empty: emptyChat,
    placeholder: `Message ${agent?.name || slug}…`,
    uploadCwd: () => agent?.anchor || undefined,
    submit: (p, self) => send(p, self),
    onUpdate: () => onPaneUpdate(),
  });

  const root = h('section', { class: 'view session-view agent-view' },
    h('header', { class: 'session-head' },
      h('a', { class: 'icon-btn back', href: ctx.href('/agents'), 'aria-label': 'All agents', title: 'All agents' }, icon('chevronLeft')),
      title, sub,
      h('div', { class: 'session-actions' },
        openLink,
        h('a', { class: 'btn sm', id: 'agent-about-link', href: ctx.href(`/agents/${encodeURIComponent(slug)}/about`), title: 'About this agent: engine, schedules, deployments' }, icon('wrench'), h('span', { text: 'Manage' })),
        h('a', { class: 'btn sm', href: ctx.href(`/new?agent=${encodeURIComponent(slug)}`), 'aria-label': 'New session with this agent', title: 'New session with this agent' }, icon('plus'), h('span', { text: 'New session' })),
        asideBtn)),
    h('div', { class: 'session-body' }, pane.el, aside));

  const side = sidePanel(root, aside, asideBtn, 'Recent sessions', 'Show recent sessions', 'Hide recent sessions');
  side.content.append(h('section', { class: 'panel' }, h('h3', { class: 'panel-title' }, icon('list'), 'Recent sessions'), recent));

  function renderSub() {
    add(clear(sub), [
      h('span', { class: 'chip-link', title: slug === 'root' ? ROOT_AGENT_ABOUT : null }, icon('folder'), h('span', { class: 'mono', text: agent?.anchor || 'whole drive' })),
      h('span', { class: 'chip-link' }, icon('message'), pane.id ? 'Default chat' : 'No chat yet'),
      pane.detail && statusBadge(pane.detail, pane.conn)]);
  }

  let lastStatus = null;
  function onPaneUpdate() {
    renderSub();
    if (pane.id) {
      openLink.href = ctx.href(`/s/${encodeURIComponent(pane.id)}`);
      openLink.hidden = false;
    }
    const st = pane.status();
    if (lastStatus && st !== lastStatus) loadRecent();
    lastStatus = st;
  }

  async function send(p, self) {
    if (p.kind === 'note' && self.id) {
      const body = { note: p.text, clientRequestId: api.uuid() };
      if (p.images.length) body.images = p.images;
      if (p.attachments.length) body.attachments = p.attachments;
      await api.post(api.sessionPath(ctx.ws, self.id, '/note'), body);
      return;
    }
    const body = { prompt: p.text, behavior: p.behavior, clientRequestId: api.uuid() };
    if (p.tier) body.tier = p.tier;
    if (p.images.length) body.images = p.images;
    if (p.attachments.length) body.attachments = p.attachments;
    const res = await api.post(api.agentsPath(ctx.ws, `/${encodeURIComponent(slug)}/sessions/default/messages`), body);
    const sid = res.session?.sessionId || res.sessionId;
    if (sid && sid !== self.id) {
      await self.open(sid, res.session ? res : undefined);
      loadRecent();
    }
    self.scrollToEnd(true);
  }

  async function loadRecent() {
    try {
      const owners = await activity(ctx);
      const o = owners.find((x) => x.agentId === agent?.id);
      const sessions = (o?.sessions || []).filter((s) => s.id !== pane.id);
      add(clear(recent), [sessions.length
        ? h('ul', { class: 'related-list' }, sessions.map((s) => h('li', { class: s.unread ? 'unread' : '' },
          h('a', { href: ctx.href(`/s/${encodeURIComponent(s.id)}`) },
            s.unread && h('span', { class: 'unread-dot', role: 'img', 'aria-label': 'Unread' }),
            h('span', { class: 'related-title', text: s.title || 'Untitled session' })),
          h('span', { class: 'related-meta' }, bucketBadge(s.bucket, 'sm'), h('span', { class: 'muted small', text: relTime(s.updatedAt) })))))
        : h('p', { class: 'muted small', text: 'No other sessions with this agent yet.' }),
      o?.truncated ? h('a', { class: 'small', href: ctx.href(`/sessions?agent=${encodeURIComponent(agent.id)}`) }, 'See all') : null]);
    } catch (err) {
      recent.replaceChildren(h('p', { class: 'muted small', text: api.describeError(err) }));
    }
  }

  (async () => {
    try {
      if (!agent) agent = await api.get(api.agentsPath(ctx.ws, `/${encodeURIComponent(slug)}`));
      titleText.textContent = agent.name;
      document.title = `${agent.name} · sessiond`;
      emptyChat.querySelector('h2').textContent = `Chat with ${agent.name}`;
      pane.composer.textarea.placeholder = `Message ${agent.name}…`;
      renderSub();
      const res = await api.get(api.agentsPath(ctx.ws, `/${encodeURIComponent(slug)}/sessions/default`));
      if (res.session) await pane.open(res.session.id);
      loadRecent();
    } catch (err) {
      pane.showLoadError(err.code === 'agent_not_found' ? { status: 404 } : err);
      if (err.code === 'agent_not_found') {
        pane.body.querySelector('h2').textContent = 'Agent not found';
      }
    }
  })();
  renderSub();

  return {
    el: root,
    focus: () => pane.composer.focus(),
    destroy() {
      pane.destroy();
    },
  };
}
