//! The id of the HTTP request being handled, for everything it causes: its log span, the inputs it
//! stores (and so the turns that run them), and the engine calls those turns make.
//!
//! The HTTP middleware sets it for the request's task (`api::middleware`); the store reads it when
//! a write is handed to the writer, so a queued input keeps the id of the request that sent it
//! (in memory: `store::writes`).

tokio::task_local! {
    static REQUEST_ID: String;
}

/// Runs `fut` with `id` as the current request id.
pub async fn scope<F: std::future::Future>(id: String, fut: F) -> F::Output {
    REQUEST_ID.scope(id, fut).await
}

/// The id of the request being handled on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}
