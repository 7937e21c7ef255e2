// The session view: a live timeline over SSE (resumable), older history upward, the composer,
// the side panel (Job path, todos, tasks, usage, related sessions) and the session actions.

import { h, add, icon, iconButton, menuButton, clear, relTime, fullTime, fmtTokens, fmtCost, debounce, toast, openDialog, confirmDialog } from './dom.js';
import * as api from './api.js';
import { Timeline, isTerminal, todoList } from './timeline.js';
import { createComposer } from './composer.js';
import { stateBadge, stateWord } from './state.js';
import { detailPanels, inWorkspace, loadExtras } from './details.js';
import { folderHref } from './files.js';

const BUCKET_WORDS = { asking: 'Asking', running: 'Running', scheduled: 'Scheduled', done: 'Done' };
/** Why a session takes no input, by the code every API family refuses an input with. */
const CLOSED_TITLES = { budget_hit: 'The budget is spent', session_closed: 'This session was handed off', task_closed: 'The task is closed' };
/** The detail with the server's state (`state`, `stateReason`, `inputClosed`). */
const WITH_STATE = '?include=state';
const INPUTS = new Set(['prompt_submitted', 'answer_submitted']);

export function bucketBadge(bucket, extra = '') {
  return h('span', { class: `badge badge-${bucket} ${extra}`.trim() }, h('span', { class: 'badge-dot', 'aria-hidden': 'true' }), BUCKET_WORDS[bucket] || bucket);
}

/** Whether the page has lost the event stream, so that it cannot know the session's state. */
export function offline(conn) {
  return conn === 'reconnecting' || conn === 'gone';
}

/**
 * The badge of one open session: its state as the server derives it, as its details say it; or
 * Unknown while the page has lost the stream.
 */
export function statusBadge(detail, conn) {
  if (offline(conn)) return stateBadge('unknown', '', 'The connection to sessiond is lost: the state is not known until it is back.');
  // Until the server has said it (a create response's snapshot has none), no badge.
  if (!detail.state) return null;
  return stateBadge(detail.state, '', detail.stateReason);
}

/** The turn status as the latest events tell it, or null when the loaded page does not say. */
function statusFromEntries(entries) {
  for (let i = entries.length - 1; i >= 0; i--) {
    const t = entries[i].event?.type;
    if (t === 'turn_started' || INPUTS.has(t)) return 'running';
    if (isTerminal(t)) return t === 'complete' ? 'complete' : t;
  }
  return null;
}

/** Todos, tasks, usage and the follow-up queue, as the loaded events tell them. */
export function derive(entries, detail) {
  let todos = detail?.todos || null;
  let followUps = detail?.followUpQueue || null;
  const tasks = new Map();
  const usage = { tokens: 0, cost: 0, input: 0, output: 0, models: new Map(), last: null, estimated: false };
  // A `usage_estimated` notice marks the `usage` event right after it.
  let nextEstimated = false;
  for (const { event: ev } of entries) {
    if (ev?.type === 'system' && ev.metadata?.code === 'usage_estimated') {
      nextEstimated = true;
      continue;
    }
    switch (ev?.type) {
      case 'todos':
        todos = ev.todos;
        break;
      case 'follow_up_queue':
        followUps = ev.followUpQueue;
        break;
      case 'task_started':
        if (ev.task?.id) tasks.set(ev.task.id, { ...ev.task });
        break;
      case 'task_settled': {
        const s = ev.settlement || {};
        const t = tasks.get(s.id) || { id: s.id, label: `Task ${s.id}` };
        t.status = s.status;
        t.settledAt = s.settledAt;
        tasks.set(s.id, t);
        break;
      }
      case 'usage': {
        // `turnUsage` is the turn's running total; each event adds its own call.
        const u = ev.lastMessageUsage || ev.turnUsage || {};
        usage.estimated ||= nextEstimated;
        nextEstimated = false;
        usage.tokens += u.totalTokens || 0;
        usage.input += u.input || 0;
        usage.output += u.output || 0;
        usage.cost += u.cost?.total || 0;
        for (const m of ev.usageByModel || []) {
          const prev = usage.models.get(m.model) || { tokens: 0, cost: 0, billing: m.transport?.billing };
          prev.tokens += m.usage?.totalTokens || 0;
          prev.cost += m.usage?.cost?.total || 0;
          usage.models.set(m.model, prev);
        }
        usage.last = ev;
        break;
      }
      default:
    }
  }
  return { todos, followUps, tasks: [...tasks.values()], usage };
}

/**
 * A live session: timeline, stream, history and composer. Used by the session view and by the
 * agent home (the default chat).
 *
 * opts: { ctx, submit(payload) → Promise (default: message/note to this session),
 *         empty: Node shown before a session is open, onUpdate(pane) }
 */
export class SessionPane {
  constructor(opts) {
    this.opts = opts;
    this.ctx = opts.ctx;
    this.id = null;
    this.detail = null;
    this.entries = [];
    this.lastSeq = 0;
    this.olderCursor = null;
    this.readSeq = 0;
    this.es = null;
    this.closed = false;
    this.stuck = true;
    this.conn = 'idle';

    this.banner = h('div', { class: 'conn-banner', role: 'status', hidden: true });
    this.olderBtn = h('button', { type: 'button', class: 'btn btn-ghost load-older', hidden: true, onclick: () => this.loadOlder() },
      icon('refresh'), 'Load earlier messages');
    this.emptyBox = h('div', { class: 'pane-empty' }, opts.empty || null);
    this.body = h('div', { class: 'pane-body' });
    this.scroller = h('div', { class: 'scroller', tabindex: 0, 'aria-label': 'Session timeline' },
      h('div', { class: 'scroller-inner' }, this.olderBtn, this.emptyBox, this.body));
    this.jumpBtn = h('button', { type: 'button', class: 'jump', hidden: true, onclick: () => this.scrollToEnd(true) },
      icon('arrowDown'), 'Latest');
    this.composer = createComposer({
      ws: this.ctx.ws,
      placeholder: opts.placeholder || 'Message the agent…',
      kinds: ['message', 'note'],
      showBehavior: true,
      getUploadCwd: () => this.detail?.cwd || opts.uploadCwd?.(),
      onSubmit: (p) => this.submit(p),
      onInterrupt: () => this.interrupt(),
    });
    this.closedBox = h('div', { class: 'input-closed', role: 'status', hidden: true });
    this.el = h('div', { class: 'pane' }, this.banner, this.scroller, this.jumpBtn, this.closedBox, this.composer.el);
    // Files dropped anywhere on the pane go to the composer.
    const hasFiles = (e) => [...(e.dataTransfer?.types || [])].includes('Files');
    this.el.addEventListener('dragover', (e) => {
      if (hasFiles(e)) e.preventDefault();
    });
    this.el.addEventListener('drop', (e) => {
      if (!hasFiles(e) || e.defaultPrevented) return;
      e.preventDefault();
      this.composer.addFiles([...e.dataTransfer.files]);
    });
    this.composer.setKinds(['message']);

    this.scroller.addEventListener('scroll', () => this.onScroll(), { passive: true });
    this.resizeObs = new ResizeObserver(() => {
      if (this.stuck) this.scrollToEnd(false);
    });
    this.resizeObs.observe(this.body);
    this.olderObs = new IntersectionObserver((items) => {
      if (items.some((i) => i.isIntersecting)) this.loadOlder();
    }, { root: this.scroller, rootMargin: '200px 0px 0px 0px' });
    this.olderObs.observe(this.olderBtn);
    this.onVisible = () => {
      if (document.visibilityState === 'visible') this.maybeMarkRead();
    };
    document.addEventListener('visibilitychange', this.onVisible);
    // Leaving the page (reload, close) sends a read marker still waiting for its debounce.
    this.onPageHide = () => this.flushRead(true);
    window.addEventListener('pagehide', this.onPageHide);
    this.markRead = debounce(() => this.sendRead(), 500);
    this.refreshDetailSoon = debounce(() => this.refreshDetail(), 250);
  }

  /** Opens session `id`; `initial` is a CreateSessionResponse to start from (R27). */
  async open(id, initial) {
    this.stop();
    this.closed = false;
    this.id = id;
    this.entries = [];
    this.lastSeq = 0;
    this.olderCursor = null;
    this.timeline = new Timeline({
      ws: this.ctx.ws,
      sessionId: id,
      meId: this.ctx.me?.user?.id,
      agentName: 'Agent',
      sessionHref: (sid) => this.ctx.href(`/s/${encodeURIComponent(sid)}`),
      onAnswer: (text) => this.answer(text),
    });
    this.body.replaceChildren(this.timeline.el);
    this.emptyBox.hidden = true;
    this.composer.setKinds(['message', 'note']);
    this.setConn('loading');
    try {
      let page;
      if (initial && !initial.history?.nextCursor) {
        this.detail = initial.snapshot;
        page = { events: initial.history?.events || [] };
      } else {
        const [detail, hist] = await Promise.all([
          api.get(api.sessionPath(this.ctx.ws, id, WITH_STATE)),
          api.get(api.sessionPath(this.ctx.ws, id, '/history?before=0&limit=100')),
        ]);
        this.detail = detail;
        page = hist;
      }
      if (this.closed || this.id !== id) return;
      this.timeline.opts.agentName = this.detail?.agent?.name || 'Agent';
      this.entries = page.events || [];
      this.olderCursor = page.nextCursor ?? null;
      this.lastSeq = this.entries.reduce((m, e) => Math.max(m, e.seq), 0);
      this.readSeq = this.detail?.unread ? 0 : Math.max(this.lastSeq, this.detail?.lastEventSeq || 0);
      this.timeline.render(this.entries);
      this.olderBtn.hidden = this.olderCursor == null;
      this.afterChange();
      this.stuck = true;
      this.scrollToEnd(false);
      this.connect();
      // A create response's snapshot has no state: the server says it.
      if (!this.detail?.state) this.refreshDetail();
    } catch (err) {
      if (this.closed) return;
      this.setConn('idle');
      this.showLoadError(err);
    }
  }

  showLoadError(err) {
    const notFound = err?.status === 404;
    this.emptyBox.hidden = true;
    this.body.replaceChildren(h('div', { class: 'empty-state' },
      h('div', { class: 'empty-icon' }, icon(notFound ? 'inbox' : 'wifiOff')),
      h('h2', { text: notFound ? 'Session not found' : 'Could not load this session' }),
      h('p', { text: notFound ? 'It may have been deleted, or it belongs to another workspace.' : api.describeError(err) }),
      notFound
        ? h('a', { class: 'btn', href: this.ctx.href('/sessions') }, 'Back to sessions')
        : h('button', { type: 'button', class: 'btn', onclick: () => this.open(this.id) }, icon('refresh'), 'Try again')));
    this.composer.setDisabled(true);
    this.opts.onUpdate?.(this);
  }

  // -------------------------------------------------------------------------------------------
  // The stream

  connect() {
    if (this.closed || !this.id) return;
    const url = api.sessionPath(this.ctx.ws, this.id, `/events?since=${this.lastSeq}`);
    const es = new EventSource(url);
    this.es = es;
    es.onopen = () => {
      if (this.es !== es) return;
      this.retryMs = 1000;
      // The server replays the volatile tail of a running turn on every (re)connect. Text seen
      // before a lost connection stays, struck, until the server confirms or replaces it.
      if (offline(this.conn)) this.timeline.voidLive('The connection was lost while this streamed: sessiond has not confirmed it.', true);
      else this.timeline.clearLive();
      this.setConn('open');
      // What changed while the page was away (a restart ends the turn) is read afresh.
      this.refreshDetail();
    };
    es.onmessage = (m) => {
      if (this.es === es) this.onFrame(m.data);
    };
    es.onerror = () => {
      if (this.es !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        this.es = null;
        this.setConn('reconnecting');
        this.recover();
      } else {
        this.setConn('reconnecting');
      }
    };
  }

  /** The stream was refused (not a network blip): find out why, then retry with backoff. */
  async recover() {
    const delay = Math.min(this.retryMs || 1000, 15000);
    this.retryMs = delay * 2;
    try {
      await api.get(api.sessionPath(this.ctx.ws, this.id, WITH_STATE));
    } catch (err) {
      if (err.status === 404) {
        this.setConn('gone');
        return;
      }
      if (err.status === 401) return;
    }
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connect(), delay);
  }

  setConn(state) {
    this.conn = state;
    const b = this.banner;
    b.className = `conn-banner conn-${state}`;
    if (state === 'reconnecting') {
      b.replaceChildren(h('span', { class: 'spinner sm', 'aria-hidden': 'true' }),
        h('span', { text: 'Connection lost: state unknown. Reconnecting…' }));
      b.hidden = false;
    } else if (state === 'gone') {
      b.replaceChildren(icon('alert'), h('span', { text: 'This session no longer exists.' }));
      b.hidden = false;
    } else {
      b.hidden = true;
    }
    this.timeline?.setStale(offline(state));
    this.afterChange();
  }

  onFrame(data) {
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    const ev = frame?.event;
    if (!ev || typeof ev !== 'object') return;
    if (frame.seq == null) {
      if (ev.type === 'step') this.timeline.delta(ev.step);
      return;
    }
    if (frame.seq <= this.lastSeq) return;
    this.lastSeq = frame.seq;
    const entry = { seq: frame.seq, event: ev, createdAt: Date.now() };
    this.entries.push(entry);
    this.project(ev);
    // A failed attempt's streamed text is void: it stays, struck with the server's reason, while
    // the retry streams the answer afresh, until the durable answer replaces it.
    if (ev.type === 'system' && ev.metadata?.code === 'partial_text_void') this.timeline.voidLive(ev.message || 'The text streamed so far is void.');
    if (ev.type === 'system' && ev.metadata?.code === 'runner_exited') this.timeline.explainVoid(ev.message || 'sessiond stopped while this turn was running.');
    if (ev.type === 'step' && ev.step?.type === 'text') {
      this.timeline.clearLiveText();
      this.timeline.clearVoid();
    }
    if (ev.type === 'step' && ev.step?.type === 'reasoning') this.timeline.clearLiveReasoning();
    if (INPUTS.has(ev.type)) this.timeline.clearVoid();
    if (isTerminal(ev.type)) {
      this.timeline.clearLive();
      this.timeline.settleVoid();
    }
    this.timeline.append(entry);
    if (['turn_started', 'prompt_submitted', 'answer_submitted', 'state_machine', 'todos', 'follow_up_queue', 'interrupt_requested'].includes(ev.type) || isTerminal(ev.type)) {
      this.refreshDetailSoon();
    }
    if (isTerminal(ev.type)) {
      // Automatic titles are written shortly after the first turn.
      clearTimeout(this.titleTimer);
      this.titleTimer = setTimeout(() => this.refreshDetail(), 2500);
    }
    this.afterChange();
  }

  /** Applies what an event says about the status to the snapshot at once (the refresh confirms). */
  project(ev) {
    const d = this.detail;
    if (!d) return;
    const turn = { turn_started: 'running', prompt_submitted: 'running', answer_submitted: 'running', complete: 'complete', ask: 'ask', interrupted: 'interrupted', sleep: 'sleep' }[ev.type];
    if (!turn) return;
    d.turnStatus = turn;
    d.updatedAt = Date.now();
    if (!d.machine || d.machine.activity === 'idle') {
      d.bucket = { running: 'running', ask: 'asking', sleep: 'scheduled' }[turn] || 'done';
    }
  }

  async refreshDetail() {
    if (!this.id || this.closed) return;
    try {
      const d = await api.get(api.sessionPath(this.ctx.ws, this.id, WITH_STATE));
      if (this.closed || d.id !== this.id) return;
      this.detail = d;
      this.afterChange();
    } catch {
      /* the stream banner tells about connectivity */
    }
  }

  status() {
    return statusFromEntries(this.entries) || this.detail?.turnStatus || 'complete';
  }

  afterChange() {
    if (!this.timeline) return;
    const status = this.status();
    const running = status === 'running';
    const away = offline(this.conn);
    const closed = this.detail?.inputClosed || null;
    this.timeline.setWorking(running && !away);
    this.timeline.activateAsk(status === 'ask' && !away && !closed);
    this.composer.setRunning(running);
    // Controls that need the server wait for it; input waits for a session that takes it.
    this.composer.setDisabled(away || Boolean(closed));
    this.composer.setStopDisabled(away);
    this.renderClosed(closed);
    this.maybeMarkRead();
    this.opts.onUpdate?.(this);
  }

  /** Why the session takes no input, above the disabled composer (the budget can be raised). */
  renderClosed(closed) {
    const box = this.closedBox;
    const key = closed ? `${closed.code} ${closed.message}` : '';
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.hidden = !closed;
    if (!closed) {
      box.replaceChildren();
      return;
    }
    const msg = closed.message || '';
    box.dataset.code = closed.code;
    box.replaceChildren(icon(closed.code === 'budget_hit' ? 'alert' : 'archive'),
      h('div', { class: 'input-closed-text' },
        h('strong', { text: CLOSED_TITLES[closed.code] || 'This session takes no more input' }),
        h('span', { class: 'small', text: msg ? msg[0].toUpperCase() + msg.slice(1) : '' })),
      closed.code === 'budget_hit' && h('button', { type: 'button', class: 'btn btn-primary sm raise-budget', onclick: () => this.raiseBudget() }, 'Raise the budget'));
  }

  /** Changes the budget of the session (`PATCH /v2/sessions/{id}`): a raised one opens it again. */
  async raiseBudget(title = 'Raise the budget') {
    const v2 = inWorkspace(this.ctx.ws);
    const path = `/v2/sessions/${encodeURIComponent(this.id)}`;
    let record = null;
    try {
      record = await api.get(path, v2);
    } catch (err) {
      toast(api.describeError(err), 'error');
      return;
    }
    const spent = record.cost?.total ?? 0;
    // The server checks the value (and says what is wrong with it), not the browser.
    const input = h('input', { class: 'input', type: 'number', step: 'any', value: String(Math.max(spent * 2, spent + 100)), 'aria-label': 'New budget in cents', required: true });
    const res = await openDialog({
      title,
      body: [
        h('p', { class: 'muted', text: `Spent ${spent} cents of a budget of ${record.budget?.cents ?? 0} cents. A budget of 0 lifts the cap.` }),
        h('label', { class: 'field' }, h('span', { class: 'field-label', text: 'New budget (cents)' }), input),
      ],
      submitLabel: 'Save budget',
      submit: () => api.patch(path, { budget: { cents: Number(input.value) } }, v2),
    });
    if (res) {
      toast('Budget saved');
      this.refreshDetail();
    }
  }

  // -------------------------------------------------------------------------------------------
  // History upward

  async loadOlder() {
    if (this.loadingOlder || this.olderCursor == null || !this.id) return;
    this.loadingOlder = true;
    this.olderBtn.disabled = true;
    try {
      const page = await api.get(api.sessionPath(this.ctx.ws, this.id, `/history?before=${this.olderCursor}&limit=100`));
      const known = new Set(this.entries.map((e) => e.seq));
      const older = (page.events || []).filter((e) => !known.has(e.seq));
      const prevHeight = this.scroller.scrollHeight;
      const prevTop = this.scroller.scrollTop;
      this.entries = older.concat(this.entries);
      this.olderCursor = page.nextCursor ?? null;
      this.stuck = false;
      this.timeline.render(this.entries);
      this.olderBtn.hidden = this.olderCursor == null;
      this.scroller.scrollTop = this.scroller.scrollHeight - prevHeight + prevTop;
      this.afterChange();
    } catch (err) {
      toast(api.describeError(err), 'error');
    } finally {
      this.loadingOlder = false;
      this.olderBtn.disabled = false;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Scrolling and read markers

  onScroll() {
    const s = this.scroller;
    this.stuck = s.scrollTop + s.clientHeight >= s.scrollHeight - 60;
    this.jumpBtn.hidden = this.stuck;
    if (this.stuck) this.maybeMarkRead();
  }

  scrollToEnd(smooth) {
    this.scroller.scrollTo({ top: this.scroller.scrollHeight, behavior: smooth ? 'smooth' : 'auto' });
    this.stuck = true;
    this.jumpBtn.hidden = true;
  }

  maybeMarkRead() {
    if (!this.id || document.visibilityState !== 'visible' || !this.stuck) return;
    if (this.lastSeq > this.readSeq) {
      this.readPending = true;
      this.markRead();
    }
  }

  /** Sends a pending read marker now (when the view goes away). */
  flushRead(keepalive) {
    this.markRead.cancel();
    if (this.readPending) this.sendRead(keepalive, true);
  }

  async sendRead(keepalive = false, leaving = false) {
    const seq = this.lastSeq;
    this.readPending = false;
    if (!this.id || seq <= this.readSeq || (!leaving && document.visibilityState !== 'visible')) return;
    this.readSeq = seq;
    try {
      await api.put(api.sessionPath(this.ctx.ws, this.id, '/read'), { seq }, { keepalive });
      if (this.detail) this.detail.unread = false;
    } catch {
      this.readSeq = 0;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Acting

  async submit(p) {
    if (this.opts.submit) return this.opts.submit(p, this);
    const common = { clientRequestId: api.uuid() };
    if (p.images.length) common.images = p.images;
    if (p.attachments.length) common.attachments = p.attachments;
    if (p.kind === 'note') {
      await api.post(api.sessionPath(this.ctx.ws, this.id, '/note'), { note: p.text, ...common });
    } else {
      const body = { prompt: p.text, behavior: p.behavior, ...common };
      if (p.tier) body.tier = p.tier;
      await api.post(api.sessionPath(this.ctx.ws, this.id, '/messages'), body);
    }
    this.scrollToEnd(true);
  }

  async answer(text) {
    await api.post(api.sessionPath(this.ctx.ws, this.id, '/answer'), { answer: text, clientRequestId: api.uuid() });
    this.scrollToEnd(true);
  }

  async interrupt() {
    await api.request('POST', api.sessionPath(this.ctx.ws, this.id, '/interrupt'));
  }

  stop() {
    this.closed = true;
    if (this.es) this.es.close();
    this.es = null;
    clearTimeout(this.retryTimer);
    clearTimeout(this.titleTimer);
    this.markRead.cancel();
    this.refreshDetailSoon.cancel();
  }

  destroy() {
    this.flushRead(false);
    window.removeEventListener('pagehide', this.onPageHide);
    this.stop();
    this.resizeObs.disconnect();
    this.olderObs.disconnect();
    document.removeEventListener('visibilitychange', this.onVisible);
  }
}

// ---------------------------------------------------------------------------------------------
// The side panel

function panel(title, ic, ...body) {
  return h('section', { class: 'panel' }, h('h3', { class: 'panel-title' }, icon(ic), title), ...body);
}

export function machinePanel(m) {
  const p = m.progress || { completed: 0, total: m.orderedPath?.length || 0 };
  const pct = p.total ? Math.round((p.completed / p.total) * 100) : 0;
  const bar = h('div', { class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': p.total, 'aria-valuenow': p.completed, 'aria-label': 'Job progress' }, h('div', { class: 'progress-fill' }));
  bar.firstChild.style.width = `${pct}%`;
  const activity = { running: 'Running', sleeping: 'Sleeping', waiting: 'Waiting for an answer', idle: 'Idle' }[m.activity] || m.activity;
  const phaseIcon = { past: 'checkCircle', current: 'play', future: 'circle', outcome: 'layers' };
  const path = h('ol', { class: 'job-path' }, (m.orderedPath || []).map((item) => h('li', { class: `job-step phase-${item.phase}${item.terminalStatus ? ` outcome-${item.terminalStatus}` : ''}` },
    h('span', { class: 'job-icon' }, icon(item.phase === 'outcome' && item.terminalStatus === 'failed' ? 'xCircle' : phaseIcon[item.phase] || 'circle')),
    h('span', { class: 'job-name', text: item.phase === 'outcome' ? `Outcome: ${item.name}` : item.name }),
    item.kind && h('span', { class: 'tag', text: item.kind }),
    h('span', { class: 'sr-only', text: ` (${item.phase})` }))));
  return panel('Job', 'layers',
    h('div', { class: 'job-head' }, h('strong', { text: m.definitionName || 'Job' }), h('span', { class: `tag tag-${m.activity}`, text: activity })),
    h('div', { class: 'job-progress' }, bar, h('span', { class: 'muted small', text: `${p.completed} of ${p.total} states done` })),
    path,
    m.nextWakeAt && h('p', { class: 'muted small', text: `Wakes ${fullTime(m.nextWakeAt)}` }),
    m.outcome && h('p', { class: 'small', text: `Outcome: ${m.outcome}` }));
}

function usagePanel(u, partial) {
  const about = u.estimated ? '≈' : '';
  const rows = [
    ['Tokens', `${about}${fmtTokens(u.tokens)}`],
    ['Input / output', `${about}${fmtTokens(u.input)} / ${fmtTokens(u.output)}`],
    // An estimate without a price is not a cost of $0.00.
    ['Cost', u.estimated && u.cost === 0 ? 'not measured' : `${about}${fmtCost(u.cost)}`],
  ];
  const last = u.last;
  let ctxBar = null;
  if (last?.effectiveContextWindow) {
    const used = last.lastMessageUsage?.totalTokens || 0;
    const pct = Math.min(100, Math.round((used / last.effectiveContextWindow) * 100));
    ctxBar = h('div', { class: 'ctx' },
      h('div', { class: 'muted small', text: `Context window: ${fmtTokens(used)} of ${fmtTokens(last.effectiveContextWindow)} (${pct}%)` }),
      h('div', { class: 'progress', role: 'progressbar', 'aria-label': 'Context window used', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': pct }, h('div', { class: 'progress-fill' })));
    ctxBar.lastChild.firstChild.style.width = `${pct}%`;
  }
  return panel('Usage', 'sparkles',
    h('dl', { class: 'kv' }, rows.map(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })])),
    u.models.size > 0 && h('ul', { class: 'models' }, [...u.models.entries()].map(([name, m]) => h('li', null,
      h('span', { class: 'model-name', text: name }), h('span', { class: 'muted small', text: `${fmtTokens(m.tokens)} · ${fmtCost(m.cost)}${m.billing ? ` · ${m.billing}` : ''}` })))),
    ctxBar,
    u.estimated && h('p', { class: 'muted small', dataset: { kind: 'usage-estimated' }, text: 'Includes estimates made from the text (about 4 characters a token) where the engine reported no usage.' }),
    partial && h('p', { class: 'muted small', text: 'Counts the loaded part of the history.' }));
}

function tasksPanel(tasks) {
  const words = { running: 'Running', scheduled: 'Scheduled', completed: 'Completed', failed: 'Failed', stopped: 'Stopped', lost: 'Lost' };
  const sorted = [...tasks].sort((a, b) => (a.status === 'running' ? -1 : 0) - (b.status === 'running' ? -1 : 0));
  return panel('Background tasks', 'terminal', h('ul', { class: 'task-list' }, sorted.map((t) => h('li', { class: `task-item status-${t.status}` },
    t.status === 'running' ? h('span', { class: 'spinner sm', 'aria-hidden': 'true' }) : icon(t.status === 'completed' ? 'checkCircle' : 'xCircle'),
    h('span', { class: 'task-label', text: t.label || t.name || t.id }),
    h('span', { class: 'muted small', text: words[t.status] || t.status || '' })))));
}

/** Renders the side panel for a pane. */
export function renderAside(aside, pane, extra) {
  const d = pane.detail;
  clear(aside);
  if (!d) return;
  const der = derive(pane.entries, d);
  if (d.machine) aside.append(machinePanel(d.machine));
  if (der.todos?.length) aside.append(panel('Todos', 'list', todoList(der.todos)));
  if (der.tasks.length) aside.append(tasksPanel(der.tasks));
  if (der.followUps?.length) {
    aside.append(panel('Queued follow-ups', 'clock', h('ol', { class: 'queue' }, der.followUps.map((q) => h('li', { text: q.message })))));
  }
  aside.append(usagePanel(der.usage, pane.olderCursor != null));
  if (extra) aside.append(extra);
  aside.append(panel('Details', 'help', h('dl', { class: 'kv' },
    h('dt', { text: 'Status' }), h('dd', { text: offline(pane.conn) ? stateWord('unknown') : stateWord(d.state) }),
    !offline(pane.conn) && d.stateReason && [h('dt', { text: 'Why' }), h('dd', { class: 'small', text: d.stateReason })],
    h('dt', { text: 'Folder' }), h('dd', { class: 'mono' }, h('a', { href: folderHref(pane.ctx, d.cwd && d.cwd !== '.' ? d.cwd : ''), title: 'Open the folder in Files', text: (d.cwd && d.cwd !== '.') ? d.cwd : 'Drive root' })),
    h('dt', { text: 'Tier' }), h('dd', { text: d.tier || 'Auto' }),
    h('dt', { text: 'Created' }), h('dd', { text: fullTime(d.createdAt), title: String(d.createdAt) }),
    h('dt', { text: 'Updated' }), h('dd', { text: relTime(d.updatedAt) }),
    h('dt', { text: 'ID' }), h('dd', { class: 'mono small', text: d.id }))));
}

/**
 * The side panel's open/closed state: inline on wide screens, an overlay (with a close button,
 * Escape and click-outside) on narrow ones. Returns { content, toggle }.
 */
export function sidePanel(root, aside, btn, title, showLabel, hideLabel) {
  const wide = window.matchMedia('(min-width: 1180px)');
  const content = h('div', { class: 'aside-content' });
  const close = iconButton('x', `Close ${title.toLowerCase()}`, () => toggle(false, true));
  aside.append(h('div', { class: 'aside-bar' }, h('span', { class: 'aside-bar-title', text: title }), close), content);
  let open = wide.matches;
  function toggle(force, focusBack) {
    open = force ?? !open;
    root.classList.toggle('aside-open', open);
    btn.setAttribute('aria-expanded', String(open));
    btn.setAttribute('aria-label', open ? hideLabel : showLabel);
    btn.title = open ? hideLabel : showLabel;
    if (open && !wide.matches) close.focus();
    if (!open && focusBack) btn.focus();
  }
  aside.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && !wide.matches) toggle(false, true);
  });
  root.addEventListener('pointerdown', (e) => {
    if (open && !wide.matches && !aside.contains(e.target) && !btn.contains(e.target)) toggle(false);
  });
  toggle(open);
  return { content, toggle: () => toggle() };
}

// ---------------------------------------------------------------------------------------------
// The full session view

export function sessionView(ctx, id) {
  const titleEl = h('h1', { class: 'session-title', text: 'Loading…' });
  const meta = h('div', { class: 'session-meta' });
  const aside = h('aside', { class: 'session-aside', 'aria-label': 'Session details' });
  const related = h('div');
  let children = [];
  let parent = null;
  const detailsBtn = iconButton('panel', 'Show details', () => side.toggle(), 'details-toggle');
  const archiveBtn = iconButton('archive', 'Archive', () => toggleArchive());
  const more = menuButton('More actions', () => [
    { icon: 'pencil', label: 'Rename', onClick: rename },
    { icon: 'folder', label: 'Move to another folder', onClick: moveCwd },
    { icon: pane.detail?.archivedAt ? 'restore' : 'archive', label: pane.detail?.archivedAt ? 'Restore from archive' : 'Archive', onClick: toggleArchive },
    { icon: 'trash', label: 'Delete…', onClick: remove, danger: true },
  ]);
  const actions = h('div', { class: 'session-actions' },
    h('div', { class: 'actions-inline' },
      iconButton('pencil', 'Rename', () => rename()),
      iconButton('folder', 'Move to another folder', () => moveCwd()),
      archiveBtn,
      iconButton('trash', 'Delete', () => remove(), 'danger')),
    more,
    detailsBtn);
  const head = h('header', { class: 'session-head' },
    h('a', { class: 'icon-btn back', href: ctx.href('/sessions'), 'aria-label': 'All sessions', title: 'All sessions' }, icon('chevronLeft')),
    titleEl, meta, actions);

  const pane = new SessionPane({ ctx, onUpdate: () => update() });
  const root = h('section', { class: 'view session-view' }, head, h('div', { class: 'session-body' }, pane.el, aside));

  const side = sidePanel(root, aside, detailsBtn, 'Details', 'Show details', 'Hide details');

  // The `/v2` record and the AgentEx task, read again whenever the detail is.
  let extras = null;
  let extrasFor = null;
  async function refreshExtras() {
    extrasFor = pane.detail;
    const got = await loadExtras(ctx.ws, id);
    if (extrasFor !== pane.detail && extras) return;
    extras = got;
    renderAsideSoon();
  }
  const renderAsideNow = () => {
    renderAside(side.content, pane, related);
    if (!pane.detail) return;
    side.content.append(...detailPanels(ctx, pane, extras, derive(pane.entries, pane.detail), () => pane.raiseBudget('Change the budget')));
  };
  const renderAsideLater = debounce(renderAsideNow, 60);
  const renderAsideSoon = () => (side.content.firstChild ? renderAsideLater() : renderAsideNow());

  function update() {
    const d = pane.detail;
    if (!d) return;
    const title = d.title || 'Untitled session';
    titleEl.textContent = title;
    document.title = `${title} · sessiond`;
    const agentSlug = ctx.agents.find((a) => a.id === d.agent?.id)?.slug;
    add(clear(meta), [
      statusBadge(d, pane.conn),
      d.archivedAt ? h('span', { class: 'badge badge-archived' }, icon('archive'), 'Archived') : null,
      d.agent && (agentSlug
        ? h('a', { class: 'chip-link', href: ctx.href(`/agents/${encodeURIComponent(agentSlug)}`) }, icon('bot'), d.agent.name)
        : h('span', { class: 'chip-link' }, icon('bot'), d.agent.name)),
      h('button', { type: 'button', class: 'chip-link', title: 'Move to another folder', onclick: () => moveCwd() }, icon('folder'), h('span', { class: 'mono', text: (d.cwd && d.cwd !== '.') ? d.cwd : 'drive root' })),
      d.machine && h('span', { class: 'chip-link' }, icon('layers'), `${d.machine.definitionName || 'Job'} · ${d.machine.progress?.completed ?? 0}/${d.machine.progress?.total ?? 0}`),
      d.createdBySessionId && h('a', { class: 'chip-link', href: ctx.href(`/s/${encodeURIComponent(d.createdBySessionId)}`) }, icon('branch'), `Started by ${parent?.title ? `“${parent.title}”` : 'another session'}`)]);
    // Acting on the session needs the server: the buttons wait while the stream is lost.
    for (const b of actions.querySelectorAll('button')) if (b !== detailsBtn) b.disabled = offline(pane.conn);
    archiveBtn.replaceChildren(icon(d.archivedAt ? 'restore' : 'archive'));
    archiveBtn.setAttribute('aria-label', d.archivedAt ? 'Restore from archive' : 'Archive');
    archiveBtn.title = d.archivedAt ? 'Restore from archive' : 'Archive';
    renderRelated();
    renderAsideSoon();
    if (!loadedRelated) loadRelated();
    if (extrasFor !== d) refreshExtras();
  }

  let loadedRelated = false;
  async function loadRelated() {
    loadedRelated = true;
    const d = pane.detail;
    try {
      if (d.createdBySessionId && !parent) {
        parent = await api.get(api.sessionPath(ctx.ws, d.createdBySessionId)).catch(() => ({ title: null, missing: true }));
      }
      const q = new URLSearchParams({ limit: '100', include: 'state' });
      if (d.agent?.id) q.set('agentId', d.agent.id);
      const page = await api.get(api.sessionsPath(ctx.ws, `?${q}`));
      children = (page.sessions || []).filter((s) => s.createdBySessionId === id);
    } catch {
      /* optional */
    }
    update();
  }

  function renderRelated() {
    clear(related);
    const d = pane.detail;
    if (!d?.createdBySessionId && !children.length) return;
    related.append(panel('Related sessions', 'branch',
      d.createdBySessionId && h('p', { class: 'small' }, 'Started by ',
        h('a', { href: ctx.href(`/s/${encodeURIComponent(d.createdBySessionId)}`), text: parent?.missing ? 'a deleted session' : (parent?.title || 'its parent session') })),
      children.length > 0 && h('ul', { class: 'related-list' }, children.map((c) => h('li', null,
        h('a', { href: ctx.href(`/s/${encodeURIComponent(c.id)}`) }, icon('branch'), h('span', { text: c.title || 'Untitled session' })),
        stateBadge(c.state, 'sm', c.stateReason))))));
  }

  async function rename() {
    const input = h('input', { class: 'input', type: 'text', maxlength: 120, value: pane.detail?.title || '', 'aria-label': 'Title', required: true });
    const res = await openDialog({
      title: 'Rename session',
      body: h('label', { class: 'field' }, h('span', { class: 'field-label', text: 'Title' }), input),
      submitLabel: 'Rename',
      submit: async () => {
        const title = input.value.trim();
        if (!title) throw new Error('The title cannot be empty.');
        return api.patch(api.sessionPath(ctx.ws, id), { title });
      },
    });
    if (res) {
      Object.assign(pane.detail, { title: res.title, titleOrigin: res.titleOrigin });
      update();
      toast('Session renamed');
    }
  }

  async function moveCwd() {
    const input = h('input', { class: 'input mono', type: 'text', value: pane.detail?.cwd || '', placeholder: 'e.g. agents/research/project', 'aria-label': 'Folder', spellcheck: 'false', autocomplete: 'off' });
    const res = await openDialog({
      title: 'Move to another folder',
      body: [
        h('p', { class: 'muted', text: 'The agent works in this folder of the workspace drive from its next turn on.' }),
        h('label', { class: 'field' }, h('span', { class: 'field-label', text: 'Folder (relative to the drive)' }), input),
      ],
      submitLabel: 'Move',
      submit: async () => {
        const cwd = input.value.trim();
        if (!cwd) throw new Error('Enter a folder path.');
        return api.post(api.sessionPath(ctx.ws, id, '/cwd'), { cwd });
      },
    });
    if (res?.session) {
      pane.detail.cwd = res.session.cwd;
      update();
      toast(`Moved to ${res.session.cwd}`);
    }
  }

  async function toggleArchive() {
    const archived = !pane.detail?.archivedAt;
    try {
      const s = await api.put(api.sessionPath(ctx.ws, id, '/archive'), { archived });
      pane.detail.archivedAt = s.archivedAt;
      if (!s.archivedAt) delete pane.detail.archivedAt;
      update();
      toast(archived ? 'Session archived' : 'Session restored');
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  }

  async function remove() {
    const ok = await confirmDialog('Delete this session?', 'This stops the session and permanently deletes its whole timeline. It cannot be undone.', 'Delete permanently', true);
    if (!ok) return;
    try {
      await api.del(api.sessionPath(ctx.ws, id));
      toast('Session deleted');
      ctx.navigate('/sessions');
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  }

  const initial = ctx.takeCreated(id);
  pane.open(id, initial);

  return {
    el: root,
    focus: () => pane.composer.focus(),
    destroy() {
      pane.destroy();
      renderAsideLater.cancel();
    },
  };
}
