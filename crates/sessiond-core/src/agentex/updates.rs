//! A task's timeline, followed live, as the contract's stream updates (`TaskMessageUpdate`).
//!
//! Each message of a stream has an `index`. A message the agent streams (its text or reasoning
//! deltas) is `start` → `delta`… → `done`, and the deltas join to the message's final text; the
//! `done` carries the stored message (`parent_task_message`, with its id). A message that arrives
//! whole (a tool call, an ask, an input) is one `full` with its stored message. An interrupted
//! turn's text is stored as its last text step before its terminal, so its `done` carries it too;
//! what is never stored (the reasoning of an interrupted turn) ends with a `done` without
//! `parent_task_message`.
//!
//! A [`Follower`] reads the session's live frames from a subscription made before anything it
//! must see was submitted, so every event and delta arrives on it in order; one that falls
//! behind the bus catches up from the store and the volatile tail on a new subscription,
//! dropping what it already handled by seq (invariant 5).

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::content;
use crate::bus::{self, Frame, Subscription};
use crate::error::Result;
use crate::store::agentex::Revises;
use crate::store::{SessionKey, Store, StoredEvent};
use crate::timeline::is_terminal_type;

/// Stored events read per backlog query.
const BACKLOG_CHUNK: u32 = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaKind {
    Text,
    Reasoning,
}

struct Open {
    index: u64,
    kind: DeltaKind,
}

/// Turns timeline events and deltas into stream updates, numbering messages from 0.
struct Projector {
    task_id: String,
    /// Only the agent's messages (a turn's answer), not the inputs.
    agent_only: bool,
    next_index: u64,
    open: Option<Open>,
}

impl Projector {
    fn new(task_id: &str, agent_only: bool) -> Projector {
        Projector {
            task_id: task_id.to_owned(),
            agent_only,
            next_index: 0,
            open: None,
        }
    }

    fn take_index(&mut self) -> u64 {
        self.next_index += 1;
        self.next_index - 1
    }

    fn delta(&mut self, kind: DeltaKind, text: &str, out: &mut Vec<Value>) {
        if self.open.as_ref().is_some_and(|o| o.kind != kind) {
            self.close(out);
        }
        let index = match &self.open {
            Some(o) => o.index,
            None => {
                let index = self.take_index();
                let content = match kind {
                    DeltaKind::Text => json!({"type": "text", "author": "agent", "content": "",
                        "format": "plain", "style": "static"}),
                    DeltaKind::Reasoning => json!({"type": "reasoning", "author": "agent",
                        "summary": [], "content": [], "style": "static"}),
                };
                out.push(json!({"type": "start", "index": index, "content": content}));
                self.open = Some(Open { index, kind });
                index
            }
        };
        let delta = match kind {
            DeltaKind::Text => json!({"type": "text", "text_delta": text}),
            DeltaKind::Reasoning => json!({"type": "reasoning_content", "content_index": 0,
                "content_delta": text}),
        };
        out.push(json!({"type": "delta", "index": index, "delta": delta}));
    }

    /// A stored event; `revises` names the message it revises, if it is a revision (which
    /// arrives whole, under the revised message's id).
    fn durable(
        &mut self,
        e: &StoredEvent,
        event: &Value,
        revises: Option<&Revises>,
        out: &mut Vec<Value>,
    ) {
        let message = match revises {
            Some(r) => content::revised_message(&self.task_id, e, r),
            None => content::message(&self.task_id, e),
        };
        let Some(message) = message else {
            return;
        };
        if self.agent_only && message["content"]["author"] != "agent" {
            return;
        }
        let streamed = match event["step"]["type"].as_str() {
            Some("text") if event["type"] == "step" => Some(DeltaKind::Text),
            Some("reasoning") if event["type"] == "step" => Some(DeltaKind::Reasoning),
            _ => None,
        };
        match (&self.open, streamed) {
            (Some(o), Some(kind)) if o.kind == kind => {
                out.push(json!({"type": "done", "index": o.index, "parent_task_message": message}));
                self.open = None;
            }
            _ => {
                self.close(out);
                let index = self.take_index();
                out.push(json!({"type": "full", "index": index,
                    "content": message["content"].clone(), "parent_task_message": message}));
            }
        }
    }

    /// Ends a message that was streamed but never stored.
    fn close(&mut self, out: &mut Vec<Value>) {
        if let Some(o) = self.open.take() {
            out.push(json!({"type": "done", "index": o.index}));
        }
    }
}

/// What a follower follows.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// The turn that takes the input with this seq: the agent's messages, until its terminal.
    Turn { input_seq: u64 },
    /// Everything that happens in the task after the event with seq `after` (the newest one
    /// when the stream opened), inputs included.
    Task { after: u64 },
}

/// What a follower yields.
#[derive(Debug)]
pub enum Item {
    /// A `TaskMessageUpdate`.
    Update(Value),
    /// An event that may have changed the task's status (a turn started or ended, a final
    /// status was set).
    StatusMayChange,
    /// The followed turn ended with this terminal (`complete`, `ask`, `interrupted`, `sleep`);
    /// `error` is a failed turn's error.
    TurnEnded {
        terminal: String,
        error: Option<String>,
    },
    /// Nothing happened for a keep-alive interval.
    Keepalive,
    /// The task was deleted, or the server is shutting down.
    Closed,
}

pub struct Follower {
    store: Store,
    key: SessionKey,
    sub: Subscription,
    closed: watch::Receiver<bool>,
    keepalive: Duration,
    scope: Scope,
    /// The `turn_started` seq of the followed turn, once known.
    started: Option<u64>,
    /// The last stored seq handled.
    last: u64,
    /// Volatile frames seen since the last stored event that settles the bus tail.
    volatile_seen: usize,
    /// After catching up from the store: live deltas are older than what was caught up until the
    /// frame of this seq arrives, so they are dropped until then.
    fence: Option<u64>,
    projector: Projector,
    queue: VecDeque<Item>,
    finished: bool,
}

impl Follower {
    /// Follows a session from `sub`, its subscription, made before anything the follower must see
    /// was submitted: everything after that moment arrives on it, in order, and the running
    /// message's deltas so far are its tail.
    pub fn start(
        store: &Store,
        key: SessionKey,
        scope: Scope,
        keepalive: Duration,
        mut sub: Subscription,
    ) -> Follower {
        let tail = std::mem::take(&mut sub.tail);
        let mut f = Follower {
            store: store.clone(),
            closed: store.bus().closed(),
            projector: Projector::new(&key.id, matches!(scope, Scope::Turn { .. })),
            key,
            sub,
            keepalive,
            scope,
            started: None,
            last: match scope {
                Scope::Turn { input_seq } => input_seq,
                Scope::Task { after } => after,
            },
            volatile_seen: 0,
            fence: None,
            queue: VecDeque::new(),
            finished: false,
        };
        if matches!(scope, Scope::Task { .. }) {
            for frame in &tail {
                f.volatile(frame);
            }
        }
        f
    }

    /// Catches up from the store after falling behind the bus (on a new subscription): the
    /// followed turn's start, the stored events after the last one handled, then the volatile
    /// tail if nothing stored since settled it.
    async fn resync(&mut self) -> Result<()> {
        let mut settled: Option<u64> = None;
        if let Scope::Turn { input_seq } = self.scope
            && self.started.is_none()
        {
            let started = self.store.log().input_turn(self.key.pk, input_seq).await?;
            let Some(started) = started else {
                // Not taken yet: its `turn_started` is still to come, live.
                self.sub.tail.clear();
                return Ok(());
            };
            self.started = Some(started);
            self.last = self.last.max(started);
            self.volatile_seen = 0;
            settled = Some(started);
        }
        loop {
            let events = self
                .store
                .log()
                .events_after(self.key.pk, self.last, BACKLOG_CHUNK)
                .await?;
            let n = events.len();
            for e in events {
                if bus::settles_tail(&e.event_type) {
                    settled = Some(e.seq);
                }
                let revises = self.revises(&e).await?;
                self.stored(e, revises);
                if self.finished {
                    return Ok(());
                }
            }
            if (n as u32) < BACKLOG_CHUNK {
                break;
            }
        }
        let tail = std::mem::take(&mut self.sub.tail);
        match settled {
            // Settled after the new subscription began: its frame is still to come live, and
            // the deltas before it are already accounted for.
            Some(s) if s > self.sub.tail_after => self.fence = Some(s),
            _ => {
                for frame in tail.iter().skip(self.volatile_seen) {
                    self.volatile(frame);
                }
            }
        }
        Ok(())
    }

    fn in_scope(&self) -> bool {
        match self.scope {
            Scope::Task { .. } => true,
            Scope::Turn { .. } => self.started.is_some() && !self.finished,
        }
    }

    /// The message a stored event revises, if it is a revision (only messages posted from
    /// outside the runner, `agent_message`s, can be).
    async fn revises(&self, e: &StoredEvent) -> Result<Option<Revises>> {
        if e.event_type != "agent_message" {
            return Ok(None);
        }
        Ok(self.store.agentex().revises(self.key.pk, e.seq).await?)
    }

    /// A stored event (from the backlog or live), handled once.
    fn stored(&mut self, e: StoredEvent, revises: Option<Revises>) {
        if e.seq <= self.last {
            return;
        }
        self.last = e.seq;
        if bus::settles_tail(&e.event_type) {
            self.volatile_seen = 0;
        }
        if !self.in_scope() {
            return;
        }
        let Ok(event) = serde_json::from_str::<Value>(&e.body) else {
            return;
        };
        let mut out = Vec::new();
        self.projector
            .durable(&e, &event, revises.as_ref(), &mut out);
        let terminal = is_terminal_type(&e.event_type);
        if terminal {
            self.projector.close(&mut out);
        }
        self.queue.extend(out.into_iter().map(Item::Update));
        match self.scope {
            Scope::Turn { .. } if terminal => {
                let error = (e.event_type == "complete" && event["status"] == "failed")
                    .then(|| event["error"].as_str().unwrap_or("failed").to_owned());
                self.queue.push_back(Item::TurnEnded {
                    terminal: e.event_type,
                    error,
                });
                self.finished = true;
            }
            Scope::Task { .. }
                if terminal || matches!(e.event_type.as_str(), "turn_started" | "system") =>
            {
                self.queue.push_back(Item::StatusMayChange);
            }
            _ => {}
        }
    }

    /// A volatile frame (a text or reasoning delta).
    fn volatile(&mut self, frame: &Frame) {
        if self.fence.is_some() {
            return;
        }
        self.volatile_seen += 1;
        if !self.in_scope() {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&frame.data) else {
            return;
        };
        let step = &v["event"]["step"];
        let kind = match step["type"].as_str() {
            Some("text_delta") => DeltaKind::Text,
            Some("reasoning_delta") => DeltaKind::Reasoning,
            _ => return,
        };
        let Some(delta) = step["delta"].as_str() else {
            return;
        };
        let mut out = Vec::new();
        self.projector.delta(kind, delta, &mut out);
        self.queue.extend(out.into_iter().map(Item::Update));
    }

    /// A live durable frame: the stored event it announces.
    async fn live_durable(&mut self, frame: &Frame) -> Result<()> {
        let Some(seq) = frame.seq else {
            return Ok(());
        };
        if self.fence.is_some_and(|f| seq >= f) {
            self.fence = None;
        }
        if seq <= self.last {
            return Ok(());
        }
        if let Scope::Turn { input_seq } = self.scope
            && self.started.is_none()
            && frame.event_type.as_ref() == "turn_started"
            && let Some(started) = self.store.log().input_turn(self.key.pk, input_seq).await?
        {
            if started == seq {
                self.started = Some(started);
                self.last = seq;
                self.volatile_seen = 0;
                return Ok(());
            }
            // Our input joined a turn that started earlier: catch up from the store.
            self.last = self.last.min(started);
            return self.resync().await;
        }
        let event = serde_json::from_str::<Value>(&frame.data)
            .map(|mut v| v["event"].take())
            .unwrap_or(Value::Null);
        if !self.in_scope() || content::content_of(&event).is_none() {
            // Not a message: the frame says all that matters.
            self.stored(
                StoredEvent {
                    seq,
                    created_at: 0,
                    event_type: frame.event_type.to_string(),
                    body: event.to_string(),
                },
                None,
            );
            return Ok(());
        }
        // A message: its time comes from the store, so it reads the same as in a list.
        let stored = self
            .store
            .log()
            .events_after(self.key.pk, seq - 1, 1)
            .await?;
        match stored.into_iter().next().filter(|e| e.seq == seq) {
            Some(e) => {
                let revises = self.revises(&e).await?;
                self.stored(e, revises);
            }
            // Deleted meanwhile: the bus closes the stream next.
            None => self.last = seq,
        }
        Ok(())
    }

    /// The next item; `None` once the followed turn ended or the task is gone.
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let keepalive = tokio::time::sleep(self.keepalive);
            let step = tokio::select! {
                msg = self.sub.rx.recv() => match msg {
                    Ok(frame) if frame.seq.is_some() => self.live_durable(&frame).await,
                    Ok(frame) => {
                        self.volatile(&frame);
                        Ok(())
                    }
                    // Fell behind the bus: catch up from the store on a new subscription.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        match self.store.bus().subscribe(&self.key.id) {
                            Ok(sub) => {
                                self.sub = sub;
                                self.resync().await
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        self.close();
                        Ok(())
                    }
                },
                () = keepalive => return Some(Item::Keepalive),
                _ = self.closed.changed() => {
                    self.close();
                    Ok(())
                }
            };
            if let Err(e) = step {
                tracing::warn!(error = %e, task = %self.key.id, "task stream ended");
                self.close();
            }
        }
    }

    fn close(&mut self) {
        self.queue.push_back(Item::Closed);
        self.finished = true;
    }

    pub fn key(&self) -> &SessionKey {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: u64, body: Value) -> StoredEvent {
        StoredEvent {
            seq,
            created_at: 0,
            event_type: body["type"].as_str().unwrap_or("").to_owned(),
            body: body.to_string(),
        }
    }

    #[test]
    fn streamed_text_is_start_deltas_done_and_whole_messages_are_full() {
        let mut p = Projector::new("01a230e0-2fb4-74a8-96c2-a7ccc4e59a3d", true);
        let mut out = Vec::new();
        p.delta(DeltaKind::Text, "chunk 1 ", &mut out);
        p.delta(DeltaKind::Text, "chunk 2 ", &mut out);
        let text = json!({"type": "step", "step": {"type": "text", "text": "chunk 1 chunk 2 "}});
        p.durable(&stored(5, text.clone()), &text, None, &mut out);
        let tool = json!({"type": "step", "step": {"type": "tool_call_start", "toolName": "t",
            "toolCallId": "c"}});
        p.durable(&stored(6, tool.clone()), &tool, None, &mut out);
        let types: Vec<&str> = out.iter().map(|u| u["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["start", "delta", "delta", "done", "full"]);
        let joined: String = out
            .iter()
            .filter_map(|u| u["delta"]["text_delta"].as_str())
            .collect();
        assert_eq!(joined, out[3]["parent_task_message"]["content"]["content"]);
        assert_eq!(out[0]["index"], 0);
        assert_eq!(out[4]["index"], 1);
        let prompt = json!({"type": "prompt_submitted", "prompt": "x", "inputKind": "message",
            "behavior": "steer", "sender": {"kind": "system"}});
        let before = out.len();
        p.durable(&stored(7, prompt.clone()), &prompt, None, &mut out);
        assert_eq!(out.len(), before, "a turn's answer leaves the inputs out");
        p.delta(DeltaKind::Reasoning, "hm", &mut out);
        p.close(&mut out);
        assert_eq!(out.last().unwrap()["type"], "done");
        assert!(out.last().unwrap().get("parent_task_message").is_none());
    }
}
