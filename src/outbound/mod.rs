//! Outbound webhooks: sessiond calling its users' endpoints when something happens in a
//! workspace, signed as Standard Webhooks so receivers can verify every delivery. Not to be
//! confused with `agentex::webhooks`, the inbound triggers that call into sessiond.

pub mod address;
pub mod signature;
