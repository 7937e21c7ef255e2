//! The embedded web UI: the files of `static/`, compiled into the binary.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use rust_embed::RustEmbed;

#[derive(RustEmbed)]
#[folder = "../../static/"]
struct Assets;

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "json" => "application/json",
        _ => "application/octet-stream",
    }
}

/// Pages of the single-page app that are entered by URL (the app routes the rest by fragment).
const APP_PAGES: [&str; 4] = ["", "setup", "login", "reset"];

/// Serves the app at `/`, `/setup`, `/login` and `/reset`, and its files under `/ui/...`.
pub async fn asset(req: HttpRequest) -> HttpResponse {
    let path = req.path().trim_start_matches('/');
    let path = match path.strip_prefix("ui/") {
        Some(file) => file,
        None if APP_PAGES.contains(&path) => "index.html",
        None => path,
    };
    match Assets::get(path) {
        Some(file) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, content_type(path)))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .insert_header((
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ))
            .body(file.data.into_owned()),
        None => crate::error::response_of(&sessiond_core::Error::NotFound),
    }
}
