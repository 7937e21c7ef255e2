//! Where the store publishes what it commits: the port its writers speak to the live fan-out.
//!
//! The store does not know who listens. After a commit, and before it answers the callers, the
//! writer tells the sink which seqs are committed ([`Sink::committed`]), then publishes each
//! durable frame in commit order ([`Sink::publish`]); with PostgreSQL, the frames and deltas
//! other processes committed or streamed arrive through the same port. The server's in-memory bus
//! is the one implementation; tests may bring their own.

use sessiond_model::frame::Frame;
use sessiond_model::timeline::Step;

/// Hands what the other processes sharing the database need of this process's live state to
/// them. Set once by a backend that has other processes to tell.
///
/// A delta goes only to processes that asked for the session's deltas: each process asks when a
/// session gets its first stream there ([`Relay::watch`]), and the process that streams the
/// deltas first sends what the session's tail already holds ([`Sink::with_tail`]).
pub trait Relay: Send + Sync {
    /// A delta published on this process after durable seq `after_seq`; whether it went to
    /// another process. Called while the sink holds the lock that orders the session's volatile
    /// frames, so that a tail read with [`Sink::with_tail`] and the deltas relayed after it
    /// neither overlap nor leave a gap.
    fn delta(&self, session: &str, after_seq: u64, step: &Step) -> bool;

    /// `session` got its first stream on this process: the processes that stream its deltas are
    /// asked to relay them here.
    fn watch(&self, session: &str);
}

impl<R: Relay + ?Sized> Relay for std::sync::Arc<R> {
    fn delta(&self, session: &str, after_seq: u64, step: &Step) -> bool {
        R::delta(self, session, after_seq, step)
    }

    fn watch(&self, session: &str) {
        R::watch(self, session)
    }
}

/// A session's volatile tail as steps, each with the durable seq it follows.
pub type TailSteps = [(u64, Step)];

/// The live fan-out the store publishes its commits to.
pub trait Sink: Send + Sync {
    /// Durable frames up to these seqs, in commit order, are committed and about to be published:
    /// a volatile frame published after one of them waits for it.
    fn committed(&self, seqs: &mut dyn Iterator<Item = (&str, u64)>);

    /// Publishes one committed event, in seq order per session.
    fn publish(&self, session_id: &str, frame: Frame);

    /// The last durable seq this process's live state for a session has sent, if it has any:
    /// what another process's commit is compared with.
    fn sent_seq(&self, session_id: &str) -> Option<u64>;

    /// Every session with live state on this process and the last durable seq sent to it.
    fn live_topics(&self) -> Vec<(String, u64)>;

    /// Ends every live stream of a session that was deleted.
    fn close_session(&self, session_id: &str);

    /// Publishes a delta another process streamed (it is not relayed again).
    fn publish_peer_delta(&self, session_id: &str, after_seq: u64, step: &Step);

    /// Hands every delta streamed on this process, and every session's first stream, to `relay`
    /// as well (once).
    fn set_relay(&self, relay: Box<dyn Relay>);

    /// Calls `start` with the session's volatile tail — each delta with the durable seq it
    /// follows — while holding the lock under which [`Relay::delta`] is called for the session:
    /// what `start` begins to relay continues the tail exactly. `start` says whether it sent the
    /// tail to other processes. A tail of which any part was sent already comes empty: the other
    /// processes keep what is relayed to them.
    fn with_tail(&self, session_id: &str, start: &mut dyn FnMut(&TailSteps) -> bool);

    /// Every session with a stream on this process that asked for deltas.
    fn watched_sessions(&self) -> Vec<String>;
}

/// A sink for the store's own tests: it records what it is told, in order.
#[cfg(test)]
pub(crate) mod recorder {
    use std::sync::{Arc, Mutex};

    use super::{Frame, Relay, Sink, Step, TailSteps};

    /// What a [`Recorder`] was told.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) enum Told {
        Committed(String, u64),
        Published(String, Option<u64>),
    }

    #[derive(Default)]
    pub(crate) struct Recorder(Mutex<Vec<Told>>);

    impl Recorder {
        pub(crate) fn new() -> Arc<Recorder> {
            Arc::new(Recorder::default())
        }

        pub(crate) fn told(&self) -> Vec<Told> {
            self.0.lock().unwrap().clone()
        }
    }

    impl Sink for Recorder {
        fn committed(&self, seqs: &mut dyn Iterator<Item = (&str, u64)>) {
            let mut told = self.0.lock().unwrap();
            told.extend(seqs.map(|(s, q)| Told::Committed(s.to_owned(), q)));
        }

        fn publish(&self, session_id: &str, frame: Frame) {
            let told = Told::Published(session_id.to_owned(), frame.seq);
            self.0.lock().unwrap().push(told);
        }

        fn sent_seq(&self, _: &str) -> Option<u64> {
            None
        }

        fn live_topics(&self) -> Vec<(String, u64)> {
            Vec::new()
        }

        fn close_session(&self, _: &str) {}

        fn publish_peer_delta(&self, _: &str, _: u64, _: &Step) {}

        fn set_relay(&self, _: Box<dyn Relay>) {}

        fn with_tail(&self, _: &str, start: &mut dyn FnMut(&TailSteps) -> bool) {
            start(&[]);
        }

        fn watched_sessions(&self) -> Vec<String> {
            Vec::new()
        }
    }
}
