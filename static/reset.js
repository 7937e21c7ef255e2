// Choosing a new password with a one-time link an owner handed out (/reset#<token>).

import { h, icon } from './dom.js';
import * as api from './api.js';

export function resetPage({ token, onDone }) {
  const password = h('input', { class: 'input', type: 'password', autocomplete: 'new-password', required: true, minlength: 10, id: 'reset-password' });
  const confirm = h('input', { class: 'input', type: 'password', autocomplete: 'new-password', required: true, id: 'reset-confirm' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true, id: 'reset-error' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block' }, 'Set password');
  const field = (label, input, hint) => h('label', { class: 'field' }, h('span', { class: 'field-label', text: label }), input, hint && h('span', { class: 'field-hint muted', text: hint }));
  const form = h('form', { class: 'auth-form', novalidate: true },
    field('New password', password, 'At least 10 characters.'),
    field('Repeat password', confirm),
    error,
    submit);
  const fail = (msg) => {
    error.textContent = msg;
    error.hidden = false;
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    if (!token) return fail('This page needs the whole link you were sent (it ends in #…).');
    if (password.value !== confirm.value) return fail('The two passwords differ.');
    submit.disabled = true;
    try {
      await api.post('/auth/password-reset', { token, password: password.value }, { quiet401: true });
      onDone('Your password is set. Sign in with it.');
    } catch (err) {
      fail(api.describeError(err));
    } finally {
      submit.disabled = false;
    }
  });
  const card = h('div', { class: 'auth-card' },
    h('h1', { text: 'Choose a password' }),
    h('p', { class: 'muted', text: 'This link works once. Your other signed-in pages end when you use it.' }),
    !token && h('div', { class: 'callout callout-error' }, icon('alert'), h('div', { class: 'callout-text', text: 'The link is incomplete. Use the whole link you were sent.' })),
    form);
  setTimeout(() => password.focus(), 0);
  return h('main', { class: 'auth-page', id: 'main' }, h('div', { class: 'auth-wrap' },
    h('div', { class: 'auth-brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, icon('terminal')), h('span', { text: 'sessiond' })),
    card));
}
