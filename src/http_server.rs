//! The HTTP server of `deepcli up` and `deepcli access serve`: HTTP/1.1 connections on hyper,
//! each bounded in time, and a graceful shutdown. A connection that opens with HTTP/2's
//! preface (cleartext, prior knowledge: a gRPC client, A2A's gRPC binding) is served as HTTP/2.
//!
//! A connection that sends nothing, or takes longer than the idle timeout to send a request's
//! headers, or stays idle that long between requests, is closed (hyper's header-read timeout
//! runs from the moment a connection waits for a request). The handlers bound the body the same
//! way. So idle or slow connections cannot pile up and hold descriptors forever. An HTTP/2
//! connection must send its preface within the idle timeout too, then is pinged as often: one
//! whose peer stops answering the pings is closed.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};

/// What an HTTP/2 connection with prior knowledge opens with (RFC 9113, 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
    let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .keep_alive_interval(Some(idle_timeout))
        .keep_alive_timeout(idle_timeout);
    // Told to the connections still being looked at (`opens_http2`) when the server stops:
    // each holds a watcher of the graceful shutdown, which would otherwise wait for a
    // connection that sends nothing until its idle timeout.
    let (closing, closed) = tokio::sync::watch::channel(false);
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
        let watcher = graceful.watcher();
        let (http1, http2) = (builder.clone(), h2.clone());
        let mut closed = closed.clone();
        tokio::spawn(async move {
            let opens = tokio::select! {
                opens = opens_http2(&stream, idle_timeout) => opens,
                _ = closed.wait_for(|closed| *closed) => None,
            };
            let ended = match opens {
                None => return,
                Some(false) => {
                    let c = http1.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(c).await
                }
                Some(true) => {
                    // HTTP/2 writes a response's headers, data and trailers as frames of their
                    // own: without this, Nagle's algorithm holds the last for the client's
                    // delayed ACK (40 ms a unary gRPC call, measured).
                    let _ = stream.set_nodelay(true);
                    let c = http2.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(c).await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    graceful.shutdown().await;
}

/// Whether the connection opens with HTTP/2's preface (`Some(true)`), with anything else
/// (`Some(false)`: HTTP/1.1, whose own timeouts then apply), or sends nothing within `idle`
/// or closes (`None`). Peeks only: the bytes are left for the connection.
async fn opens_http2(stream: &TcpStream, idle: Duration) -> Option<bool> {
    let look = async {
        let mut buf = [0u8; 24];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            if buf[..n] != H2_PREFACE[..n] {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // Part of the preface so far: peek again once more has come.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(idle, look).await.ok().flatten()
}
