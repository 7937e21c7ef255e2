// First-run setup and sign-in pages.

import { h, icon } from './dom.js';
import * as api from './api.js';

function brand() {
  return h('div', { class: 'auth-brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }, icon('terminal')), h('span', { text: 'sessiond' }));
}

function field(label, input, hint) {
  return h('label', { class: 'field' }, h('span', { class: 'field-label', text: label }), input, hint && h('span', { class: 'field-hint muted', text: hint }));
}

function shell(card) {
  return h('main', { class: 'auth-page', id: 'main' }, h('div', { class: 'auth-wrap' }, brand(), card,
    h('p', { class: 'auth-foot muted small', text: 'Durable agent sessions, hosted on this machine.' })));
}

/** The sign-in page. `status` is /auth/status (or null when unknown). */
export function loginPage({ status, onSignedIn, notice }) {
  const email = h('input', { class: 'input', type: 'email', name: 'email', autocomplete: 'username', required: true, id: 'login-email' });
  const password = h('input', { class: 'input', type: 'password', name: 'password', autocomplete: 'current-password', required: true, id: 'login-password' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: !notice, text: notice || '' });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block' }, 'Sign in');
  const form = h('form', { class: 'auth-form', novalidate: true },
    field('Email', email),
    field('Password', password),
    error,
    submit);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    if (!email.value.trim() || !password.value) {
      error.textContent = 'Enter your email and password.';
      error.hidden = false;
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Signing in…';
    try {
      const me = await api.post('/auth/login', { email: email.value.trim(), password: password.value }, { quiet401: true });
      onSignedIn(me);
    } catch (err) {
      error.textContent = err.status === 401 ? 'Wrong email or password.' : api.describeError(err);
      error.hidden = false;
      password.select();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Sign in';
    }
  });
  const card = h('div', { class: 'auth-card' },
    h('h1', { text: 'Sign in' }),
    status?.setupRequired && h('div', { class: 'callout callout-info' }, icon('help'),
      h('div', null, h('strong', { text: 'No account exists yet.' }),
        h('div', { class: 'callout-text', text: 'Open the setup link that sessiond printed when it started (…/setup#…) on this machine to create the owner account.' }))),
    form);
  const page = shell(card);
  setTimeout(() => email.focus(), 0);
  return page;
}

/** The first-run page: creates the owner with the one-time token from the URL fragment. */
export function setupPage({ token, status, onSignedIn, onLogin }) {
  if (!status?.setupRequired) {
    const card = h('div', { class: 'auth-card' },
      h('h1', { text: 'Setup is done' }),
      h('p', { class: 'muted', text: 'The owner account already exists, so this setup link no longer works.' }),
      h('button', { type: 'button', class: 'btn btn-primary btn-block', onclick: onLogin }, 'Go to sign in'));
    return shell(card);
  }
  const email = h('input', { class: 'input', type: 'email', autocomplete: 'username', required: true, id: 'setup-email' });
  const password = h('input', { class: 'input', type: 'password', autocomplete: 'new-password', required: true, minlength: 10, id: 'setup-password' });
  const confirm = h('input', { class: 'input', type: 'password', autocomplete: 'new-password', required: true, id: 'setup-confirm' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block' }, 'Create owner account');
  const form = h('form', { class: 'auth-form', novalidate: true },
    field('Email', email),
    field('Password', password, 'At least 10 characters.'),
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
    if (!token) return fail('This page needs the setup link printed by sessiond (it ends in #…).');
    if (!email.value.trim()) return fail('Enter an email address.');
    if (password.value.length < 10) return fail('The password needs at least 10 characters.');
    if (password.value !== confirm.value) return fail('The two passwords differ.');
    submit.disabled = true;
    try {
      const me = await api.post('/auth/setup', { token, email: email.value.trim(), password: password.value }, { quiet401: true });
      onSignedIn(me);
    } catch (err) {
      fail(api.describeError(err));
    } finally {
      submit.disabled = false;
    }
  });
  const card = h('div', { class: 'auth-card' },
    h('h1', { text: 'Welcome to sessiond' }),
    h('p', { class: 'muted', text: 'Create the owner account. You can add more people later under Access, or from the command line.' }),
    !token && h('div', { class: 'callout callout-error' }, icon('alert'), h('div', { class: 'callout-text', text: 'The setup token is missing from this link. Use the full link printed by sessiond.' })),
    form);
  setTimeout(() => email.focus(), 0);
  return shell(card);
}

/** Full-page error (server unreachable at start). */
export function fatalPage(err, retry) {
  return h('main', { class: 'auth-page', id: 'main' }, h('div', { class: 'auth-wrap' }, brand(),
    h('div', { class: 'auth-card center' },
      h('div', { class: 'empty-icon' }, icon('wifiOff')),
      h('h1', { text: 'Cannot reach sessiond' }),
      h('p', { class: 'muted', text: api.describeError(err) }),
      h('button', { type: 'button', class: 'btn btn-primary', onclick: retry }, icon('refresh'), 'Try again'))));
}
