// Webhooks: the workspace's outbound webhook subscriptions, each with its delivery log.
// A secret is shown once, in the dialog that answers its creation or rotation.

import { h, icon, relTime, toast, openDialog, confirmDialog } from './dom.js';
import * as api from './api.js';

const EVENT_TYPES = ['session.created', 'run.completed', 'run.failed', 'run.interrupted',
  'input.requested', 'budget_hit', 'schedule.fired', 'session.deleted'];

const hooksPath = (ws, rest = '') => `/v1/ws/${encodeURIComponent(ws)}/webhooks${rest}`;
const when = (iso) => (iso ? relTime(Date.parse(iso)) : '');

/** The dialog that shows a secret this once. */
function showSecret(title, secret) {
  const field = h('input', { class: 'input mono webhook-secret', readonly: true, value: secret, 'aria-label': 'Signing secret' });
  return openDialog({
    title,
    body: h('div', null,
      h('p', { text: 'Copy the signing secret now: it is not shown again. Verify each delivery with it (Standard Webhooks).' }),
      field),
    submitLabel: 'Done',
    cancelLabel: 'Close',
  });
}

function subscribeDialog(ctx) {
  const url = h('input', { class: 'input mono', id: 'webhook-url', type: 'url', placeholder: 'https://example.com/hooks/sessiond', required: true });
  const description = h('input', { class: 'input', id: 'webhook-description', type: 'text' });
  const agent = h('select', { class: 'select', id: 'webhook-agent' },
    h('option', { value: '', text: 'Every agent' }),
    ctx.agents.map((a) => h('option', { value: a.slug, text: a.name })));
  const boxes = EVENT_TYPES.map((t) => h('input', { type: 'checkbox', value: t, 'aria-label': t }));
  return openDialog({
    title: 'Add a webhook',
    body: h('div', null,
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'webhook-url', text: 'Endpoint URL' }), url),
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'webhook-description', text: 'Description' }), description),
      h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'webhook-agent', text: 'Agent' }), agent),
      h('fieldset', { class: 'field webhook-types' }, h('legend', { class: 'field-label', text: 'Events (none checked: all)' }),
        boxes.map((b) => h('label', { class: 'check' }, b, h('span', { class: 'mono small', text: b.value })))),
    ),
    submitLabel: 'Add webhook',
    submit: async () => {
      const body = { url: url.value.trim(), eventTypes: boxes.filter((b) => b.checked).map((b) => b.value) };
      if (description.value.trim()) body.description = description.value.trim();
      if (agent.value) body.agent = agent.value;
      return api.post(hooksPath(ctx.ws), body);
    },
  });
}

function deliveryRow(ctx, hook, d, reload) {
  const redeliver = h('button', { type: 'button', class: 'btn sm', onclick: async () => {
    try {
      await api.post(hooksPath(ctx.ws, `/${hook.id}/deliveries/${d.id}/redeliver`));
      toast('Queued again, with the same webhook-id');
      reload();
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  } }, icon('refresh'), h('span', { text: 'Redeliver' }));
  return h('tr', { class: `delivery delivery-${d.state}` },
    h('td', { class: 'mono small', text: d.eventType }),
    h('td', null, h('span', { class: `badge badge-${d.state}`, text: d.state })),
    h('td', { class: 'small', text: String(d.attempts) }),
    h('td', { class: 'small', text: d.lastStatus == null ? '—' : String(d.lastStatus) }),
    h('td', { class: 'small', text: d.lastLatencyMs == null ? '—' : `${d.lastLatencyMs} ms` }),
    h('td', { class: 'small muted', text: d.lastError || '' }),
    h('td', { class: 'small muted', text: when(d.createdAt) }),
    h('td', null, redeliver));
}

function hookCard(ctx, hook, reload) {
  const log = h('tbody');
  const table = h('table', { class: 'delivery-log', hidden: true },
    h('thead', null, h('tr', null, ['Event', 'State', 'Attempts', 'Status', 'Latency', 'Last error', 'Written', ''].map((t) => h('th', { text: t })))),
    log);
  async function loadLog() {
    try {
      const res = await api.get(hooksPath(ctx.ws, `/${hook.id}/deliveries?limit=25`));
      log.replaceChildren(...(res.deliveries.length
        ? res.deliveries.map((d) => deliveryRow(ctx, hook, d, loadLog))
        : [h('tr', null, h('td', { colspan: 8, class: 'muted small', text: 'No deliveries yet' }))]));
      table.hidden = false;
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  }
  const act = async (fn, done) => {
    try {
      await fn();
      if (done) toast(done);
      reload();
    } catch (err) {
      toast(api.describeError(err), 'error');
    }
  };
  const button = (ic, label, onclick, cls = '') => h('button', { type: 'button', class: `btn sm ${cls}`, 'data-action': label, onclick }, icon(ic), h('span', { text: label }));
  const actions = h('div', { class: 'webhook-actions' },
    button('list', 'Delivery log', loadLog),
    button('refresh', 'Rotate secret', () => act(async () => {
      const res = await api.post(hooksPath(ctx.ws, `/${hook.id}/rotate`));
      await showSecret('New signing secret', res.secret);
    })),
    hook.enabled
      ? button('pause', 'Disable', () => act(() => api.patch(hooksPath(ctx.ws, `/${hook.id}`), { enabled: false }), 'Disabled'))
      : button('play', 'Enable', () => act(() => api.patch(hooksPath(ctx.ws, `/${hook.id}`), { enabled: true }), 'Enabled')),
    button('trash', 'Delete', () => act(async () => {
      if (await confirmDialog('Delete this webhook?', 'Its delivery log goes with it.', 'Delete', true)) {
        await api.del(hooksPath(ctx.ws, `/${hook.id}`));
      }
    }), 'btn-ghost'));
  return h('article', { class: 'panel webhook-card', 'data-webhook': hook.id },
    h('div', { class: 'webhook-head' },
      h('div', { class: 'grow' },
        h('div', { class: 'mono webhook-url', text: hook.url }),
        hook.description && h('div', { class: 'small muted', text: hook.description }),
        h('div', { class: 'small muted', text: [
          hook.eventTypes.length ? hook.eventTypes.join(', ') : 'All events',
          hook.agent ? `agent ${hook.agent}` : null,
          hook.previousSecretValidUntil ? `previous secret signs until ${new Date(hook.previousSecretValidUntil).toLocaleString()}` : null,
        ].filter(Boolean).join(' · ') })),
      h('span', { class: `badge ${hook.enabled ? 'badge-delivered' : 'badge-failed'}`, text: hook.enabled ? 'Enabled' : 'Disabled' })),
    actions,
    !hook.enabled && hook.disabledReason && h('p', { class: 'small form-error webhook-disabled', text: hook.disabledReason }),
    hook.enabled && hook.failingSince && h('p', { class: 'small muted', text: `Failing since ${when(hook.failingSince)}` }),
    table);
}

export function webhooksView(ctx) {
  const list = h('div', { class: 'webhook-list' }, h('div', { class: 'empty-state' }, h('span', { class: 'spinner' })));
  async function load() {
    try {
      const res = await api.get(hooksPath(ctx.ws));
      list.replaceChildren(...(res.webhooks.length
        ? res.webhooks.map((w) => hookCard(ctx, w, load))
        : [h('div', { class: 'empty-state' }, h('div', { class: 'empty-icon' }, icon('send')),
          h('h2', { text: 'No webhooks yet' }),
          h('p', { class: 'muted', text: 'A webhook calls your endpoint, signed, when a session is created, a run ends, an agent asks, a budget is spent or a schedule fires.' }))]));
    } catch (err) {
      list.replaceChildren(h('div', { class: 'empty-state' }, h('div', { class: 'empty-icon' }, icon('wifiOff')),
        h('h2', { text: 'Could not load the webhooks' }), h('p', { class: 'muted', text: api.describeError(err) })));
    }
  }
  const add = h('button', { type: 'button', class: 'btn btn-primary sm', id: 'webhook-add', onclick: async () => {
    const created = await subscribeDialog(ctx);
    if (created) {
      await showSecret('Webhook added', created.secret);
      load();
    }
  } }, icon('plus'), h('span', { text: 'Add webhook' }));
  const root = h('section', { class: 'view webhooks-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'Webhooks' }), h('p', { class: 'page-sub muted', text: 'Endpoints sessiond calls when something happens in this workspace.' })),
      add),
    list);
  load();
  return { el: root, destroy() {} };
}
