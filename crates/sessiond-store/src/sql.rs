//! The store's SQL layer: the `sessiond-sql` crate (one rusqlite-shaped API over SQLite and
//! PostgreSQL), seen from the store. Its errors become sessiond's here, in one place: a row
//! closure's own [`Error`](crate::Error) travels through the layer and comes back as it
//! was.

pub use sessiond_sql::*;
