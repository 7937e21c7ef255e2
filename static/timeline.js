// Renders a session's timeline: durable events (from history and the stream) plus the volatile
// text being streamed right now. Untrusted text goes in as text nodes; agent Markdown goes through
// the escaping renderer in markdown.js.

import { h, icon, clockTime, fullTime, fmtBytes, fmtTokens, fmtCost } from './dom.js';
import { renderMarkdown } from './markdown.js';
import { sessionPath } from './api.js';

const TERMINALS = new Set(['complete', 'ask', 'interrupted', 'sleep']);
const IMAGE_MIME = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
const TASK_TAIL = 8000;

export function isTerminal(type) {
  return TERMINALS.has(type);
}

/** Markdown into a fresh element. */
export function markdownEl(text, cls = 'md') {
  const el = h('div', { class: cls });
  el.innerHTML = renderMarkdown(text);
  return el;
}

function pretty(value) {
  if (value === undefined) return '';
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

export class Timeline {
  /**
   * opts: { ws, sessionId, meId, agentName, sessionHref(id), onAnswer(text) → Promise }
   */
  constructor(opts) {
    this.opts = opts;
    this.el = h('div', { class: 'timeline', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'off' });
    this.list = h('div', { class: 'tl-items' });
    this.liveBox = h('div', { class: 'tl-live' });
    this.el.append(this.list, this.liveBox);
    this.liveText = '';
    this.liveReasoning = '';
    // Streamed text that is not (or not yet) part of the answer, shown struck with the reason
    // until a durable result replaces it.
    this.voidText = '';
    this.voidReason = '';
    this.working = false;
    this.liveRaf = 0;
    this.reset();
  }

  reset() {
    this.tools = new Map();
    this.tasks = new Map();
    this.asks = [];
    this.needHeader = true;
    this.usage = null;
    // The next `usage` event holds estimated counts (a `usage_estimated` notice came first), and
    // whether any usage of the current turn was estimated.
    this.nextUsageEstimated = false;
    this.usageEstimated = false;
    this.machineState = undefined;
  }

  /** Replaces everything with `entries` (ascending seq). */
  render(entries) {
    this.list.replaceChildren();
    this.reset();
    const frag = document.createDocumentFragment();
    for (const e of entries) this.add(frag, e);
    this.list.append(frag);
  }

  append(entry) {
    this.add(this.list, entry);
  }

  // -------------------------------------------------------------------------------------------
  // Volatile text

  delta(step) {
    if (!step) return;
    if (step.type === 'text_delta' && typeof step.delta === 'string') this.liveText += step.delta;
    else if (step.type === 'reasoning_delta' && typeof step.delta === 'string') this.liveReasoning += step.delta;
    else return;
    if (this.voidUnconfirmed && this.voidText && this.liveText.startsWith(this.voidText)) this.clearVoid();
    this.paintSoon();
  }

  clearLiveText() {
    if (!this.liveText) return;
    this.liveText = '';
    this.paintSoon();
  }

  clearLiveReasoning() {
    if (!this.liveReasoning) return;
    this.liveReasoning = '';
    this.paintSoon();
  }

  clearLive() {
    this.liveText = '';
    this.liveReasoning = '';
    this.paintSoon();
  }

  /**
   * Marks the live text void (`reason` says why): it stays on screen, struck, until
   * [`clearVoid`] (a durable `text` step replaced it) or [`settleVoid`] (the turn ended).
   */
  voidLive(reason, unconfirmed = false) {
    if (this.liveText) this.voidText = this.liveText;
    if (this.voidText) this.voidReason = reason;
    // Text the page only lost sight of is confirmed when the server streams it again.
    this.voidUnconfirmed = unconfirmed;
    this.liveText = '';
    this.liveReasoning = '';
    this.paintSoon();
  }

  /** A better reason for the void text there is (a restart's notice), if any is shown. */
  explainVoid(reason) {
    if (!this.voidText) return;
    this.voidReason = reason;
    this.paintSoon();
  }

  /** While the stream is lost the live text is dimmed: the page cannot vouch for it. */
  setStale(on) {
    this.liveBox.classList.toggle('stale', on);
  }

  clearVoid() {
    if (!this.voidText) return;
    this.voidText = '';
    this.voidReason = '';
    this.paintSoon();
  }

  /** The turn ended without replacing the void text: it stays in the timeline, struck. */
  settleVoid() {
    if (!this.voidText) return;
    this.header(this.list);
    this.list.append(this.voidEl());
    this.clearVoid();
  }

  voidEl() {
    return h('div', { class: 'msg msg-agent void', dataset: { kind: 'void-text' } },
      h('p', { class: 'void-reason small', dataset: { kind: 'void-reason' } }, icon('alert'), h('span', { text: this.voidReason })),
      h('del', { class: 'void-body', text: this.voidText }));
  }

  setWorking(on) {
    if (this.working === on) return;
    this.working = on;
    this.paintSoon();
  }

  paintSoon() {
    if (this.liveRaf) return;
    // A timer rather than requestAnimationFrame: it also runs in background tabs (throttled),
    // so a tab brought back to the front never shows stale text.
    this.liveRaf = setTimeout(() => {
      this.liveRaf = 0;
      this.paintLive();
    }, 16);
  }

  paintLive() {
    const box = this.liveBox;
    box.replaceChildren();
    const hasText = this.liveText.length > 0;
    const hasReasoning = this.liveReasoning.length > 0;
    const hasVoid = this.voidText.length > 0;
    if ((hasText || hasReasoning || hasVoid) && this.needHeader) box.append(this.agentHeader());
    if (hasVoid) box.append(this.voidEl());
    if (hasText || hasReasoning) {
      if (hasReasoning) {
        box.append(h('details', { class: 'reasoning live', open: true },
          h('summary', null, icon('sparkles'), h('span', { text: 'Thinking…' })),
          h('div', { class: 'reasoning-text', text: this.liveReasoning })));
      }
      if (hasText) {
        const body = markdownEl(this.liveText);
        const last = body.lastElementChild;
        (last && last.tagName === 'P' ? last : body).append(h('span', { class: 'caret', 'aria-hidden': 'true' }));
        box.append(h('div', { class: 'msg msg-agent live', dataset: { kind: 'live-text' } }, body));
      }
    } else if (this.working) {
      box.append(h('div', { class: 'working', role: 'status' },
        h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')),
        h('span', { text: 'Working…' })));
    }
  }

  // -------------------------------------------------------------------------------------------
  // Durable events

  add(parent, entry) {
    const ev = entry.event || {};
    const at = entry.createdAt || Date.now();
    const seq = entry.seq;
    switch (ev.type) {
      case 'session_created':
        parent.append(this.divider(`Session started ${fullTime(at)}`));
        break;
      case 'prompt_submitted':
        parent.append(this.input('prompt', ev.prompt, ev, at, seq));
        this.needHeader = true;
        break;
      case 'note_submitted':
        parent.append(this.input('note', ev.note, ev, at, seq));
        break;
      case 'answer_submitted':
        this.closeAsks('Answered');
        parent.append(this.input('answer', ev.answer, ev, at, seq));
        this.needHeader = true;
        break;
      case 'interrupt_requested':
        parent.append(this.line('pause', 'Interrupt requested', 'muted'));
        break;
      case 'agent_message':
        this.header(parent);
        parent.append(h('div', { class: 'msg msg-agent', dataset: { kind: 'agent-message', seq } }, markdownEl(ev.message)));
        break;
      case 'tier_clamped':
        parent.append(this.line('layers', `Tier lowered from ${ev.requestedTier} to ${ev.effectiveTier}`, 'muted'));
        break;
      case 'turn_started':
        break;
      case 'step':
        this.step(parent, ev.step || {}, seq, ev.origin);
        break;
      case 'todos':
        this.header(parent);
        parent.append(this.todosCard(ev.todos || []));
        break;
      case 'task_started':
        this.header(parent);
        this.taskCard(parent, ev.task || {});
        break;
      case 'task_output': {
        const t = this.taskCard(parent, { id: ev.taskId });
        t.output = (t.output + (ev.chunk || '')).slice(-TASK_TAIL);
        t.pre.textContent = t.output;
        t.pre.hidden = false;
        break;
      }
      case 'task_settled': {
        const s = ev.settlement || {};
        const t = this.taskCard(parent, { id: s.id });
        this.setTaskStatus(t, s.status, s);
        break;
      }
      case 'state_machine': {
        const sm = ev.stateMachine || {};
        const cur = sm.terminal ? `finished (${sm.terminal.status || 'done'})` : sm.currentState;
        if (cur && cur !== this.machineState) {
          parent.append(this.line('layers', `Job “${sm.definition?.name || 'job'}”: ${sm.terminal ? cur : `now in state “${cur}”`}`, 'muted'));
        }
        this.machineState = cur;
        break;
      }
      case 'heartbeat':
      case 'follow_up_queue':
        break;
      case 'usage':
        this.usage = ev;
        this.usageEstimated ||= this.nextUsageEstimated;
        this.nextUsageEstimated = false;
        break;
      case 'memory':
        parent.append(this.line('sparkles', `Memory ${ev.phase || ''}: ${ev.message || ev.status || ''}`, 'muted'));
        break;
      case 'router_switch':
        parent.append(this.line('layers', `Switched model to ${ev.toModel}${ev.trigger ? ` (${String(ev.trigger).replace(/_/g, ' ')})` : ''}`, 'muted'));
        break;
      case 'system': {
        if (ev.level === 'debug') break;
        // Shown on the usage it marks rather than as a line of its own.
        if (ev.metadata?.code === 'usage_estimated') {
          this.nextUsageEstimated = true;
          break;
        }
        const kind = ev.level === 'error' ? 'error' : ev.level === 'warn' ? 'warn' : 'muted';
        parent.append(this.line(ev.level === 'info' ? 'help' : 'alert', ev.message || 'System notice', kind));
        break;
      }
      case 'complete':
      case 'interrupted':
      case 'sleep':
        this.closeAsks('Closed');
        parent.append(this.terminal(ev, at, seq));
        this.usage = null;
        this.usageEstimated = false;
        this.needHeader = true;
        break;
      case 'ask':
        this.closeAsks('Closed');
        this.header(parent);
        parent.append(this.askCard(ev, seq));
        this.usage = null;
        this.usageEstimated = false;
        this.needHeader = true;
        break;
      default:
        parent.append(this.line('help', `Unrecognised event “${String(ev.type)}”`, 'muted'));
    }
  }

  header(parent) {
    if (!this.needHeader) return;
    this.needHeader = false;
    parent.append(this.agentHeader());
  }

  agentHeader() {
    return h('div', { class: 'agent-head' },
      h('span', { class: 'avatar', 'aria-hidden': 'true' }, icon('bot')),
      h('span', { class: 'agent-name', text: this.opts.agentName || 'Agent' }));
  }

  divider(text) {
    return h('div', { class: 'tl-divider' }, h('span', { text }));
  }

  line(ic, text, kind = 'muted') {
    return h('div', { class: `tl-line tl-${kind}` }, icon(ic), h('span', { text }));
  }

  senderLabel(sender) {
    if (!sender) return 'Unknown';
    switch (sender.kind) {
      case 'user':
        return sender.userId === this.opts.meId ? 'You' : `User ${String(sender.userId).slice(0, 8)}`;
      case 'app':
        return `App ${sender.appId}`;
      case 'session':
        return h('a', { href: this.opts.sessionHref(sender.sessionId), class: 'sender-link' }, icon('branch'), 'Another session');
      case 'system':
        return 'System';
      default:
        return String(sender.kind || 'Unknown');
    }
  }

  input(kind, text, ev, at, seq) {
    const label = { prompt: null, note: 'Note', answer: 'Answer' }[kind];
    const meta = h('div', { class: 'msg-meta' },
      h('span', { class: 'sender' }, this.senderLabel(ev.sender)),
      label && h('span', { class: `tag tag-${kind}`, text: label }),
      ev.behavior === 'follow_up' && h('span', { class: 'tag', text: 'Follow-up' }),
      h('time', { datetime: new Date(at).toISOString(), title: fullTime(at), text: clockTime(at) }));
    const bubble = h('div', { class: 'bubble' }, h('div', { class: 'plain', text: text ?? '' }));
    if (Array.isArray(ev.images) && ev.images.length) {
      bubble.append(h('div', { class: 'msg-images' }, ev.images.map((img) => {
        const src = sessionPath(this.opts.ws, this.opts.sessionId, `/images/${encodeURIComponent(img.storageId)}`);
        return h('a', { href: src, target: '_blank', rel: 'noopener', class: 'msg-image', 'aria-label': 'Open attached image' },
          h('img', { src, alt: 'Attached image', loading: 'lazy' }));
      })));
    }
    if (Array.isArray(ev.attachments) && ev.attachments.length) {
      bubble.append(h('div', { class: 'msg-files' }, ev.attachments.map((a) => h('span', { class: 'file-chip', title: a.path },
        icon('file'), h('span', { class: 'file-name', text: a.name }), h('span', { class: 'file-size', text: fmtBytes(a.bytes) })))));
    }
    return h('div', { class: `msg msg-user msg-${kind}`, dataset: { kind, seq } }, meta, bubble);
  }

  step(parent, step, seq, origin) {
    const fromTask = origin?.taskId ? h('span', { class: 'tag', text: `task ${origin.taskId}` }) : null;
    switch (step.type) {
      case 'text': {
        this.header(parent);
        const el = h('div', { class: 'msg msg-agent', dataset: { kind: 'text', seq } }, markdownEl(step.text || ''));
        if (fromTask) el.prepend(h('div', { class: 'msg-meta' }, fromTask));
        parent.append(el);
        break;
      }
      case 'reasoning': {
        this.header(parent);
        parent.append(h('details', { class: 'reasoning', dataset: { kind: 'reasoning', seq } },
          h('summary', null, icon('sparkles'), h('span', { text: 'Reasoning' }), icon('chevronDown', 'chev')),
          h('div', { class: 'reasoning-text', text: step.text || '' })));
        break;
      }
      case 'tool_call_start':
      case 'tool_call': {
        this.header(parent);
        const card = this.toolCard(parent, step);
        if (step.input !== undefined) {
          card.input.textContent = pretty(step.input);
          card.inputSec.hidden = false;
        }
        if (step.type === 'tool_call') {
          card.el.classList.remove('running');
          card.el.classList.toggle('error', Boolean(step.isError));
          card.status.replaceChildren(icon(step.isError ? 'xCircle' : 'checkCircle'), step.isError ? 'Failed' : 'Done');
          card.output.replaceChildren();
          for (const part of step.output || []) {
            if (part.type === 'text') card.output.append(h('pre', { class: 'tool-pre', text: part.text }));
            else if (part.type === 'image' && IMAGE_MIME.has(part.mimeType) && /^[A-Za-z0-9+/=\s]+$/.test(part.data || '')) {
              card.output.append(h('img', { class: 'tool-img', alt: `Image output of ${step.toolName}`, src: `data:${part.mimeType};base64,${part.data.replace(/\s/g, '')}` }));
            }
          }
          if (step.details !== undefined) card.output.append(h('pre', { class: 'tool-pre muted', text: pretty(step.details) }));
          card.outputSec.hidden = card.output.childElementCount === 0;
        }
        break;
      }
      case 'system':
        parent.append(this.line('help', step.message || '', 'muted'));
        break;
      case 'text_delta':
      case 'reasoning_delta':
        break; // volatile; never stored
      default:
        parent.append(this.line('help', `Unrecognised step “${String(step.type)}”`, 'muted'));
    }
  }

  toolCard(parent, step) {
    const id = step.toolCallId || `anon-${Math.random()}`;
    let card = this.tools.get(id);
    if (card) return card;
    const status = h('span', { class: 'tool-status' }, h('span', { class: 'spinner sm', 'aria-hidden': 'true' }), 'Running');
    const input = h('pre', { class: 'tool-pre' });
    const inputSec = h('div', { class: 'tool-sec', hidden: true }, h('div', { class: 'tool-label', text: 'Input' }), input);
    const output = h('div', { class: 'tool-output' });
    const outputSec = h('div', { class: 'tool-sec', hidden: true }, h('div', { class: 'tool-label', text: 'Output' }), output);
    const el = h('details', { class: 'tool running', dataset: { kind: 'tool', toolCallId: id } },
      h('summary', null, icon('wrench'), h('span', { class: 'tool-name', text: step.toolName || 'tool' }), status, icon('chevronDown', 'chev')),
      h('div', { class: 'tool-body' }, inputSec, outputSec));
    card = { el, status, input, inputSec, output, outputSec };
    this.tools.set(id, card);
    parent.append(el);
    return card;
  }

  taskCard(parent, task) {
    const id = task.id || 'task';
    let t = this.tasks.get(id);
    if (!t) {
      const status = h('span', { class: 'tool-status' });
      const pre = h('pre', { class: 'tool-pre task-pre', hidden: true });
      const title = h('span', { class: 'tool-name', text: task.label || task.name || `Task ${id}` });
      const el = h('details', { class: 'tool task', dataset: { kind: 'task', taskId: id } },
        h('summary', null, icon('terminal'), h('span', { class: 'tag', text: 'Background' }), title, status, icon('chevronDown', 'chev')),
        h('div', { class: 'tool-body' }, pre));
      t = { el, status, pre, title, output: '' };
      this.tasks.set(id, t);
      parent.append(el);
      this.setTaskStatus(t, task.status || 'running', {});
    } else if (task.label || task.name) {
      t.title.textContent = task.label || task.name;
    }
    return t;
  }

  setTaskStatus(t, status, s) {
    const running = status === 'running' || status === 'scheduled';
    t.el.classList.toggle('running', running);
    t.el.classList.toggle('error', status === 'failed' || status === 'lost');
    const words = { running: 'Running', scheduled: 'Scheduled', completed: 'Completed', failed: 'Failed', stopped: 'Stopped', lost: 'Lost' };
    const ic = running ? h('span', { class: 'spinner sm', 'aria-hidden': 'true' }) : icon(status === 'completed' ? 'checkCircle' : 'xCircle');
    const extra = s.reason ? ` (${s.reason})` : '';
    t.status.replaceChildren(ic, `${words[status] || status}${extra}`);
    if (s.result !== undefined || s.error !== undefined) {
      const text = pretty(s.result ?? s.error);
      if (text) {
        t.output = `${t.output}${t.output && !t.output.endsWith('\n') ? '\n' : ''}${text}`.slice(-TASK_TAIL);
        t.pre.textContent = t.output;
        t.pre.hidden = false;
      }
    }
  }

  todosCard(todos) {
    return h('div', { class: 'card todos-card', dataset: { kind: 'todos' } },
      h('div', { class: 'card-title' }, icon('list'), 'Todo list'),
      todoList(todos));
  }

  usageText() {
    const u = this.usage?.turnUsage;
    if (!u) return '';
    const cost = u.cost?.total ?? 0;
    if (!this.usageEstimated) return ` · ${fmtTokens(u.totalTokens)} tokens · ${fmtCost(cost)}`;
    // Estimated counts say so, and a made-up $0.00 is not shown as if it were measured.
    return ` · ≈${fmtTokens(u.totalTokens)} tokens (estimated)${cost > 0 ? ` · ≈${fmtCost(cost)}` : ''}`;
  }

  terminal(ev, at, seq) {
    const usage = this.usageText();
    const time = clockTime(at);
    if (ev.type === 'complete') {
      if (ev.status === 'failed') {
        return h('div', { class: 'callout callout-error', dataset: { kind: 'complete', seq }, role: 'note' },
          icon('alert'), h('div', null, h('strong', { text: 'The turn failed' }), ev.error && h('div', { class: 'callout-text', text: ev.error })));
      }
      const text = ev.status === 'cancelled' ? 'Cancelled' : 'Done';
      return h('div', { class: 'turn-end', dataset: { kind: 'complete', seq } }, icon(ev.status === 'cancelled' ? 'xCircle' : 'checkCircle'), h('span', { text: `${text}${usage} · ${time}` }));
    }
    if (ev.type === 'interrupted') {
      return h('div', { class: 'turn-end warn', dataset: { kind: 'interrupted', seq } }, icon('pause'), h('span', { text: `Interrupted${usage} · ${time}` }));
    }
    const wake = Number(ev.wakeAt);
    return h('div', { class: 'turn-end', dataset: { kind: 'sleep', seq } }, icon('clock'),
      h('span', { text: `Sleeping until ${Number.isFinite(wake) ? fullTime(wake) : 'later'}${usage}` }));
  }

  askCard(ev, seq) {
    const questions = Array.isArray(ev.questions) ? ev.questions : [];
    const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    const state = h('span', { class: 'ask-state' });
    const controls = [];
    const single = questions.length === 1 && !questions[0].multiSelect;
    const groupName = `ask-${seq}`;
    const blocks = questions.map((q, qi) => {
      const opts = Array.isArray(q.options) ? q.options : [];
      const legend = h('legend', null, q.header && h('span', { class: 'ask-header', text: q.header }), h('span', { class: 'ask-q', text: q.question || 'Question' }));
      let optionsEl;
      if (single) {
        optionsEl = h('div', { class: 'ask-options' }, opts.map((o) => {
          const b = h('button', { type: 'button', class: 'btn ask-option', dataset: { label: o.label }, onclick: () => send(o.label) },
            h('span', { class: 'opt-label', text: o.label }), o.description && h('span', { class: 'opt-desc', text: o.description }));
          controls.push(b);
          return b;
        }));
      } else {
        optionsEl = h('div', { class: 'ask-options vertical' }, opts.map((o) => {
          const input = h('input', { type: q.multiSelect ? 'checkbox' : 'radio', name: `${groupName}-${qi}`, value: o.label });
          controls.push(input);
          return h('label', { class: 'ask-check' }, input, h('span', null, h('span', { class: 'opt-label', text: o.label }), o.description && h('span', { class: 'opt-desc', text: o.description })));
        }));
      }
      return h('fieldset', { class: 'ask-q-block', dataset: { qi } }, legend, optionsEl);
    });
    const free = h('input', { type: 'text', class: 'input', placeholder: single ? 'Or type another answer…' : 'Add a comment (optional)…', 'aria-label': 'Your answer' });
    const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, single ? 'Send' : 'Send answer');
    controls.push(free, sendBtn);
    const form = h('form', { class: 'ask-form' }, blocks, h('div', { class: 'ask-free' }, free, sendBtn), error);
    const el = h('div', { class: 'ask-card', dataset: { kind: 'ask', seq } },
      h('div', { class: 'ask-title' }, icon('help'), h('span', { text: questions.length > 1 ? 'The agent has questions' : 'The agent asks' }), state),
      form);

    const collect = () => {
      if (single) return free.value.trim();
      const parts = [];
      blocks.forEach((block, qi) => {
        const picked = [...block.querySelectorAll('input:checked')].map((i) => i.value);
        if (!picked.length) return;
        parts.push(questions.length > 1 ? `${questions[qi].question}: ${picked.join(', ')}` : picked.join(', '));
      });
      const extra = free.value.trim();
      if (extra) parts.push(extra);
      return parts.join('\n');
    };
    const send = async (text) => {
      text = (text ?? collect()).trim();
      if (!text) {
        error.textContent = single ? 'Pick an option or type an answer.' : 'Choose at least one option or type an answer.';
        error.hidden = false;
        return;
      }
      error.hidden = true;
      ask.setActive(false);
      state.textContent = 'Sending…';
      try {
        await this.opts.onAnswer(text);
        ask.sent = true;
        if (!ask.closedAs) state.textContent = 'Answer sent';
      } catch (err) {
        state.textContent = '';
        error.textContent = err?.userMessage || String(err);
        error.hidden = false;
        ask.setActive(true);
      }
    };
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      send();
    });
    const ask = {
      seq,
      el,
      state,
      closedAs: null,
      setActive(on) {
        for (const c of controls) c.disabled = !on;
        el.classList.toggle('inactive', !on);
      },
    };
    ask.setActive(false);
    this.asks.push(ask);
    return el;
  }

  closeAsks(how) {
    for (const a of this.asks) {
      if (a.closedAs) continue;
      a.closedAs = how;
      a.setActive(false);
      a.state.textContent = how;
    }
  }

  /** The ask still waiting for an answer (the last one not closed by a later event), if any. */
  pendingAsk() {
    const last = this.asks[this.asks.length - 1];
    return last && !last.closedAs ? last : null;
  }

  /** Enables the controls of the pending ask when `allowed` (the session is asking). */
  activateAsk(allowed) {
    const p = this.pendingAsk();
    for (const a of this.asks) a.setActive(Boolean(allowed && a === p && !a.sent));
  }
}

/** A checklist of todos (used inline and in the side panel). */
export function todoList(todos) {
  const icons = { pending: 'circle', in_progress: 'play', completed: 'checkCircle', failed: 'xCircle' };
  const words = { pending: 'Pending', in_progress: 'In progress', completed: 'Completed', failed: 'Failed' };
  return h('ul', { class: 'todos' }, todos.map((t) => h('li', { class: `todo todo-${t.status}` },
    h('span', { class: 'todo-icon', title: words[t.status] || t.status }, icon(icons[t.status] || 'circle')),
    h('span', { class: 'sr-only', text: `${words[t.status] || t.status}: ` }),
    h('span', { class: 'todo-text', text: t.content }))));
}
