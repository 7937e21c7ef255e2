//! Outbound webhooks: sessiond calling its users' endpoints when something happens in a
//! workspace, signed as Standard Webhooks so receivers can verify every delivery. Not to be
//! confused with `agentex::webhooks`, the inbound triggers that call into sessiond.
//!
//! `subscriptions` is what members make and see; the outbox it feeds is written by the store in
//! the transaction of each event (`store::outbound`); `deliver` sends it, signed by `signature`,
//! to the addresses `destination` allows (`address`: the internal ranges).

pub mod address;
pub mod deliver;
pub mod destination;
pub mod signature;
pub mod subscriptions;
