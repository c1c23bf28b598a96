//! One HTTP/1.1 request to a controller on loopback, answered as (status, JSON body): shared by
//! the bench binaries through `#[path]`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use serde_json::Value;

/// `method path` with `headers` and `body` (sent as JSON); the status and the JSON object in
/// the answer's body (`Value::Null` when there is none). Panics when the connection fails.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\ncontent-type: application/json\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("read");
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Chunked answers (axum's JSON is sized; keep it simple): take the JSON object in the body.
    let json = body
        .find('{')
        .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
        .unwrap_or("null");
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}
