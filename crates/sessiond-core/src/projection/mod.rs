//! Rules both the sessions core and the runner apply to what the store holds: a session's budget
//! (`budget.rs`) and its conversation as its terminals recorded it (`conversation.rs`). The
//! fields of a session's row derived from its turn, its machine and its queue (the bucket, the
//! follow-up queue) are kept in step inside the store, by the unit of work that changes them
//! (`store::projections`).

pub mod budget;
pub mod conversation;
