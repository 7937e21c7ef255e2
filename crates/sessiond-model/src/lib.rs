//! sessiond's vocabulary: what every layer speaks and nothing in it depends on another layer.
//!
//! The timeline's event types ([`timeline`]), ids ([`ids`]), time as the APIs speak it
//! ([`clock`]), the rule for U+0000 in kept text ([`nul`]) and the frame a live stream carries
//! ([`frame`]). A leaf crate: it links no HTTP framework, no database driver and no runtime, so
//! the store, the core and the HTTP layer can all depend on it without depending on each other.

pub mod clock;
pub mod frame;
pub mod ids;
pub mod nul;
pub mod timeline;
