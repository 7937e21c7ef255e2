//! In-memory fan-out of session frames to live subscribers (SSE streams, `/wait` observers).
//!
//! Durable frames are published by the store writer only after COMMIT; volatile frames (text and
//! reasoning deltas) by the runner as they happen. Each session keeps the volatile *tail* published
//! since its last durable output, so a client that reconnects mid-turn still sees the partial text.
//!
//! The writer answers its callers before it publishes (so that a request's own answer never waits
//! behind every subscriber's wake-up), and tells the bus what it committed before either
//! ([`Bus::committed`]). A delta published by a caller that already knows of a committed frame the
//! bus has not sent yet is held back and sent right after that frame: subscribers see frames in
//! the order they happened, and the tail is never settled by a frame older than itself.
//! A subscriber that falls behind the channel capacity is cut off (it resumes by seq); publishing
//! never blocks, so a slow client can never stall the writer.
//!
//! Memory follows live work, not history: a session is in the map only while it has subscribers
//! or an unsettled tail, and its broadcast ring (`stream.channel_capacity` slots) exists only
//! while it has subscribers. The tail keeps consecutive deltas of one kind merged into one text,
//! so a reconnect replays a few frames whatever the number of deltas, and each session has its
//! own lock: waking a busy session's subscribers never holds up another session, a subscribe or
//! the writer's publishing for other sessions.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::{broadcast, watch};

use crate::error::{Error, Result};
use crate::timeline::Step;

pub use sessiond_model::frame::{Frame, FrameCache, settles_tail};

/// Bytes of volatile tail kept per session; past this the tail is dropped until the next durable
/// output (the durable `text` still arrives, only the live preview is lost on reconnect).
const TAIL_MAX_BYTES: usize = 1 << 20;

/// A piece of the volatile tail.
#[derive(Clone)]
enum TailPart {
    /// Consecutive text deltas, merged; when the first was published.
    Text(String, i64),
    /// Consecutive reasoning deltas, merged; when the first was published.
    Reasoning(String, i64),
    /// Any other volatile frame, as published, and the step it shows (relayed as it was).
    Frame(Arc<Frame>, Arc<Step>),
}

impl TailPart {
    fn into_frame(self) -> Option<Arc<Frame>> {
        match self {
            TailPart::Text(delta, at) => Frame::step(&Step::TextDelta { delta }, at).map(Arc::new),
            TailPart::Reasoning(delta, at) => {
                Frame::step(&Step::ReasoningDelta { delta }, at).map(Arc::new)
            }
            TailPart::Frame(f, _) => Some(f),
        }
    }

    /// The step this part shows: a merged text is one delta.
    fn step(&self) -> Step {
        match self {
            TailPart::Text(delta, _) => Step::TextDelta {
                delta: delta.clone(),
            },
            TailPart::Reasoning(delta, _) => Step::ReasoningDelta {
                delta: delta.clone(),
            },
            TailPart::Frame(_, step) => Step::clone(step),
        }
    }
}

#[derive(Default)]
struct TopicState {
    /// The broadcast ring; only while the session has subscribers.
    tx: Option<broadcast::Sender<Arc<Frame>>>,
    subscribers: usize,
    /// Those of the subscribers that stream deltas ([`Bus::subscribe`], not [`Bus::observe`]):
    /// while there are any, the processes that run the session's turns relay its deltas here.
    streams: usize,
    tail: Vec<TailPart>,
    tail_bytes: usize,
    /// The tail outgrew [`TAIL_MAX_BYTES`]: keep nothing until the next durable output.
    tail_dropped: bool,
    /// Some of the tail went to other processes ([`Relay`]): they keep it, so a later ask for
    /// the session's deltas is not sent it again ([`Bus::with_tail`]).
    relayed: bool,
    /// Last durable seq that settled the tail (an output of the agent); the tail continues after
    /// it. Inputs appended meanwhile (a note, a steer) do not move it.
    last_seq: u64,
    /// Taken out of the map: whoever still holds it must look the session up again.
    removed: bool,
    /// The last durable seq sent to this topic.
    sent_seq: u64,
    /// The last durable seq committed for this session while the topic existed ([`Bus::committed`]);
    /// above `sent_seq` while the writer has frames of it still to publish.
    committed_seq: u64,
    /// Volatile frames published after a committed frame that is not sent yet, in publish order.
    held: VecDeque<Held>,
}

/// A volatile frame waiting for the durable frames its publisher already knew of.
struct Held {
    /// Sent once `sent_seq` reaches this.
    until: u64,
    after_seq: u64,
    frame: Arc<Frame>,
    /// What it adds to the tail (`None` once the tail was cleared meanwhile).
    part: Option<(TailPart, usize)>,
    /// It went to other processes when it was published.
    relayed: bool,
}

impl TopicState {
    /// Nothing live: the topic may leave the map.
    fn idle(&self) -> bool {
        self.subscribers == 0 && self.tail.is_empty() && !self.tail_dropped && self.held.is_empty()
    }

    /// Sends a volatile frame published after durable seq `after_seq`: to the tail, then live.
    /// `relayed`: it went to other processes too.
    fn send_volatile(
        &mut self,
        after_seq: u64,
        frame: Arc<Frame>,
        part: Option<(TailPart, usize)>,
        relayed: bool,
    ) {
        if after_seq > self.last_seq {
            self.settle(after_seq);
        }
        if let Some((part, bytes)) = part {
            self.keep(part, bytes);
            self.relayed |= relayed;
        }
        self.send(frame);
    }

    /// Sends the held frames whose durable frames have all been sent.
    fn release_held(&mut self) {
        while self.held.front().is_some_and(|h| h.until <= self.sent_seq) {
            if let Some(h) = self.held.pop_front() {
                self.send_volatile(h.after_seq, h.frame, h.part, h.relayed);
            }
        }
    }

    fn settle(&mut self, seq: u64) {
        self.last_seq = seq;
        self.forget_tail();
    }

    /// Empties the tail and what is known of it (its size, its drop, its relay).
    fn forget_tail(&mut self) {
        self.tail = Vec::new();
        self.tail_bytes = 0;
        self.tail_dropped = false;
        self.relayed = false;
    }

    fn send(&self, frame: Arc<Frame>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(frame);
        }
    }

    /// Adds to the tail, merging a delta into the part before it when it is of the same kind.
    fn keep(&mut self, part: TailPart, bytes: usize) {
        if self.tail_dropped {
            return;
        }
        if self.tail_bytes + bytes > TAIL_MAX_BYTES {
            self.tail = Vec::new();
            self.tail_bytes = 0;
            self.tail_dropped = true;
            return;
        }
        self.tail_bytes += bytes;
        match (self.tail.last_mut(), part) {
            (Some(TailPart::Text(text, _)), TailPart::Text(delta, _))
            | (Some(TailPart::Reasoning(text, _)), TailPart::Reasoning(delta, _)) => {
                text.push_str(&delta)
            }
            (_, part) => self.tail.push(part),
        }
    }
}

#[derive(Default)]
struct Topic {
    state: Mutex<TopicState>,
}

impl Topic {
    fn lock(&self) -> MutexGuard<'_, TopicState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The session map. Lock order: the map, then a topic; a topic's lock is never held while the
/// map's is taken.
pub struct Bus {
    topics: Mutex<HashMap<String, Arc<Topic>>>,
    capacity: usize,
    max_subscribers: usize,
    closed: watch::Sender<bool>,
    /// Where deltas published here also go, and where a session's first stream asks for the
    /// deltas other processes publish, when other processes share the database (set once by the
    /// store's backend).
    relay: OnceLock<Box<dyn Relay>>,
}

pub use sessiond_store::Relay;

/// A live subscription plus the volatile tail that was current when it began.
pub struct Subscription {
    pub rx: broadcast::Receiver<Arc<Frame>>,
    /// Volatile frames published after durable output seq `tail_after` and not yet settled (inputs
    /// with higher seqs may have been appended since); consecutive deltas come merged.
    pub tail: Vec<Arc<Frame>>,
    pub tail_after: u64,
    guard: SubscriberGuard,
}

struct SubscriberGuard {
    bus: Arc<Bus>,
    topic: Arc<Topic>,
    session_id: String,
    streams: bool,
}

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        let idle = {
            let mut st = self.topic.lock();
            st.subscribers = st.subscribers.saturating_sub(1);
            if self.streams {
                st.streams = st.streams.saturating_sub(1);
            }
            if st.subscribers == 0 {
                // No receiver is left (each subscription's receiver drops before its guard):
                // free the ring.
                st.tx = None;
            }
            !st.removed && st.idle()
        };
        if idle {
            self.bus.prune(&self.session_id);
        }
    }
}

impl Subscription {
    pub fn session_id(&self) -> &str {
        &self.guard.session_id
    }
}

impl Bus {
    pub fn new(capacity: usize, max_subscribers: usize) -> Arc<Bus> {
        Arc::new(Bus {
            topics: Mutex::new(HashMap::new()),
            capacity,
            max_subscribers,
            closed: watch::channel(false).0,
            relay: OnceLock::new(),
        })
    }

    /// Hands every delta published on this process, and every session's first stream, to
    /// `relay` as well (once; later calls are ignored). Deltas that come from other processes are
    /// published with [`Bus::publish_peer_delta`], which does not relay them again.
    pub fn set_relay(&self, relay: Box<dyn Relay>) {
        let _ = self.relay.set(relay);
    }

    /// Calls `start` with the session's volatile tail (each part as one step, with the durable seq
    /// it follows), the frames held for a commit included, under the session's lock: the lock
    /// under which [`Relay::delta`] hears of each new delta (see [`sessiond_store::Relay`]).
    /// A tail of which some part went to other processes already is handed over empty: every
    /// process keeps the deltas relayed to it, so sending it again would repeat it to them.
    pub fn with_tail(
        &self,
        session_id: &str,
        start: &mut dyn FnMut(&sessiond_store::TailSteps) -> bool,
    ) {
        let idle = loop {
            let topic = self.get_or_create(session_id);
            let mut st = topic.lock();
            if st.removed {
                continue;
            }
            let parts: Vec<(u64, Step)> = if st.relayed || st.held.iter().any(|h| h.relayed) {
                Vec::new()
            } else {
                let tail = st.tail.iter().map(|part| (st.last_seq, part.step()));
                let held = st
                    .held
                    .iter()
                    .filter_map(|h| h.part.as_ref().map(|(part, _)| (h.after_seq, part.step())));
                tail.chain(held).collect()
            };
            if start(&parts) {
                st.relayed = true;
                for h in st.held.iter_mut().filter(|h| h.part.is_some()) {
                    h.relayed = true;
                }
            }
            break st.idle();
        };
        if idle {
            self.prune(session_id);
        }
    }

    /// Every session with a subscriber that streams deltas.
    pub fn watched_sessions(&self) -> Vec<String> {
        self.each_topic(|id, st| (st.streams > 0).then_some(id))
    }

    /// What `pick` takes of each session in the map, each topic locked in turn after the map's
    /// lock is let go (see the lock order on [`Bus`]).
    fn each_topic<T>(&self, mut pick: impl FnMut(String, &TopicState) -> Option<T>) -> Vec<T> {
        let topics: Vec<(String, Arc<Topic>)> = self
            .map()
            .iter()
            .map(|(id, t)| (id.clone(), Arc::clone(t)))
            .collect();
        topics
            .into_iter()
            .filter_map(|(id, t)| {
                let st = t.lock();
                if st.removed { None } else { pick(id, &st) }
            })
            .collect()
    }

    /// The last durable seq sent to a session's live state, if it has any (subscribers or a
    /// tail): what another process's commit is compared with.
    pub fn sent_seq(&self, session_id: &str) -> Option<u64> {
        let topic = self.get(session_id)?;
        let st = topic.lock();
        (!st.removed).then_some(st.sent_seq)
    }

    /// Every session with live state and the last durable seq sent to it.
    pub fn live_topics(&self) -> Vec<(String, u64)> {
        self.each_topic(|id, st| Some((id, st.sent_seq)))
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Topic>>> {
        // A panic while holding this lock cannot leave a topic half-updated in a way that matters
        // more than losing live delivery, so keep serving.
        self.topics.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, session_id: &str) -> Option<Arc<Topic>> {
        self.map().get(session_id).cloned()
    }

    fn get_or_create(&self, session_id: &str) -> Arc<Topic> {
        Arc::clone(self.map().entry(session_id.to_owned()).or_default())
    }

    /// Takes a session out of the map if nothing live is left in it.
    fn prune(&self, session_id: &str) {
        let mut map = self.map();
        let Some(topic) = map.get(session_id) else {
            return;
        };
        let mut st = topic.lock();
        if st.idle() {
            st.removed = true;
            drop(st);
            map.remove(session_id);
        }
    }

    /// Sessions with live state (subscribers or a tail).
    pub fn live_sessions(&self) -> usize {
        self.map().len()
    }

    /// Subscribes to a session's live frames, deltas included: a stream. Subscribe *before*
    /// reading the backlog, then drop duplicates by seq (invariant 5). The session's first stream
    /// on this process asks the other processes sharing the database to relay its deltas here.
    pub fn subscribe(self: &Arc<Self>, session_id: &str) -> Result<Subscription> {
        self.subscribe_as(session_id, true)
    }

    /// Subscribes to a session's frames for its durable ones (a wait for a terminal, a follower
    /// of the timeline): it may see this process's deltas too, but it does not ask the other
    /// processes for theirs.
    pub fn observe(self: &Arc<Self>, session_id: &str) -> Result<Subscription> {
        self.subscribe_as(session_id, false)
    }

    fn subscribe_as(self: &Arc<Self>, session_id: &str, streams: bool) -> Result<Subscription> {
        let (topic, rx, tail, tail_after, first_stream) = {
            let mut map = self.map();
            let topic = Arc::clone(map.entry(session_id.to_owned()).or_default());
            let mut st = topic.lock();
            if st.subscribers >= self.max_subscribers {
                return Err(Error::TooManyStreams);
            }
            st.subscribers += 1;
            let first_stream = streams && st.streams == 0;
            if streams {
                st.streams += 1;
            }
            let rx = st
                .tx
                .get_or_insert_with(|| broadcast::channel(self.capacity).0)
                .subscribe();
            let tail = st.tail.clone();
            let tail_after = st.last_seq;
            drop(st);
            drop(map);
            (topic, rx, tail, tail_after, first_stream)
        };
        if first_stream && let Some(relay) = self.relay.get() {
            relay.watch(session_id);
        }
        // Serialising the merged tail happens outside every lock.
        let tail = tail.into_iter().filter_map(TailPart::into_frame).collect();
        Ok(Subscription {
            rx,
            tail,
            tail_after,
            guard: SubscriberGuard {
                bus: Arc::clone(self),
                topic,
                session_id: session_id.to_owned(),
                streams,
            },
        })
    }

    /// Records that durable frames up to these seqs are committed and about to be published.
    /// Called by the store writer after COMMIT and before it answers the callers, with the
    /// batch's frames in commit order; volatile frames published after one of them (by a caller
    /// that was answered) wait for it ([`Bus::publish_durable`] sends them). Only sessions with
    /// live state are touched: a session that has none has nobody to keep an order for.
    pub fn committed<'a>(&self, frames: impl IntoIterator<Item = (&'a str, u64)>) {
        let map = self.map();
        if map.is_empty() {
            return;
        }
        let mut last: Option<(&str, Option<&Arc<Topic>>)> = None;
        for (session_id, seq) in frames {
            let topic = match last {
                Some((id, topic)) if id == session_id => topic,
                _ => map.get(session_id),
            };
            last = Some((session_id, topic));
            if let Some(topic) = topic {
                let mut st = topic.lock();
                st.committed_seq = st.committed_seq.max(seq);
            }
        }
    }

    /// Publishes a committed event. Called by the store writer after COMMIT, in seq order.
    pub fn publish_durable(&self, session_id: &str, frame: Frame) {
        let Some(topic) = self.get(session_id) else {
            return;
        };
        let idle = {
            let mut st = topic.lock();
            if st.removed {
                // Pruned in between: it had no subscriber and no tail, so nobody awaits this.
                return;
            }
            let seq = frame.seq.unwrap_or(st.sent_seq);
            // A delta published after this frame's seq (its topic did not exist when the frame
            // was committed) has settled the tail already; what it left there comes after.
            if settles_tail(&frame.event_type) && seq > st.last_seq {
                st.settle(seq);
            }
            st.sent_seq = st.sent_seq.max(seq);
            st.send(Arc::new(frame));
            st.release_held();
            st.idle()
        };
        if idle {
            self.prune(session_id);
        }
    }

    /// Publishes a text or reasoning delta (volatile): to live subscribers as its own frame, and
    /// into the tail merged with the deltas before it. `after_seq` is the last durable seq the
    /// publisher knows of. It is relayed to the other processes that stream the session, if any.
    pub fn publish_delta(&self, session_id: &str, after_seq: u64, step: &Step) {
        self.publish_step(session_id, after_seq, step, true);
    }

    /// Publishes a delta another process published (it is not relayed again).
    pub fn publish_peer_delta(&self, session_id: &str, after_seq: u64, step: &Step) {
        self.publish_step(session_id, after_seq, step, false);
    }

    fn publish_step(&self, session_id: &str, after_seq: u64, step: &Step, relay: bool) {
        let now = crate::clock::now_ms();
        let Some(frame) = Frame::step(step, now).map(Arc::new) else {
            return;
        };
        let (part, bytes) = match step {
            Step::TextDelta { delta } => (TailPart::Text(delta.clone(), now), delta.len()),
            Step::ReasoningDelta { delta } => {
                (TailPart::Reasoning(delta.clone(), now), delta.len())
            }
            _ => (
                TailPart::Frame(Arc::clone(&frame), Arc::new(step.clone())),
                frame.data.len(),
            ),
        };
        let relay = if relay { Some(step) } else { None };
        self.publish_part(session_id, after_seq, frame, part, bytes, relay);
    }

    fn publish_part(
        &self,
        session_id: &str,
        after_seq: u64,
        frame: Arc<Frame>,
        part: TailPart,
        bytes: usize,
        relay: Option<&Step>,
    ) {
        loop {
            let topic = self.get_or_create(session_id);
            let mut st = topic.lock();
            if st.removed {
                continue;
            }
            let relayed = match (relay, self.relay.get()) {
                (Some(step), Some(relay)) => relay.delta(session_id, after_seq, step),
                _ => false,
            };
            if !st.held.is_empty() || (after_seq > st.sent_seq && after_seq <= st.committed_seq) {
                // The publisher knows of a committed frame not sent yet: this one follows it.
                let until = st
                    .held
                    .back()
                    .map_or(st.committed_seq, |h| h.until.max(st.committed_seq));
                st.held.push_back(Held {
                    until,
                    after_seq,
                    frame,
                    part: Some((part, bytes)),
                    relayed,
                });
                return;
            }
            st.send_volatile(after_seq, frame, Some((part, bytes)), relayed);
            return;
        }
    }

    /// Forgets a session's volatile tail (its turn ended without a durable frame after it).
    pub fn clear_tail(&self, session_id: &str) {
        let Some(topic) = self.get(session_id) else {
            return;
        };
        let idle = {
            let mut st = topic.lock();
            st.forget_tail();
            // Held frames are still sent, but were published before the clear: not a tail.
            for h in st.held.iter_mut() {
                h.part = None;
                h.relayed = false;
            }
            !st.removed && st.idle()
        };
        if idle {
            self.prune(session_id);
        }
    }

    /// Ends every live stream of a deleted session.
    pub fn close_session(&self, session_id: &str) {
        if let Some(topic) = self.map().remove(session_id) {
            let mut st = topic.lock();
            st.removed = true;
            st.tx = None;
        }
    }

    /// Ends every live stream (graceful shutdown).
    pub fn close_all(&self) {
        let _ = self.closed.send(true);
        for (_, topic) in self.map().drain() {
            let mut st = topic.lock();
            st.removed = true;
            st.tx = None;
        }
    }

    /// True once [`Bus::close_all`] has been called (the server is shutting down).
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once [`Bus::close_all`] has been called.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }
}

/// The store publishes what it commits here, and relays other processes' commits and deltas.
impl sessiond_store::Sink for Bus {
    fn committed(&self, seqs: &mut dyn Iterator<Item = (&str, u64)>) {
        Bus::committed(self, seqs)
    }

    fn publish(&self, session_id: &str, frame: Frame) {
        self.publish_durable(session_id, frame)
    }

    fn sent_seq(&self, session_id: &str) -> Option<u64> {
        Bus::sent_seq(self, session_id)
    }

    fn live_topics(&self) -> Vec<(String, u64)> {
        Bus::live_topics(self)
    }

    fn close_session(&self, session_id: &str) {
        Bus::close_session(self, session_id)
    }

    fn publish_peer_delta(&self, session_id: &str, after_seq: u64, step: &Step) {
        Bus::publish_peer_delta(self, session_id, after_seq, step)
    }

    fn set_relay(&self, relay: Box<dyn Relay>) {
        Bus::set_relay(self, relay)
    }

    fn with_tail(
        &self,
        session_id: &str,
        start: &mut dyn FnMut(&sessiond_store::TailSteps) -> bool,
    ) {
        Bus::with_tail(self, session_id, start)
    }

    fn watched_sessions(&self) -> Vec<String> {
        Bus::watched_sessions(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> Step {
        Step::TextDelta { delta: text.into() }
    }

    fn durable(seq: u64, event_type: &str) -> Frame {
        Frame::durable(seq, event_type, format!("{{\"seq\":{seq}}}"), 0)
    }

    #[test]
    fn the_tail_merges_deltas_of_one_kind_and_keeps_their_order() {
        let bus = Bus::new(16, 10);
        bus.publish_delta("s", 3, &delta("a"));
        bus.publish_delta("s", 3, &delta("b"));
        bus.publish_delta("s", 3, &Step::ReasoningDelta { delta: "r".into() });
        bus.publish_delta("s", 3, &delta("c"));
        let sub = bus.subscribe("s").unwrap();
        assert_eq!(sub.tail_after, 3);
        let data: Vec<&str> = sub.tail.iter().map(|f| f.data.as_str()).collect();
        assert_eq!(data.len(), 3, "{data:?}");
        assert!(
            data[0].contains(r#""type":"text_delta","delta":"ab""#),
            "{}",
            data[0]
        );
        assert!(
            data[1].contains(r#""reasoning_delta","delta":"r""#),
            "{}",
            data[1]
        );
        assert!(data[2].contains(r#""delta":"c""#), "{}", data[2]);
    }

    #[test]
    fn live_subscribers_still_get_every_delta() {
        let bus = Bus::new(16, 10);
        let mut sub = bus.subscribe("s").unwrap();
        bus.publish_delta("s", 1, &delta("a"));
        bus.publish_delta("s", 1, &delta("b"));
        assert!(sub.rx.try_recv().unwrap().data.contains(r#""delta":"a""#));
        assert!(sub.rx.try_recv().unwrap().data.contains(r#""delta":"b""#));
    }

    #[test]
    fn an_oversized_tail_is_dropped_until_the_next_output() {
        let bus = Bus::new(16, 10);
        let big = "x".repeat(TAIL_MAX_BYTES / 2 + 1);
        bus.publish_delta("s", 1, &delta(&big));
        bus.publish_delta("s", 1, &delta(&big));
        // What would follow the dropped part is not a tail either: it would leave a gap.
        bus.publish_delta("s", 1, &delta("after"));
        assert!(bus.subscribe("s").unwrap().tail.is_empty());
        bus.publish_durable("s", durable(2, "step"));
        bus.publish_delta("s", 2, &delta("new"));
        let sub = bus.subscribe("s").unwrap();
        assert_eq!(sub.tail.len(), 1);
        assert_eq!(sub.tail_after, 2);
    }

    #[test]
    fn sessions_leave_the_map_when_nothing_live_is_left() {
        let bus = Bus::new(16, 10);
        // A tail without subscribers: in the map, without a ring.
        bus.publish_delta("a", 1, &delta("x"));
        assert_eq!(bus.live_sessions(), 1);
        assert!(bus.get("a").unwrap().lock().tx.is_none());
        bus.publish_durable("a", durable(2, "complete"));
        assert_eq!(bus.live_sessions(), 0);

        let sub = bus.subscribe("b").unwrap();
        bus.publish_durable("b", durable(5, "complete"));
        assert_eq!(bus.live_sessions(), 1);
        drop(sub);
        assert_eq!(bus.live_sessions(), 0);

        // Inputs do not settle a tail: the session stays until an output does.
        bus.publish_delta("c", 1, &delta("x"));
        bus.publish_durable("c", durable(2, "note_submitted"));
        assert_eq!(bus.live_sessions(), 1);
        bus.clear_tail("c");
        assert_eq!(bus.live_sessions(), 0);
    }

    /// The writer answers before it publishes: a delta from a caller that knows of a committed
    /// frame the bus has not sent yet goes out after that frame (and the frames committed with
    /// it), the frame does not settle the delta out of the tail, and later deltas keep their
    /// place behind it.
    #[test]
    fn a_delta_after_a_committed_frame_waits_for_it() {
        let bus = Bus::new(16, 10);
        let mut sub = bus.subscribe("s").unwrap();
        bus.publish_delta("s", 1, &delta("old"));
        bus.committed([("s", 2), ("other", 7), ("s", 3)]);
        bus.publish_delta("s", 2, &delta("new"));
        bus.publish_delta("s", 2, &delta("er"));
        assert!(sub.rx.try_recv().unwrap().data.contains(r#""delta":"old""#));
        assert!(sub.rx.try_recv().is_err(), "held until its frame is sent");
        bus.publish_durable("s", durable(2, "step"));
        assert_eq!(sub.rx.try_recv().unwrap().data, r#"{"seq":2}"#);
        assert!(
            sub.rx.try_recv().is_err(),
            "held until the batch's frames are sent"
        );
        bus.publish_durable("s", durable(3, "note_submitted"));
        let seen: Vec<String> = std::iter::from_fn(|| sub.rx.try_recv().ok())
            .map(|f| f.data.clone())
            .collect();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert_eq!(seen[0], r#"{"seq":3}"#);
        assert!(seen[1].contains(r#""delta":"new""#), "{seen:?}");
        assert!(seen[2].contains(r#""delta":"er""#), "{seen:?}");
        let late = bus.subscribe("s").unwrap();
        assert_eq!(late.tail_after, 2);
        assert_eq!(late.tail.len(), 1);
        assert!(late.tail[0].data.contains(r#""delta":"newer""#));
        // Nothing is held now: a delta goes straight out.
        bus.publish_delta("s", 3, &delta("!"));
        assert!(sub.rx.try_recv().unwrap().data.contains(r#""delta":"!""#));
    }

    /// A session without live state when its frame was committed: a delta that knows of the
    /// frame goes out at once, and the frame, sent later, leaves the delta in the tail.
    #[test]
    fn a_frame_sent_after_a_newer_delta_keeps_the_tail() {
        let bus = Bus::new(16, 10);
        bus.committed([("s", 4)]);
        bus.publish_delta("s", 4, &delta("after four"));
        bus.publish_durable("s", durable(4, "step"));
        let sub = bus.subscribe("s").unwrap();
        assert_eq!(sub.tail_after, 4);
        assert_eq!(sub.tail.len(), 1);
        assert!(sub.tail[0].data.contains("after four"));
    }

    #[test]
    fn a_deleted_session_ends_its_streams() {
        let bus = Bus::new(16, 10);
        let mut sub = bus.subscribe("s").unwrap();
        bus.close_session("s");
        assert!(matches!(
            sub.rx.try_recv(),
            Err(broadcast::error::TryRecvError::Closed)
        ));
        drop(sub);
        assert_eq!(bus.live_sessions(), 0);
    }

    /// A relay that records what the bus hands it; it sends a delta while `sends` is set.
    #[derive(Default, Clone)]
    struct Recorded(Arc<Mutex<Vec<String>>>, Arc<std::sync::atomic::AtomicBool>);

    impl Relay for Recorded {
        fn delta(&self, session: &str, after_seq: u64, step: &Step) -> bool {
            let text = match step {
                Step::TextDelta { delta } => delta.clone(),
                other => format!("{other:?}"),
            };
            self.0
                .lock()
                .unwrap()
                .push(format!("delta {session} {after_seq} {text}"));
            self.1.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn watch(&self, session: &str) {
            self.0.lock().unwrap().push(format!("watch {session}"));
        }
    }

    impl Recorded {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut self.0.lock().unwrap())
        }

        fn sends(&self, sends: bool) {
            self.1.store(sends, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The tail as `with_tail` hands it over, `handed` saying whether it was sent.
    fn handed_over(bus: &Bus, session: &str, handed: bool) -> Vec<String> {
        let mut out = Vec::new();
        bus.with_tail(session, &mut |tail| {
            out = tail
                .iter()
                .map(|(after, step)| format!("{after} {step:?}"))
                .collect();
            handed
        });
        out
    }

    #[test]
    fn a_sessions_first_stream_asks_for_its_deltas_and_an_observer_does_not() {
        let bus = Bus::new(16, 10);
        let relay = Recorded::default();
        bus.set_relay(Box::new(relay.clone()));
        let waiting = bus.observe("s").unwrap();
        assert_eq!(relay.take(), Vec::<String>::new());
        assert!(bus.watched_sessions().is_empty());
        let first = bus.subscribe("s").unwrap();
        let second = bus.subscribe("s").unwrap();
        assert_eq!(relay.take(), ["watch s"]);
        assert_eq!(bus.watched_sessions(), ["s"]);
        drop(first);
        assert_eq!(bus.watched_sessions(), ["s"]);
        drop(second);
        assert!(bus.watched_sessions().is_empty());
        // The observer still holds the session; a new stream is a first one again.
        let _again = bus.subscribe("s").unwrap();
        assert_eq!(relay.take(), ["watch s"]);
        drop(waiting);
    }

    /// What a peer is sent when it asks: the tail, the frames held for a commit included, then
    /// every later delta — each once, in order; a tail of which some part went out already is
    /// not sent again (the other processes kept it), until an output settles it.
    #[test]
    fn a_tail_handed_over_under_the_lock_is_continued_by_the_next_delta() {
        let bus = Bus::new(16, 10);
        let relay = Recorded::default();
        bus.set_relay(Box::new(relay.clone()));
        bus.publish_delta("s", 3, &delta("a"));
        bus.publish_delta("s", 3, &delta("b"));
        // Seq 4 is committed and not sent yet: the next delta waits for it, and is handed over
        // after the tail.
        bus.committed([("s", 4)]);
        bus.publish_delta("s", 4, &delta("c"));
        assert_eq!(
            relay.take(),
            ["delta s 3 a", "delta s 3 b", "delta s 4 c"],
            "every local delta reaches the relay"
        );
        let tail = [
            format!("3 {:?}", delta("ab")),
            format!("4 {:?}", delta("c")),
        ];
        // Nobody took it: it is handed over again at the next ask.
        assert_eq!(handed_over(&bus, "s", false), tail);
        assert_eq!(handed_over(&bus, "s", true), tail);
        assert_eq!(handed_over(&bus, "s", true), Vec::<String>::new());
        relay.sends(true);
        bus.publish_delta("s", 4, &delta("d"));
        assert_eq!(relay.take(), ["delta s 4 d"]);
        // A peer's delta is never relayed again.
        bus.publish_peer_delta("s", 4, &delta("e"));
        assert_eq!(relay.take(), Vec::<String>::new());
        // An output settles the tail; what follows it went out delta by delta.
        bus.publish_durable("s", durable(4, "step"));
        bus.publish_durable("s", durable(5, "text"));
        bus.publish_delta("s", 5, &delta("f"));
        assert_eq!(relay.take(), ["delta s 5 f"]);
        assert_eq!(handed_over(&bus, "s", true), Vec::<String>::new());
        relay.sends(false);
        bus.publish_durable("s", durable(6, "text"));
        bus.publish_delta("s", 6, &delta("g"));
        assert_eq!(
            handed_over(&bus, "s", true),
            [format!("6 {:?}", delta("g"))]
        );
        // A session with nothing live: an empty tail, and nothing left in the map.
        assert_eq!(handed_over(&bus, "t", false), Vec::<String>::new());
        assert!(bus.get("t").is_none());
    }
}
