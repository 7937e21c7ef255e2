//! The input queue's idempotency: the `clientRequestId`s a workspace's inputs came with, and the
//! result a retry of one of them gets.

use super::{SessionKey, Store, Tx};
use crate::error::{Error, Result};

/// A retried `clientRequestId`: the request it must match (by its fingerprint) to be answered
/// with the original result.
#[derive(Debug, Clone)]
pub struct Retry {
    pub workspace_id: String,
    pub client_request_id: String,
    pub fingerprint: String,
}

fn replayed(c: &super::sql::Db, r: &Retry) -> Result<Option<(SessionKey, u64)>> {
    match super::client_request(c, &r.workspace_id, &r.client_request_id)? {
        None => Ok(None),
        Some(found) if found.fingerprint == r.fingerprint => {
            let key = super::session_key(c, &r.workspace_id, &found.session_id)?;
            Ok(Some((key, found.input_seq)))
        }
        Some(_) => Err(Error::IdempotencyConflict),
    }
}

impl Tx<'_> {
    /// The session and input seq a retried request first made, inside the write that would make
    /// them again (so two racing requests cannot both be first); 409 when the id came with
    /// another request.
    pub fn replayed(&self, r: &Retry) -> Result<Option<(SessionKey, u64)>> {
        replayed(self.conn, r)
    }
}

/// Reads of the input queue.
#[derive(Clone, Copy)]
pub struct InputReads<'a> {
    store: &'a Store,
}

impl Store {
    /// Reads of the input queue and its idempotency records.
    pub fn inputs(&self) -> InputReads<'_> {
        InputReads { store: self }
    }
}

impl InputReads<'_> {
    /// [`Tx::replayed`] on a read connection, before anything else about a request is resolved.
    pub async fn replayed(&self, r: Retry) -> Result<Option<(SessionKey, u64)>> {
        self.store.read(move |c| replayed(c, &r)).await
    }
}
