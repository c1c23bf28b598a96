//! The web console (console.md): `GET /` and `/console/…` on the controller's server, pages
//! rendered on the server from the same services the CLI and the JSON API answer from — the
//! controller's status, `approvals/*`, the Hub's `sessions/*`, `runs/*`, `tasks/*` and audit
//! timeline, the Access layer's routing plan — with one small vendored script for the live
//! transcript (server-sent events). Nothing to build with Node: the templates (askama) and the
//! assets are compiled into the binary.
//!
//! * `auth.rs` — the operator token exchanged once for a session cookie; CSRF tokens.
//! * `view.rs` — what each page shows, made from the services' answers; the templates.
//! * `pages.rs` — the handlers: each page, each action (through the same service calls as
//!   `POST /rpc`), the JSON export.
//! * `live.rs` — the live transcript: the Access store's append notifications as SSE, one
//!   reader per watched session fanning its rendered lines out to every viewer.
//!
//! Cookie auth is for these routes only: the JSON API stays bearer-only, so a page elsewhere
//! can never reach it with the browser's cookie.

mod auth;
mod live;
mod pages;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;

pub(crate) use view::{AdapterRow, AgentRow, Overview, RejectedEdit};

/// What the console reads and acts through: the serving parts the controller built, and the
/// controller's status as an [`Overview`].
pub(crate) struct Sources {
    pub access: Arc<crate::access::Access>,
    pub hub: Arc<crate::hub::Hub>,
    pub approvals: Arc<crate::approvals::Approvals>,
    pub overview: Box<dyn Fn() -> Overview + Send + Sync>,
    /// The operator token the login form takes.
    pub token: Arc<str>,
}

/// The console of one controller: its sources and its signed-in sessions.
pub(crate) struct Console {
    sources: Sources,
    sessions: auth::Sessions,
    /// The live transcript's readers, one per watched session.
    feeds: Arc<live::Feeds>,
}

/// The headers every console answer carries: no script but the console's own, no frames,
/// no referrer, nothing cached.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

async fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The console's routes, for the controller's server to merge.
pub(crate) fn router(sources: Sources) -> Router {
    let console = Arc::new(Console {
        sources,
        sessions: auth::Sessions::default(),
        feeds: Arc::default(),
    });
    pages::routes(console).layer(axum::middleware::map_response(secured))
}
