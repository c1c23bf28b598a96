//! `network: allowlist` (isolation.md): the runtime's network namespace has only loopback, on
//! which [`forward`] (run inside the sandbox, in front of the runtime's command) listens at
//! [`super::PROXY_ADDR`] and carries every connection over the Unix socket the sandbox is
//! given to [`Proxy`], in the controller. The proxy reads the request's head — `CONNECT
//! host:port` for HTTPS, an absolute-form `GET http://host/…` for plain HTTP — and connects
//! only to a host name `allowedDomains` names; anything else is answered 403, logged and
//! counted per agent. Names are resolved by the controller, never by the sandbox.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

/// The longest request head the proxy reads.
const HEAD_LIMIT: usize = 16 * 1024;

/// Refusals per agent, for `/metrics` (`deepcli_sandbox_egress_refused_total{agent}`).
pub(crate) type Refusals = Arc<Mutex<BTreeMap<String, u64>>>;

/// Whether `host` is one `allowed` names: a name exactly (case aside), or `*.suffix` for any
/// name below the suffix (not the suffix itself).
pub(crate) fn allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allowed.iter().any(|pattern| {
        let pattern = pattern.to_ascii_lowercase();
        match pattern.strip_prefix("*.") {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
            None => host == pattern,
        }
    })
}

/// What a request head asks the proxy for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// `CONNECT host:port`: a tunnel (HTTPS).
    Tunnel { host: String, port: u16 },
    /// An absolute-form request (`GET http://host[:port]/…`): forwarded as it is.
    Plain { host: String, port: u16 },
}

impl Ask {
    fn host(&self) -> &str {
        match self {
            Ask::Tunnel { host, .. } | Ask::Plain { host, .. } => host,
        }
    }

    fn port(&self) -> u16 {
        match self {
            Ask::Tunnel { port, .. } | Ask::Plain { port, .. } => *port,
        }
    }
}

/// The proxy's reading of a request head's first line; `Err` says why it cannot serve it.
pub(crate) fn parse_head(head: &str) -> Result<Ask, String> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not an HTTP request line: `{line}`"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("`{version}` is not HTTP/1.x"));
    }
    let host_port = |authority: &str, default: u16| -> Result<(String, u16), String> {
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("bad port in `{authority}`"))?,
            ),
            _ => (authority, default),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("no host in `{authority}`"));
        }
        Ok((host.to_string(), port))
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = host_port(target, 443)?;
        return Ok(Ask::Tunnel { host, port });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(format!(
            "`{method} {target}`: the proxy takes CONNECT, or an http:// URL"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let (host, port) = host_port(authority, 80)?;
    Ok(Ask::Plain { host, port })
}

/// The egress proxy of one agent's sandbox, listening on its Unix socket.
pub(crate) struct Proxy {
    pub agent_id: String,
    pub domains: Vec<String>,
    pub refusals: Refusals,
}

impl Proxy {
    /// Serves `listener` until the task is aborted.
    pub(crate) async fn serve(self, listener: UnixListener) -> std::io::Result<()> {
        let this = Arc::new(self);
        loop {
            let (stream, _) = listener.accept().await?;
            let this = this.clone();
            tokio::spawn(async move { this.one(stream).await });
        }
    }

    async fn one(&self, mut client: UnixStream) {
        let head = match read_head(&mut client).await {
            Ok(head) => head,
            Err(_) => return,
        };
        let text = String::from_utf8_lossy(&head).into_owned();
        let ask = match parse_head(&text) {
            Ok(ask) => ask,
            Err(why) => {
                let _ = answer(&mut client, 400, &why).await;
                return;
            }
        };
        if !allowed(ask.host(), &self.domains) {
            self.refused(&ask);
            let why = format!(
                "deepcli's sandbox refuses `{}`: not in this agent's sandbox.allowedDomains",
                ask.host()
            );
            let _ = answer(&mut client, 403, &why).await;
            return;
        }
        let upstream = match connect(ask.host(), ask.port()).await {
            Ok(upstream) => upstream,
            Err(e) => {
                let _ = answer(
                    &mut client,
                    502,
                    &format!("cannot reach `{}`: {e}", ask.host()),
                )
                .await;
                return;
            }
        };
        let mut upstream = upstream;
        match ask {
            Ask::Tunnel { .. } => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Ask::Plain { .. } => {
                if upstream.write_all(&head).await.is_err() {
                    return;
                }
            }
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }

    fn refused(&self, ask: &Ask) {
        tracing::warn!(
            agent = %self.agent_id,
            host = ask.host(),
            port = ask.port(),
            "sandbox egress refused: not in sandbox.allowedDomains"
        );
        if let Ok(mut map) = self.refusals.lock() {
            *map.entry(self.agent_id.clone()).or_default() += 1;
        }
    }
}

/// The request head, up to and including the blank line (nothing after it is read).
async fn read_head(stream: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= HEAD_LIMIT || stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        head.push(byte[0]);
    }
    Ok(head)
}

async fn answer(stream: &mut UnixStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("{why}\n");
    let text = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(text.as_bytes()).await?;
    stream.shutdown().await
}

/// Connects to `host:port`, resolved here. A failpoints build resolves the names
/// `DEEPCLI_FAILPOINT_EGRESS_RESOLVE` lists (`name=127.0.0.1,…`) to that address (the tests'
/// local fakes).
async fn connect(host: &str, port: u16) -> std::io::Result<TcpStream> {
    #[cfg(feature = "failpoints")]
    if let Ok(list) = std::env::var("DEEPCLI_FAILPOINT_EGRESS_RESOLVE") {
        for pair in list.split(',') {
            if let Some((name, ip)) = pair.split_once('=')
                && name.eq_ignore_ascii_case(host)
                && let Ok(ip) = ip.parse::<std::net::IpAddr>()
            {
                return TcpStream::connect(std::net::SocketAddr::new(ip, port)).await;
            }
        }
    }
    TcpStream::connect((host, port)).await
}

/// `deepcli sandbox forward`: inside an `allowlist` sandbox, listens at `listen` (on the
/// sandbox's own loopback) and carries each connection to the proxy's socket `to`, while
/// `command` runs; exits with the command's status.
pub(crate) fn forward(listen: &str, to: &Path, command: &[String]) -> std::io::Result<i32> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command to run"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind(listen))?;
    let to = to.to_path_buf();
    runtime.spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = UnixStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    // The command on this thread, the forwarding on the runtime's (it is driven while the
    // command runs: `block_on` of the wait).
    let mut child = tokio::process::Command::new(program);
    child.args(args);
    let status = runtime.block_on(async move { child.spawn()?.wait().await })?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_match_exactly_or_below_a_wildcard_suffix() {
        let list = vec!["api.openai.com".to_string(), "*.anthropic.com".to_string()];
        assert!(allowed("api.openai.com", &list));
        assert!(allowed("API.OpenAI.com.", &list));
        assert!(allowed("api.anthropic.com", &list));
        assert!(allowed("a.b.anthropic.com", &list));
        for refused in [
            "anthropic.com",
            "evilanthropic.com",
            "openai.com",
            "api.openai.com.evil.net",
            "127.0.0.1",
            "",
        ] {
            assert!(!allowed(refused, &list), "{refused}");
        }
    }

    #[test]
    fn request_heads_say_what_they_ask_for() {
        assert_eq!(
            parse_head("CONNECT api.openai.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Ask::Tunnel {
                host: "api.openai.com".into(),
                port: 443
            })
        );
        assert_eq!(
            parse_head("GET http://user@fake.test:8080/path?q HTTP/1.1\r\n\r\n"),
            Ok(Ask::Plain {
                host: "fake.test".into(),
                port: 8080
            })
        );
        assert_eq!(
            parse_head("GET http://fake.test/ HTTP/1.0\r\n\r\n"),
            Ok(Ask::Plain {
                host: "fake.test".into(),
                port: 80
            })
        );
        assert_eq!(
            parse_head("CONNECT [::1]:22 HTTP/1.1\r\n\r\n"),
            Ok(Ask::Tunnel {
                host: "::1".into(),
                port: 22
            })
        );
        for bad in [
            "GET /relative HTTP/1.1",
            "CONNECT host:notaport HTTP/1.1",
            "garbage",
            "CONNECT host:1 SPDY/3",
        ] {
            assert!(parse_head(bad).is_err(), "{bad}");
        }
    }
}
