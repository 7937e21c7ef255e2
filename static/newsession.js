// Starting a session: agent, folder, tier, prompt with images and attachments, optionally a Job
// definition (`mode`).

import { h, icon } from './dom.js';
import * as api from './api.js';
import { createComposer } from './composer.js';

const JOB_EXAMPLE = `{
  "name": "release",
  "prompt": "Ship the release",
  "states": [
    { "name": "research", "prompt": "Collect the changes" },
    { "name": "draft", "prompt": "Write the notes" },
    { "name": "review", "prompt": "Check the notes", "kind": "review" }
  ]
}`;

export function newSessionView(ctx, params) {
  const wanted = params.get('agent');
  const agents = ctx.agents;
  const initial = agents.find((a) => a.slug === wanted) || agents.find((a) => a.slug === 'root') || agents[0];
  const agentSel = h('select', { class: 'select', id: 'new-agent' },
    agents.map((a) => h('option', { value: a.slug, text: a.name, selected: a === initial })));
  const cwd = h('input', { class: 'input mono', id: 'new-cwd', type: 'text', spellcheck: 'false', autocomplete: 'off' });
  const cwdHint = h('p', { class: 'field-hint muted' });
  const jobToggle = h('input', { type: 'checkbox', id: 'new-job' });
  const jobText = h('textarea', { class: 'input mono job-def', id: 'new-job-def', rows: 9, spellcheck: 'false', 'aria-label': 'Job definition (JSON)', value: JOB_EXAMPLE });
  const jobBox = h('div', { class: 'field', hidden: true }, h('label', { class: 'field-label', for: 'new-job-def', text: 'Job definition (JSON)' }), jobText,
    h('p', { class: 'field-hint muted', text: 'Each state runs as one turn with its prompt; your prompt below is the Job’s input.' }));
  jobToggle.addEventListener('change', () => {
    jobBox.hidden = !jobToggle.checked;
  });

  const selectedAgent = () => agents.find((a) => a.slug === agentSel.value);
  function syncCwd() {
    const a = selectedAgent();
    cwd.placeholder = a?.anchor || 'Drive root';
    cwdHint.textContent = a?.anchor
      ? `Leave empty to work in ${a.anchor}. Any folder inside it works too.`
      : 'Leave empty to work at the root of the workspace drive.';
  }
  agentSel.addEventListener('change', syncCwd);
  syncCwd();
  const effectiveCwd = () => cwd.value.trim() || selectedAgent()?.anchor || undefined;

  const composer = createComposer({
    ws: ctx.ws,
    placeholder: 'What should the agent do?',
    label: 'Prompt',
    kinds: ['message'],
    submitLabel: 'Start session',
    getUploadCwd: effectiveCwd,
    onSubmit: async (p) => {
      const body = { prompt: p.text, clientRequestId: api.uuid() };
      const c = effectiveCwd();
      if (c) body.cwd = c;
      if (p.tier) body.tier = p.tier;
      if (p.images.length) body.images = p.images;
      if (p.attachments.length) body.attachments = p.attachments;
      if (jobToggle.checked) {
        try {
          body.mode = JSON.parse(jobText.value);
        } catch (e) {
          throw new Error(`The Job definition is not valid JSON: ${e.message}`);
        }
      }
      const res = await api.post(api.sessionsPath(ctx.ws), body);
      const id = res.session.sessionId;
      ctx.rememberCreated(id, res);
      ctx.navigate(`/s/${encodeURIComponent(id)}`);
    },
  });

  const root = h('section', { class: 'view new-view' },
    h('header', { class: 'page-head' },
      h('div', null, h('h1', { text: 'New session' }), h('p', { class: 'page-sub muted', text: 'Give an agent a task. It keeps working even if you close this page.' }))),
    h('div', { class: 'new-form' },
      h('div', { class: 'field-row' },
        h('div', { class: 'field' }, h('label', { class: 'field-label', for: 'new-agent', text: 'Agent' }), agentSel),
        h('div', { class: 'field grow' }, h('label', { class: 'field-label', for: 'new-cwd', text: 'Folder' }), cwd, cwdHint)),
      h('label', { class: 'check' }, jobToggle, h('span', null, h('strong', { text: 'Run as a Job' }), h('span', { class: 'muted', text: ' — a state machine that walks through named states' }))),
      jobBox,
      composer.el,
      h('p', { class: 'muted small hint-line' }, icon('paperclip'), 'Paste or drop images (up to 4, 5 MB each); other files are uploaded to the folder’s uploads.')));

  return { el: root, focus: () => composer.focus(), destroy() {} };
}
