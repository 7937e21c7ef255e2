//! `GET …/events`: the session's timeline as the Sessions API's Server-Sent Events. Durable
//! frames carry `id: <seq>` so `EventSource` resumes with `Last-Event-ID` on its own; volatile
//! frames (deltas) carry no id. The resumable stream itself is [`super::stream`]; it ends when
//! the client hangs up, its credential is revoked, its session is deleted, or at shutdown.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};

use super::context::AppState;
use super::stream::{self, Ends, Opening, Render};
use crate::context::Caller;
use sessiond_core::bus::Frame;
use sessiond_core::error::Result;
use sessiond_core::store::StoredEvent;

/// The stored event as the seed's `{"seq":N,"event":{...}}`, spliced in verbatim.
struct SessionsApi;

impl Render for SessionsApi {
    async fn stored(&mut self, events: Vec<StoredEvent>) -> Result<Bytes> {
        let mut out = String::new();
        for e in &events {
            out.push_str(&format!(
                "id: {}\ndata: {{\"seq\":{},\"event\":{}}}\n\n",
                e.seq, e.seq, e.body
            ));
        }
        Ok(Bytes::from(out))
    }

    /// Made once per frame and shared by every subscriber.
    async fn live(&mut self, f: Arc<Frame>) -> Result<Bytes> {
        let cell = f.cache.slot::<OnceLock<Bytes>>();
        Ok(cell
            .get_or_init(|| {
                Bytes::from(match f.seq {
                    Some(seq) => format!("id: {seq}\ndata: {}\n\n", f.data),
                    None => format!("data: {}\n\n", f.data),
                })
            })
            .clone())
    }
}

pub async fn events(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    // `Last-Event-ID` wins over `since`.
    let since = stream::resume_point(&req, "since")?;
    let ends = Ends::new(&state, &actor, &req);
    let row = state.sessions.detail_row(&actor, &path.1).await?;
    let store = state.sessions.store().clone();
    let sub = store.bus().subscribe(&row.id)?;
    let keepalive = Duration::from_millis(state.sessions.config().stream.keepalive_ms);
    Ok(stream::respond(Opening {
        store,
        pk: row.pk,
        after: since,
        sub,
        keepalive,
        ends,
        render: SessionsApi,
    }))
}
