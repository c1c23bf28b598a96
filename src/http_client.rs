//! Outbound HTTP: every `reqwest` client deepcli builds for its own calls starts here, so TLS
//! (rustls with the ring provider, no OpenSSL), the user agent, and the proxy and redirect rules
//! are set in one place. Timeouts stay with the caller: each knows how long its peer may take.

/// A client builder for a peer on the network: TLS through rustls and ring, deepcli's user
/// agent, proxies from the environment honoured.
pub(crate) fn builder() -> reqwest::ClientBuilder {
    // One process-wide TLS provider: ring (no OpenSSL). Installing it again is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().user_agent(concat!("deepcli/", env!("CARGO_PKG_VERSION")))
}

/// [`builder`] for a call that goes exactly where it is addressed: no proxy from the
/// environment, no redirect followed (the controller on loopback or its socket, an account's
/// reply URL).
pub(crate) fn direct() -> reqwest::ClientBuilder {
    builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
}

/// The I/O error behind `e`, when there is one (a refused or failed connect): what a message
/// about an unreachable peer names, rather than reqwest's "error sending request".
pub(crate) fn io_cause(e: &reqwest::Error) -> Option<&std::io::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        next = cause.source();
    }
    None
}

/// A failed TCP connect in a person's words: refused, no route, timed out.
pub(crate) fn connect_why(e: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::ConnectionRefused => "connection refused".into(),
        ErrorKind::NetworkUnreachable | ErrorKind::HostUnreachable => {
            format!("no route ({e})")
        }
        ErrorKind::TimedOut => "timed out".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connect_is_named_by_its_io_error() {
        // A port that was just free: nothing listens there.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let client = direct().build().unwrap();
        let e = client
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap_err();
        assert!(e.is_connect(), "{e:?}");
        let io = io_cause(&e).expect("the I/O error behind a refused connect");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused, "{io}");
    }

    #[tokio::test]
    async fn a_direct_client_does_not_follow_a_redirect() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(|| async { axum::response::Redirect::temporary("/elsewhere") }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = direct().build().unwrap();
        let response = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::TEMPORARY_REDIRECT);
    }
}
