//! `deepcli access serve --plan FILE`: the Access API on a published routing plan, without a
//! config or a controller. It reloads the file when its generation changes (an invalid file is
//! logged once and the plan in force keeps serving). It manages no runtimes: every route is
//! answered, no message is delivered (202 "no runtime managed here").

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use prometheus_client::metrics::gauge::ConstGauge;

use super::store::AccessStore;
use super::{Access, AccessPlan, AccessSettings};
use crate::routing::document::PlanDocument;
use crate::state::{StateDir, StateError};

/// How often the plan file is checked for a new generation.
const POLL: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("cannot read the routing plan `{}`: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the routing plan `{}` is not valid: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Reads and checks a published plan.
pub(crate) fn load(path: &Path) -> Result<AccessPlan, ServeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ServeError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |message: String| ServeError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let doc = PlanDocument::parse(&text).map_err(|e| invalid(e.to_string()))?;
    let meta = crate::routing::document::PlanMeta {
        format_version: doc.format_version.clone(),
        generation: doc.generation,
        content_hash: doc.content_hash.clone(),
        config_hash: doc.config_hash.clone(),
    };
    let accounts = doc.plan.accounts.clone();
    let counts = (doc.plan.agents.len(), doc.plan.bindings.len());
    let routing = doc.into_plan().map_err(|e| invalid(e.to_string()))?;
    Ok(AccessPlan::new(
        routing,
        &accounts,
        Default::default(),
        meta,
        counts,
    ))
}

#[derive(Clone)]
struct Ctx {
    access: Arc<Access>,
    token: Arc<str>,
}

async fn metrics(State(cx): State<Ctx>, headers: HeaderMap) -> Response {
    if let Err(denied) = super::http::operator(&cx.token, &headers) {
        return denied;
    }
    let mut registry = crate::metrics::Registry::default();
    registry.register(
        "deepcli_routing_generation",
        "The routing plan generation in force",
        ConstGauge::new(cx.access.plan().map_or(0, |p| p.generation)),
    );
    cx.access.metrics.register(&mut registry);
    crate::metrics::respond(&registry, &headers)
}

/// Serves `plan` until SIGINT or SIGTERM.
pub(crate) async fn run(
    plan: PathBuf,
    state: StateDir,
    listen: SocketAddr,
    settings: AccessSettings,
) -> Result<(), ServeError> {
    let first = load(&plan)?;
    // Listening first: a server that cannot start creates no state and no token.
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| ServeError::Listen {
            addr: listen,
            source,
        })?;
    let publisher = Arc::new(super::Publisher::default());
    let store = AccessStore::open(&state)?;
    // The WAL copied back off the turns' path, as under `deepcli up`.
    let _checkpointer = crate::state::Checkpointer::start(&state)?;
    let access = Arc::new(Access::new(
        store,
        &state,
        publisher.served(),
        None,
        settings,
    ));
    publisher.publish(first);
    let token: Arc<str> = Arc::from(crate::state::operator_token(&state)?);
    let addr = listener.local_addr().unwrap_or(listen);
    tracing::info!(%addr, plan = %plan.display(), "deepcli access serve");

    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .with_state(Ctx {
            access: access.clone(),
            token: token.clone(),
        })
        .merge(super::http::router(access.clone(), token))
        .fallback(super::http::no_such_endpoint)
        .method_not_allowed_fallback(super::http::wrong_method);
    let idle = access.settings.idle_timeout;
    let watcher = tokio::spawn(watch(plan, access, publisher));
    let stop = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            Some(()) = async { term.as_mut()?.recv().await } => {}
        }
    };
    crate::http_server::serve(listener, app, idle, stop).await;
    watcher.abort();
    Ok(())
}

/// Swaps in the plan file's new generations as they appear.
async fn watch(path: PathBuf, access: Arc<Access>, publisher: Arc<super::Publisher>) {
    let mut last_error = None;
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut seen = stamp(&path);
    loop {
        tokio::time::sleep(POLL).await;
        // Parsed again only when the file changed (a publish renames a new file in).
        let now = stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        let path = path.clone();
        let loaded = tokio::task::spawn_blocking(move || load(&path)).await;
        match loaded {
            Ok(Ok(plan)) => {
                last_error = None;
                if access
                    .plan()
                    .is_none_or(|p| p.generation != plan.generation)
                {
                    publisher.publish(plan);
                }
            }
            Ok(Err(e)) => {
                let message = e.to_string();
                if last_error.as_ref() != Some(&message) {
                    tracing::error!(error = %message, "routing plan not reloaded; the plan in force keeps serving");
                    last_error = Some(message);
                }
            }
            Err(_) => {}
        }
    }
}
