// Access: a workspace's API keys and app keys, its people and its settings, for its owners.
// Every action is a documented route (/v1/ws/{ws}/keys, /apps, /people, /v1/ws/{ws},
// /v1/workspaces); a member never sees this page's link, and the routes answer members 403.

import { h, icon, relTime, fullTime, toast, openDialog, confirmDialog } from './dom.js';
import * as api from './api.js';

const SCOPES = [
  ['sessions', 'Read and run sessions'],
  ['sessions:read', 'Read sessions only'],
  ['files:write', 'Upload files'],
];

const ws = (ctx, rest = '') => `/v1/ws/${encodeURIComponent(ctx.ws)}${rest}`;
const ms = (iso) => (iso ? Date.parse(iso) : null);

/** Whether the signed-in person owns the workspace `slug`. */
export function isOwner(me, slug) {
  return (me?.workspaces || []).some((w) => w.slug === slug && w.role === 'owner');
}

export function accessView(ctx, section) {
  const tabs = [['keys', 'API keys'], ['people', 'People'], ['workspace', 'Workspace']];
  const current = tabs.some(([k]) => k === section) ? section : 'keys';
  const body = h('div', { class: 'access-body' });
  const root = h('section', { class: 'view access-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'Access' }),
        h('p', { class: 'page-sub muted', text: `Who and what may use workspace ${ctx.ws}.` }))),
    h('nav', { class: 'tabs access-tabs', 'aria-label': 'Access sections' },
      tabs.map(([k, label]) => h('a', {
        class: 'tab', href: ctx.href(`/access/${k}`), 'aria-current': k === current ? 'page' : null,
        id: `access-tab-${k}`,
      }, label))),
    body);
  if (!isOwner(ctx.me, ctx.ws)) {
    body.append(h('div', { class: 'callout callout-info' }, icon('help'),
      h('div', { class: 'callout-text', text: 'Only the workspace’s owners manage its access.' })));
    return { el: root, destroy() {} };
  }
  ({ keys: keysSection, people: peopleSection, workspace: workspaceSection })[current](ctx, body);
  return { el: root, focus: () => root.querySelector('h1')?.focus?.(), destroy() {} };
}

function errorBox(err) {
  return h('div', { class: 'callout callout-error', role: 'alert' }, icon('alert'), h('div', { class: 'callout-text', text: api.describeError(err) }));
}

// ---------------------------------------------------------------------------------------------
// Keys

function keyStatus(k) {
  if (k.revoked) return h('span', { class: 'badge badge-interrupted', text: 'Revoked' });
  if (k.expired) return h('span', { class: 'badge badge-interrupted', text: 'Expired' });
  return h('span', { class: 'badge badge-running', text: 'Active' });
}

function keysSection(ctx, body) {
  const table = h('tbody');
  const newBtn = h('button', { type: 'button', class: 'btn btn-primary', id: 'key-new' }, icon('plus'), 'New key');
  body.append(
    h('div', { class: 'toolbar access-toolbar' },
      h('p', { class: 'muted small', text: 'A key works in this workspace only, within its scopes. Its secret is shown once, when it is made.' }),
      newBtn),
    h('div', { class: 'table-wrap' }, h('table', { class: 'access-table', id: 'keys-table' },
      h('thead', null, h('tr', null, ...['Name', 'Kind', 'Scopes', 'Created', 'Last used', 'Expires', 'Status', ''].map((t) => h('th', { scope: 'col', text: t })))),
      table)));

  async function load() {
    try {
      const res = await api.get(ws(ctx, '/keys'));
      const keys = (res.keys || []).slice().reverse();
      table.replaceChildren(...(keys.length ? keys.map(row) : [h('tr', null, h('td', { colspan: 8, class: 'muted', text: 'No keys yet.' }))]));
    } catch (err) {
      table.replaceChildren(h('tr', null, h('td', { colspan: 8 }, errorBox(err))));
    }
  }

  function row(k) {
    const revoke = !k.revoked && h('button', {
      type: 'button', class: 'btn btn-ghost sm danger-text key-revoke', 'aria-label': `Revoke key ${k.name}`,
      onclick: async () => {
        if (!(await confirmDialog('Revoke this key?', `“${k.name}” stops working at once, for every request and open stream. This cannot be undone.`, 'Revoke', true))) return;
        try {
          await api.del(ws(ctx, `/keys/${encodeURIComponent(k.id)}`));
          toast(`Revoked ${k.name}`);
        } catch (err) {
          toast(api.describeError(err), 'error');
        }
        load();
      },
    }, 'Revoke');
    return h('tr', { 'data-key-id': k.id, class: k.revoked || k.expired ? 'is-dead' : '' },
      h('td', { class: 'key-name', text: k.name }),
      h('td', { text: k.kind === 'app' ? 'App' : 'Personal' }),
      h('td', { class: 'mono small', text: k.scopes.join(', ') }),
      h('td', { title: fullTime(ms(k.createdAt)), text: relTime(ms(k.createdAt)) }),
      h('td', { class: 'key-last-used', title: k.lastUsedAt ? fullTime(ms(k.lastUsedAt)) : '', text: k.lastUsedAt ? relTime(ms(k.lastUsedAt)) : 'Never' }),
      h('td', { title: k.expiresAt ? fullTime(ms(k.expiresAt)) : '', text: k.expiresAt ? fullTime(ms(k.expiresAt)) : 'Never' }),
      h('td', { class: 'key-status' }, keyStatus(k)),
      h('td', { class: 'actions-cell' }, revoke || ''));
  }

  newBtn.addEventListener('click', async () => {
    const made = await newKeyDialog(ctx);
    if (made) {
      await load();
      await showSecret(made);
    }
  });
  load();
}

async function newKeyDialog(ctx) {
  const name = h('input', { class: 'input', id: 'key-name', type: 'text', autocomplete: 'off', required: true });
  const kind = h('select', { class: 'select', id: 'key-kind' },
    h('option', { value: 'user', text: 'Personal key (acts as you)' }),
    h('option', { value: 'app', text: 'App key (acts as a new app)' }));
  const boxes = SCOPES.map(([s, label]) => h('input', { type: 'checkbox', value: s, id: `key-scope-${s.replace(':', '-')}`, checked: s === 'sessions' }));
  const expires = h('input', { class: 'input', id: 'key-expires', type: 'date' });
  const form = h('div', { class: 'stack' },
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'key-name', text: 'Name' }), name,
      h('span', { class: 'field-hint muted', text: 'To recognise it by in this list (for an app key, the app’s name).' })),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'key-kind', text: 'Kind' }), kind),
    h('fieldset', { class: 'field scopes' }, h('legend', { class: 'field-label', text: 'Scopes' }),
      SCOPES.map(([s, label], i) => h('label', { class: 'check' }, boxes[i], h('span', null, h('span', { class: 'mono', text: s }), h('span', { class: 'muted', text: ` — ${label}` }))))),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'key-expires', text: 'Expires (optional)' }), expires,
      h('span', { class: 'field-hint muted', text: 'At the start of that day (UTC). Leave empty for a key that never expires.' })));
  return openDialog({
    title: 'New API key',
    body: form,
    submitLabel: 'Create key',
    submit: async () => {
      const payload = { name: name.value, scopes: boxes.filter((b) => b.checked).map((b) => b.value) };
      if (expires.value) payload.expiresAt = `${expires.value}T00:00:00Z`;
      return api.post(ws(ctx, kind.value === 'app' ? '/apps' : '/keys'), payload);
    },
  });
}

function copyButton(text, label) {
  return h('button', {
    type: 'button', class: 'btn sm', onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        toast('Copied');
      } catch {
        toast('Select the text and copy it.', 'error');
      }
    },
  }, label);
}

/** Shows a secret (a key, a link) once, to copy. */
function showOnce(title, text, note, id) {
  const out = h('input', { class: 'input mono', id, type: 'text', readonly: true, value: text, 'aria-label': title, spellcheck: 'false' });
  out.addEventListener('focus', () => out.select());
  return openDialog({
    title,
    body: h('div', { class: 'stack' },
      h('div', { class: 'callout callout-info' }, icon('alert'), h('div', { class: 'callout-text', text: note })),
      h('div', { class: 'secret-row' }, out, copyButton(text, 'Copy'))),
    submitLabel: 'Done',
    cancelLabel: 'Close',
  });
}

function showSecret(made) {
  return showOnce(`Key “${made.name}”`, made.key, 'Copy the key now: it is shown this once and cannot be shown again.', 'new-key-secret');
}

// ---------------------------------------------------------------------------------------------
// People

function peopleSection(ctx, body) {
  const email = h('input', { class: 'input', id: 'person-email', type: 'email', autocomplete: 'off', placeholder: 'name@example.com' });
  const role = h('select', { class: 'select', id: 'person-role' }, h('option', { value: 'member', text: 'Member' }), h('option', { value: 'owner', text: 'Owner' }));
  const addError = h('p', { class: 'form-error', role: 'alert', hidden: true, id: 'person-error' });
  const add = h('form', { class: 'access-form', id: 'person-add', novalidate: true },
    h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'person-email', text: 'Email' }), email),
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'person-role', text: 'Role' }), role),
    h('button', { type: 'submit', class: 'btn btn-primary' }, icon('plus'), 'Add person'));
  const table = h('tbody');
  body.append(
    h('p', { class: 'muted small', text: 'Owners manage access; members use the workspace. Someone without an account gets one, and a link to choose their password.' }),
    add, addError,
    h('div', { class: 'table-wrap' }, h('table', { class: 'access-table', id: 'people-table' },
      h('thead', null, h('tr', null, ...['Email', 'Role', ''].map((t) => h('th', { scope: 'col', text: t })))),
      table)));

  add.addEventListener('submit', async (e) => {
    e.preventDefault();
    addError.hidden = true;
    try {
      const p = await api.post(ws(ctx, '/people'), { email: email.value, role: role.value });
      email.value = '';
      toast(`Added ${p.email}`);
      await load();
      if (p.created) await resetLink(ctx, p, 'They have no password yet: send them this link to choose one. It works once, for 24 hours.');
    } catch (err) {
      addError.textContent = api.describeError(err);
      addError.hidden = false;
    }
  });

  async function load() {
    try {
      const res = await api.get(ws(ctx, '/people'));
      table.replaceChildren(...(res.people || []).map(row));
    } catch (err) {
      table.replaceChildren(h('tr', null, h('td', { colspan: 3 }, errorBox(err))));
    }
  }

  function row(p) {
    const self = p.userId === ctx.me?.user?.id;
    const sel = h('select', { class: 'select sm', 'aria-label': `Role of ${p.email}` },
      ['member', 'owner'].map((r) => h('option', { value: r, text: r === 'owner' ? 'Owner' : 'Member', selected: p.role === r })));
    sel.addEventListener('change', async () => {
      try {
        await api.patch(ws(ctx, `/people/${encodeURIComponent(p.userId)}`), { role: sel.value });
        toast(`${p.email} is now ${sel.value === 'owner' ? 'an owner' : 'a member'}`);
      } catch (err) {
        toast(api.describeError(err), 'error');
      }
      load();
    });
    return h('tr', { 'data-user-id': p.userId },
      h('td', null, h('span', { text: p.email }), self && h('span', { class: 'muted small', text: ' (you)' })),
      h('td', null, sel),
      h('td', { class: 'actions-cell' },
        h('button', { type: 'button', class: 'btn btn-ghost sm person-reset', onclick: () => resetLink(ctx, p, 'Send this link to the person: it lets them choose a new password once, within 24 hours. Their open browser sessions end when they use it.') }, 'Password link'),
        h('button', {
          type: 'button', class: 'btn btn-ghost sm danger-text person-remove', 'aria-label': `Remove ${p.email}`,
          onclick: async () => {
            if (!(await confirmDialog(`Remove ${p.email}?`, 'They lose access to this workspace at once, and their keys of it are revoked.', 'Remove', true))) return;
            try {
              await api.del(ws(ctx, `/people/${encodeURIComponent(p.userId)}`));
              toast(`Removed ${p.email}`);
            } catch (err) {
              toast(api.describeError(err), 'error');
            }
            load();
          },
        }, 'Remove')));
  }
  load();
}

async function resetLink(ctx, p, note) {
  try {
    const link = await api.post(ws(ctx, `/people/${encodeURIComponent(p.userId)}/password-reset`), {});
    await showOnce(`Password link for ${p.email}`, link.url, note, 'reset-link');
  } catch (err) {
    toast(api.describeError(err), 'error');
  }
}

// ---------------------------------------------------------------------------------------------
// Workspace

function workspaceSection(ctx, body) {
  const name = h('input', { class: 'input', id: 'ws-name', type: 'text', autocomplete: 'off' });
  const renameError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const rename = h('form', { class: 'access-form', id: 'ws-rename', novalidate: true },
    h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'ws-name', text: 'Display name' }), name),
    h('button', { type: 'submit', class: 'btn btn-primary' }, 'Rename'));
  const slug = h('input', { class: 'input mono', id: 'ws-new-slug', type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'research' });
  const newName = h('input', { class: 'input', id: 'ws-new-name', type: 'text', autocomplete: 'off', placeholder: 'Research' });
  const createError = h('p', { class: 'form-error', role: 'alert', hidden: true, id: 'ws-create-error' });
  const create = h('form', { class: 'access-form', id: 'ws-create', novalidate: true },
    h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'ws-new-slug', text: 'Slug (in URLs)' }), slug),
    h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'ws-new-name', text: 'Name' }), newName),
    h('button', { type: 'submit', class: 'btn' }, icon('plus'), 'Create workspace'));
  const list = h('ul', { class: 'ws-list', id: 'ws-list' });
  const created = h('p', { class: 'muted small' });
  body.append(
    h('h2', { class: 'section-title', text: 'This workspace' }), created, rename, renameError,
    h('h2', { class: 'section-title', text: 'Your workspaces' }), list,
    h('h2', { class: 'section-title', text: 'New workspace' }),
    h('p', { class: 'muted small', text: 'You become its owner. Its slug cannot change later.' }),
    create, createError);

  function paintList() {
    list.replaceChildren(...(ctx.me.workspaces || []).map((w) => h('li', null,
      w.slug === ctx.ws
        ? h('span', null, h('strong', { class: 'mono', text: w.slug }), h('span', { class: 'muted', text: ` · ${w.role} · current` }))
        : h('a', { href: `#/w/${encodeURIComponent(w.slug)}/overview`, class: 'ws-switch' }, h('span', { class: 'mono', text: w.slug }), h('span', { class: 'muted', text: ` · ${w.role}` })))));
  }

  async function load() {
    try {
      const w = await api.get(ws(ctx));
      name.value = w.name;
      created.textContent = `Slug ${w.slug} · created ${fullTime(ms(w.createdAt))}`;
    } catch (err) {
      renameError.textContent = api.describeError(err);
      renameError.hidden = false;
    }
  }

  rename.addEventListener('submit', async (e) => {
    e.preventDefault();
    renameError.hidden = true;
    try {
      const w = await api.patch(ws(ctx), { name: name.value });
      name.value = w.name;
      toast(`Renamed to ${w.name}`);
    } catch (err) {
      renameError.textContent = api.describeError(err);
      renameError.hidden = false;
    }
  });

  create.addEventListener('submit', async (e) => {
    e.preventDefault();
    createError.hidden = true;
    try {
      const body = { slug: slug.value.trim() };
      if (newName.value.trim()) body.name = newName.value;
      const w = await api.post('/v1/workspaces', body);
      toast(`Created ${w.slug}`);
      await ctx.reloadMe();
      location.hash = `#/w/${encodeURIComponent(w.slug)}/access/workspace`;
    } catch (err) {
      createError.textContent = api.describeError(err);
      createError.hidden = false;
    }
  });
  paintList();
  load();
}
