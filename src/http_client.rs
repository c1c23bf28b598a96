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

/// `e` and its causes in one line, without its URL (a Telegram URL holds the bot token).
pub(crate) fn error_text(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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

/// How far a connection to a URL's host got, step by step, when it got an answer:
/// [`reach`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reached {
    pub host: String,
    pub port: u16,
    /// The proxy the request went through (from the environment); the name and connect steps
    /// were then the proxy's, not tried from here.
    pub proxy: Option<String>,
    /// The HTTP status the host answered a request without credentials with.
    pub status: u16,
}

/// The step at which a connection to a URL's host failed ([`reach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unreachable {
    /// The URL names no host.
    NoHost(String),
    /// The name did not resolve (or to no address).
    Dns { host: String, error: String },
    /// No address of the host took a TCP connection; `addr` is the last one tried.
    Connect {
        host: String,
        port: u16,
        addr: std::net::SocketAddr,
        why: String,
    },
    /// Connected, but TLS (or the request through the proxy) failed, or no answer came.
    Answer {
        host: String,
        port: u16,
        why: String,
    },
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreachable::NoHost(url) => write!(f, "`{url}` is not a URL with a host"),
            Unreachable::Dns { host, error } => {
                write!(f, "DNS failed: cannot resolve {host}: {error}")
            }
            Unreachable::Connect {
                host,
                port,
                addr,
                why,
            } => {
                write!(f, "network unreachable: cannot connect to {host}:{port}")?;
                if addr.ip().to_string() != host.trim_start_matches('[').trim_end_matches(']') {
                    write!(f, " ({addr})")?;
                }
                write!(f, ": {why}")
            }
            Unreachable::Answer { host, port, why } => {
                write!(f, "no HTTP answer from {host}:{port}: {why}")
            }
        }
    }
}

impl std::error::Error for Unreachable {}

/// Whether the environment points requests to `url`'s scheme at a proxy (the variables
/// [`builder`]'s client honours), and which.
fn proxy_for(scheme: &str) -> Option<String> {
    let names: &[&str] = if scheme == "https" {
        &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    };
    names
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
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

/// Reaches `url`'s host one step at a time, each within what is left of `timeout`: the name
/// resolved, a TCP connection to one of its addresses, then a `GET` without credentials over
/// [`builder`]'s client (TLS for `https`), any HTTP status counting as an answer. With a proxy
/// in the environment only the last step is tried: the proxy resolves and connects. Sends no
/// credential: it says whether the host answers from here, not whether a token is good.
pub(crate) async fn reach(url: &str, timeout: std::time::Duration) -> Result<Reached, Unreachable> {
    let deadline = tokio::time::Instant::now() + timeout;
    let parsed = reqwest::Url::parse(url).map_err(|_| Unreachable::NoHost(url.to_string()))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| Unreachable::NoHost(url.to_string()))?
        .to_string();
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| Unreachable::NoHost(url.to_string()))?;
    let proxy = proxy_for(parsed.scheme());
    if proxy.is_none() {
        // An IPv6 literal keeps its brackets in the URL, not in the lookup.
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let addrs: Vec<std::net::SocketAddr> =
            match tokio::time::timeout_at(deadline, tokio::net::lookup_host((bare.as_str(), port)))
                .await
            {
                Err(_) => {
                    return Err(Unreachable::Dns {
                        host,
                        error: "timed out".into(),
                    });
                }
                Ok(Err(e)) => {
                    return Err(Unreachable::Dns {
                        host,
                        error: e.to_string(),
                    });
                }
                Ok(Ok(addrs)) => addrs.collect(),
            };
        let Some(first) = addrs.first().copied() else {
            return Err(Unreachable::Dns {
                host,
                error: "no address".into(),
            });
        };
        let mut failed = (first, String::from("timed out"));
        let mut connected = false;
        for addr in addrs {
            match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(_)) => {
                    connected = true;
                    break;
                }
                Ok(Err(e)) => failed = (addr, connect_why(&e)),
                Err(_) => {
                    failed = (addr, "timed out".into());
                    break;
                }
            }
        }
        if !connected {
            return Err(Unreachable::Connect {
                host,
                port,
                addr: failed.0,
                why: failed.1,
            });
        }
    }
    let answer = |why: String| Unreachable::Answer {
        host: host.clone(),
        port,
        why,
    };
    let client = builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| answer(format!("cannot build the HTTP client: {e}")))?;
    let sent = tokio::time::timeout_at(deadline, client.get(parsed.clone()).send()).await;
    let response = match sent {
        Err(_) => return Err(answer("no answer in time".into())),
        Ok(Err(e)) => {
            return Err(answer(error_text(e)));
        }
        Ok(Ok(response)) => response,
    };
    Ok(Reached {
        host,
        port,
        proxy,
        status: response.status().as_u16(),
    })
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
    async fn reach_names_the_step_that_failed() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let timeout = std::time::Duration::from_secs(10);
        match reach(&format!("http://{closed}/"), timeout).await {
            Err(Unreachable::Connect { why, addr, .. }) => {
                assert_eq!(why, "connection refused");
                assert_eq!(addr, closed);
            }
            other => panic!("{other:?}"),
        }
        // `.invalid` never resolves (RFC 2606).
        assert!(
            matches!(
                reach("https://deepcli-test.invalid/", timeout).await,
                Err(Unreachable::Dns { .. })
            ),
            "a name that does not resolve"
        );
        assert!(matches!(
            reach("not a url", timeout).await,
            Err(Unreachable::NoHost(_))
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let reached = reach(&format!("http://{addr}/api"), timeout).await.unwrap();
        assert_eq!((reached.port, reached.status), (addr.port(), 404));
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
