//! Where the store publishes what it commits: the port its writers speak to the live fan-out.
//!
//! The store does not know who listens. After a commit, and before it answers the callers, the
//! writer tells the sink which seqs are committed ([`Sink::committed`]), then publishes each
//! durable frame in commit order ([`Sink::publish`]); with PostgreSQL, the frames and deltas
//! other processes committed or streamed arrive through the same port. The server's in-memory bus
//! is the one implementation; tests may bring their own.

use sessiond_model::frame::Frame;
use sessiond_model::timeline::Step;

/// Hands a delta published on this process to the other processes sharing the database:
/// `(session, after_seq, step)`. Set once by a backend that has other processes to tell.
pub type Relay = Box<dyn Fn(&str, u64, &Step) + Send + Sync>;

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

    /// Sends every delta streamed on this process to `relay` as well (once).
    fn set_relay(&self, relay: Relay);
}

/// A sink for the store's own tests: it records what it is told, in order.
#[cfg(test)]
pub(crate) mod recorder {
    use std::sync::{Arc, Mutex};

    use super::{Frame, Relay, Sink, Step};

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

        fn set_relay(&self, _: Relay) {}
    }
}
