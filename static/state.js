// A session's state as the server derives it (`include=state` on the Sessions API): one
// vocabulary, shown the same in list rows, the session header and its details.

import { h, icon } from './dom.js';

export const STATE_WORDS = {
  running: 'Running',
  asking: 'Asking',
  sleeping: 'Sleeping',
  done: 'Done',
  failed: 'Failed',
  interrupted: 'Interrupted',
  cancelled: 'Cancelled',
  closed: 'Closed',
  over_budget: 'Over budget',
  unknown: 'Unknown',
};

const STATE_ICONS = {
  running: 'play',
  asking: 'help',
  sleeping: 'clock',
  done: 'checkCircle',
  failed: 'xCircle',
  interrupted: 'pause',
  cancelled: 'xCircle',
  closed: 'archive',
  over_budget: 'alert',
  unknown: 'wifiOff',
};

/** The words for `state` (a state the page does not know is shown by its name). */
export function stateWord(state) {
  return STATE_WORDS[state] || state || STATE_WORDS.unknown;
}

export function stateIcon(state) {
  return icon(STATE_ICONS[state] || 'circle');
}

/** The badge of a state; `reason` (the server's) becomes its tooltip. */
export function stateBadge(state, extra = '', reason = '') {
  const s = state || 'unknown';
  return h('span', { class: `badge badge-${s} ${extra}`.trim(), dataset: { state: s }, title: reason || null },
    h('span', { class: 'badge-dot', 'aria-hidden': 'true' }), stateWord(s));
}
