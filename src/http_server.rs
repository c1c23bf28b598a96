//! The HTTP server of `deepcli up` and `deepcli access serve`: HTTP/1.1 connections on hyper,
//! each bounded in time, and a graceful shutdown.
//!
//! A connection that sends nothing, or takes longer than the idle timeout to send a request's
//! headers, or stays idle that long between requests, is closed (hyper's header-read timeout
//! runs from the moment a connection waits for a request). The handlers bound the body the same
//! way. So idle or slow connections cannot pile up and hold descriptors forever.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// Serves `app` on `listener` until `shutdown` completes, then lets the requests in flight
/// finish (closing idle connections at once) and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was taken: neither
                    // ends the server. Pause so a full descriptor table is not a busy loop.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
