//! Push notifications (A2A 1.0, "Push Notification Objects"; a2a.md, "Push notifications"):
//! a peer's webhook for one of its tasks gets each of the task's updates — a status change, the
//! artifact — as a `StreamResponse` POSTed to its URL with the config's authentication.
//!
//! * SSRF guards ([`check`]): a webhook's host is resolved and every address it names must be
//!   public (not loopback, private, unique local, link-local, CGNAT, unspecified, multicast or
//!   reserved — IPv4-mapped and other IPv6 forms of those included) and the URL `https`, unless
//!   channels.yaml `a2a.push.allowPrivateTargets: true`. Checked when the config is made, and
//!   again at each delivery, which then connects only to the address it checked (reqwest's
//!   `resolve`), so a name that resolves elsewhere the second time (DNS rebinding) is not
//!   followed there.
//! * Delivery ([`Pusher`]): off the request's and the turn's path, one queue per task, drained
//!   in order by a task of its own; each update goes to each config of the task at the time,
//!   with a timeout and retries with backoff; every attempt is recorded (the audit's `push`
//!   lines) and counted (`/metrics`).
//!
//! Must not block a request or a turn: callers only enqueue.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::A2aPlan;
use super::store::{A2aStore, PushAttempt, PushRecord};

/// The longest one delivery attempt may take (the spec recommends 10 to 30 s).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a webhook's name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Clients kept for reuse, at most (then they are dropped and made again).
const MAX_CLIENTS: usize = 256;
/// Attempts of one update to one webhook: the first and this many retries.
pub(crate) const RETRIES: usize = 3;

/// The waits between the attempts of one update: 250 ms, doubling, at most 4 s.
fn retry_delays() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_factor(2.0)
        .with_max_delay(Duration::from_secs(4))
        .with_max_times(RETRIES)
        .build()
}

/// A range of addresses no push notification goes to unless allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    Loopback,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16), and IPv6's deprecated site-local fec0::/10.
    Private,
    /// fc00::/7.
    UniqueLocal,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// 0.0.0.0/8 ("this network"), `::`.
    Unspecified,
    Multicast,
    /// 100.64/10 (RFC 6598, carrier-grade NAT).
    SharedCgnat,
    /// 240/4 and the broadcast address.
    Reserved,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Range::Loopback => "loopback",
            Range::Private => "private (RFC 1918)",
            Range::UniqueLocal => "unique local (fc00::/7)",
            Range::LinkLocal => "link-local",
            Range::Unspecified => "unspecified",
            Range::Multicast => "multicast",
            Range::SharedCgnat => "shared (CGNAT, 100.64.0.0/10)",
            Range::Reserved => "reserved",
        })
    }
}

/// The non-public range `ip` is in, if any. An IPv6 address that carries an IPv4 one
/// (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
/// `2002::/16`) is judged by the IPv4 address it reaches.
pub(crate) fn non_public(ip: IpAddr) -> Option<Range> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<Range> {
    let [a, b, _, _] = ip.octets();
    Some(match (a, b) {
        (0, _) => Range::Unspecified,
        (127, _) => Range::Loopback,
        (10, _) | (172, 16..=31) | (192, 168) => Range::Private,
        (169, 254) => Range::LinkLocal,
        (100, 64..=127) => Range::SharedCgnat,
        (224..=239, _) => Range::Multicast,
        (240..=255, _) => Range::Reserved,
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<Range> {
    if ip.is_unspecified() {
        return Some(Range::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Range::Loopback);
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::a.b.c.d).
    if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return non_public_v4(embedded(s[6], s[7]));
    }
    // 6to4: 2002:aabb:ccdd::/48 reaches a.b.c.d.
    if s[0] == 0x2002 {
        return non_public_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        x if x & 0xfe00 == 0xfc00 => Range::UniqueLocal,
        x if x & 0xffc0 == 0xfe80 => Range::LinkLocal,
        x if x & 0xffc0 == 0xfec0 => Range::Private,
        x if x & 0xff00 == 0xff00 => Range::Multicast,
        _ => return None,
    })
}

/// A webhook that passed the checks: where to connect.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub url: reqwest::Url,
    /// The URL's host (as written, brackets of an IPv6 literal removed).
    pub host: String,
    /// The address checked: the only one a delivery connects to.
    pub addr: SocketAddr,
}

/// Why a webhook is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("push notification url `{0}` is not an absolute http(s) URL with a host")]
    NotUrl(String),
    #[error(
        "push notification url `{0}` carries a user or password: put credentials in `authentication` (scheme and credentials), which is sent as `Authorization`"
    )]
    Userinfo(String),
    #[error(
        "push notification url `{0}` is plain http: webhooks must be https (set channels.yaml `a2a.push.allowPrivateTargets: true` to allow http and private targets)"
    )]
    PlainHttp(String),
    #[error("push notification host `{host}` does not resolve: {why}")]
    Unresolved { host: String, why: String },
    #[error(
        "push notification host `{host}` resolves to {addr}, a {range} address: deepcli does not send push notifications into private networks (SSRF); set channels.yaml `a2a.push.allowPrivateTargets: true` to allow it"
    )]
    NonPublic {
        host: String,
        addr: IpAddr,
        range: Range,
    },
}

impl Refused {
    /// The refusal without the URL (whose path or query may carry a secret), for the audit.
    fn without_url(&self) -> String {
        let key = "channels.yaml `a2a.push.allowPrivateTargets` is not set";
        match self {
            Refused::NotUrl(_) => "refused: not an http(s) URL with a host".into(),
            Refused::Userinfo(_) => "refused: the URL carries a user or password".into(),
            Refused::PlainHttp(_) => format!("refused: plain http ({key})"),
            Refused::Unresolved { why, .. } => format!("does not resolve: {why}"),
            Refused::NonPublic { addr, range, .. } => {
                format!("refused: resolves to {addr}, a {range} address ({key})")
            }
        }
    }
}

/// Checks webhook `url` against the SSRF rules (`allow_private`: channels.yaml
/// `a2a.push.allowPrivateTargets`): an http(s) URL without credentials whose host resolves,
/// and, unless allowed, `https` and only public addresses.
pub(crate) async fn check(url: &str, allow_private: bool) -> Result<Target, Refused> {
    let parsed = reqwest::Url::parse(url).map_err(|_| Refused::NotUrl(url.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Refused::NotUrl(url.to_string()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Refused::Userinfo(url.to_string()));
    }
    if parsed.scheme() == "http" && !allow_private {
        return Err(Refused::PlainHttp(url.to_string()));
    }
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return Err(Refused::NotUrl(url.to_string()));
    };
    // An IPv6 literal keeps its brackets in the URL, not as an address.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let (name, addrs): (String, Vec<SocketAddr>) = match bare.parse::<IpAddr>() {
        Ok(ip) => (bare.to_string(), vec![SocketAddr::new(ip, port)]),
        Err(_) => {
            let unresolved = |why: String| Refused::Unresolved {
                host: bare.to_string(),
                why,
            };
            let found =
                tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare, port)))
                    .await
                    .map_err(|_| unresolved("timed out".into()))?
                    .map_err(|e| unresolved(e.to_string()))?
                    .collect::<Vec<_>>();
            (bare.to_string(), found)
        }
    };
    let Some(first) = addrs.first().copied() else {
        return Err(Refused::Unresolved {
            host: name,
            why: "no address".into(),
        });
    };
    if !allow_private {
        // Every address: a name with one public and one private address is refused, so no
        // pick among them can land inside.
        for addr in &addrs {
            if let Some(range) = non_public(addr.ip()) {
                return Err(Refused::NonPublic {
                    host: name,
                    addr: addr.ip(),
                    range,
                });
            }
        }
    }
    Ok(Target {
        url: parsed,
        host: name,
        addr: first,
    })
}

/// One update of a task, to go to each of its webhooks.
#[derive(Debug, Clone)]
pub(crate) struct Notice {
    /// The `StreamResponse` (1.0 ProtoJSON), serialized.
    pub body: String,
    /// What it is, for the audit: `statusUpdate TASK_STATE_WORKING`, `artifactUpdate`.
    pub what: String,
}

/// Delivery attempts and their outcomes, for `/metrics`.
#[derive(Default)]
pub(crate) struct PushMetrics {
    /// Attempts answered 2xx.
    pub attempts_ok: AtomicU64,
    /// Attempts answered with another status.
    pub attempts_status: AtomicU64,
    /// Attempts with no answer (unreachable, timed out).
    pub attempts_error: AtomicU64,
    /// Attempts not made: the target failed the SSRF check at delivery.
    pub attempts_refused: AtomicU64,
    /// Updates delivered (some attempt answered 2xx).
    pub delivered: AtomicU64,
    /// Updates given up on after every attempt failed (or the target was refused).
    pub failed: AtomicU64,
}

/// The deliveries: one queue per task with updates waiting, each drained in order by a task of
/// its own that ends when its queue is empty.
pub(crate) struct Pusher {
    store: Arc<A2aStore>,
    plan: crate::snapshot::Snapshot<Arc<A2aPlan>>,
    queues: Mutex<HashMap<String, tokio::sync::mpsc::UnboundedSender<Notice>>>,
    /// The runs whose updates are being followed (one follower each).
    following: Mutex<HashSet<String>>,
    /// A client per (host, address checked), so a webhook's connections and TLS setup are
    /// reused; each still goes only to the address its key names.
    clients: Mutex<HashMap<(String, SocketAddr), reqwest::Client>>,
    pub metrics: PushMetrics,
}

/// A lock whose holder panicked still guards plain maps: take it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pusher {
    pub(crate) fn new(
        store: Arc<A2aStore>,
        plan: crate::snapshot::Snapshot<Arc<A2aPlan>>,
    ) -> Pusher {
        Pusher {
            store,
            plan,
            queues: Mutex::new(HashMap::new()),
            following: Mutex::new(HashSet::new()),
            clients: Mutex::new(HashMap::new()),
            metrics: PushMetrics::default(),
        }
    }

    /// Marks run `run_id` followed; false when it already was.
    pub(crate) fn follow(&self, run_id: &str) -> bool {
        lock(&self.following).insert(run_id.to_string())
    }

    pub(crate) fn unfollow(&self, run_id: &str) {
        lock(&self.following).remove(run_id);
    }

    /// Queues `notice` for task `task_id`'s webhooks, after the updates queued before it.
    pub(crate) fn enqueue(self: &Arc<Self>, task_id: &str, notice: Notice) {
        let mut queues = lock(&self.queues);
        if let Some(tx) = queues.get(task_id)
            && tx.send(notice.clone()).is_ok()
        {
            return;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        // The receiver is alive: it is in hand.
        let _ = tx.send(notice);
        queues.insert(task_id.to_string(), tx);
        drop(queues);
        tokio::spawn(self.clone().drain(task_id.to_string(), rx));
    }

    /// Delivers task `task_id`'s updates one after another; ends (and gives its queue up) once
    /// none waits. Taking the next update and giving the queue up are under the queues' lock,
    /// so an update queued meanwhile is either taken here or starts a new drain.
    async fn drain(
        self: Arc<Self>,
        task_id: String,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<Notice>,
    ) {
        loop {
            let notice = {
                let mut queues = lock(&self.queues);
                match rx.try_recv() {
                    Ok(n) => n,
                    Err(_) => {
                        queues.remove(&task_id);
                        return;
                    }
                }
            };
            self.deliver(&task_id, &notice).await;
        }
    }

    /// One update to each webhook the task has now (a deleted config gets nothing more), all
    /// at once; returns when each has it or was given up on.
    async fn deliver(&self, task_id: &str, notice: &Notice) {
        let store = self.store.clone();
        let id = task_id.to_string();
        let configs = match tokio::task::spawn_blocking(move || store.push_configs(None, &id)).await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, task = task_id, "a2a push: cannot read the task's push configs; its update is not delivered");
                return;
            }
            Err(_) => return,
        };
        let each = configs.iter().map(|c| self.deliver_one(c, notice));
        futures_util::future::join_all(each).await;
    }

    /// One update to one webhook: attempts until one is answered 2xx, [`RETRIES`] more at
    /// most, each recorded.
    async fn deliver_one(&self, config: &PushRecord, notice: &Notice) {
        let mut delays = retry_delays();
        let host = reqwest::Url::parse(&config.url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_default();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let outcome = self.attempt(config, notice).await;
            let (status, error) = match &outcome {
                Outcome::Answered(s) => (Some(*s), None),
                Outcome::NoAnswer(e) | Outcome::Refused(e) => (None, Some(e.clone())),
            };
            let counter = match &outcome {
                Outcome::Answered(s) if (200..300).contains(s) => &self.metrics.attempts_ok,
                Outcome::Answered(_) => &self.metrics.attempts_status,
                Outcome::NoAnswer(_) => &self.metrics.attempts_error,
                Outcome::Refused(_) => &self.metrics.attempts_refused,
            };
            counter.fetch_add(1, Relaxed);
            let record = PushAttempt {
                task_id: config.task_id.clone(),
                config_id: config.config_id.clone(),
                peer: config.peer.clone(),
                host: host.clone(),
                event: notice.what.clone(),
                attempt,
                status,
                error,
            };
            let store = self.store.clone();
            if let Ok(Err(e)) =
                tokio::task::spawn_blocking(move || store.record_attempt(&record)).await
            {
                tracing::warn!(error = %e, "a2a push: cannot record a delivery attempt");
            }
            let retry = match outcome {
                Outcome::Answered(s) if (200..300).contains(&s) => {
                    self.metrics.delivered.fetch_add(1, Relaxed);
                    return;
                }
                // The target is refused now: no retry makes it public.
                Outcome::Refused(_) => None,
                _ => delays.next(),
            };
            match retry {
                Some(wait) => tokio::time::sleep(wait).await,
                None => {
                    self.metrics.failed.fetch_add(1, Relaxed);
                    return;
                }
            }
        }
    }

    /// One POST of `notice` to `config`'s webhook, checked again and pinned to the address
    /// checked.
    async fn attempt(&self, config: &PushRecord, notice: &Notice) -> Outcome {
        let allow_private = self.plan.load().allow_private_targets;
        let target = match check(&config.url, allow_private).await {
            Ok(t) => t,
            Err(e @ Refused::Unresolved { .. }) => return Outcome::NoAnswer(e.without_url()),
            Err(e) => return Outcome::Refused(e.without_url()),
        };
        let key = (target.host.clone(), target.addr);
        let cached = lock(&self.clients).get(&key).cloned();
        let client = match cached {
            Some(c) => c,
            None => match client_for(&target) {
                Ok(c) => {
                    let mut clients = lock(&self.clients);
                    if clients.len() >= MAX_CLIENTS {
                        clients.clear();
                    }
                    clients.insert(key, c.clone());
                    c
                }
                Err(e) => return Outcome::NoAnswer(crate::http_client::error_text(e)),
            },
        };
        let mut request = client
            .post(target.url)
            .header(reqwest::header::CONTENT_TYPE, "application/a2a+json")
            .body(notice.body.clone());
        if let Some((scheme, credentials)) = &config.auth {
            request = request.header(
                reqwest::header::AUTHORIZATION,
                format!("{scheme} {credentials}"),
            );
        }
        if let Some(token) = &config.token {
            request = request.header("X-A2A-Notification-Token", token);
        }
        match request.send().await {
            Ok(response) => Outcome::Answered(response.status().as_u16()),
            Err(e) if e.is_timeout() => Outcome::NoAnswer("timed out".into()),
            Err(e) => Outcome::NoAnswer(crate::http_client::error_text(e)),
        }
    }

    /// Registers the deliveries' counters in a scrape's `registry`.
    pub(crate) fn register_metrics(&self, registry: &mut crate::metrics::Registry) {
        use prometheus_client::metrics::counter::ConstCounter;
        let m = &self.metrics;
        let n = |c: &AtomicU64| ConstCounter::new(c.load(Relaxed));
        registry.register(
            "deepcli_a2a_push_attempts",
            "A2A push notification delivery attempts, by result (ok: 2xx; status: another HTTP status; error: no answer; refused: the target failed the SSRF check at delivery)",
            crate::metrics::Rows(vec![
                ([("result", "ok")], n(&m.attempts_ok)),
                ([("result", "status")], n(&m.attempts_status)),
                ([("result", "error")], n(&m.attempts_error)),
                ([("result", "refused")], n(&m.attempts_refused)),
            ]),
        );
        registry.register(
            "deepcli_a2a_push_updates",
            "A2A task updates to a webhook, by outcome (delivered, or failed after every retry)",
            crate::metrics::Rows(vec![
                ([("outcome", "delivered")], n(&m.delivered)),
                ([("outcome", "failed")], n(&m.failed)),
            ]),
        );
    }
}

/// A client that goes only to `target`'s checked address: a name connects there, not to
/// whatever it resolves to next (DNS rebinding); a literal address is that address already. No
/// proxy, no redirect followed, a timeout.
fn client_for(target: &Target) -> reqwest::Result<reqwest::Client> {
    let mut builder = crate::http_client::direct()
        .timeout(ATTEMPT_TIMEOUT)
        .connect_timeout(ATTEMPT_TIMEOUT);
    if target.host.parse::<IpAddr>().is_err() {
        builder = builder.resolve(&target.host, target.addr);
    }
    builder.build()
}

/// What one attempt came to.
enum Outcome {
    /// The webhook answered with this HTTP status.
    Answered(u16),
    /// No answer: unreachable, timed out, the name did not resolve.
    NoAnswer(String),
    /// Not sent: the target failed the SSRF check.
    Refused(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(ip: &str) -> Option<Range> {
        non_public(ip.parse().unwrap())
    }

    #[test]
    fn every_non_public_range_is_named_and_public_addresses_pass() {
        let cases = [
            ("127.0.0.1", Some(Range::Loopback)),
            ("127.255.0.9", Some(Range::Loopback)),
            ("10.1.2.3", Some(Range::Private)),
            ("172.16.0.1", Some(Range::Private)),
            ("172.31.255.255", Some(Range::Private)),
            ("192.168.1.1", Some(Range::Private)),
            ("169.254.169.254", Some(Range::LinkLocal)),
            ("100.64.0.1", Some(Range::SharedCgnat)),
            ("100.127.255.255", Some(Range::SharedCgnat)),
            ("0.0.0.0", Some(Range::Unspecified)),
            ("0.1.2.3", Some(Range::Unspecified)),
            ("224.0.0.1", Some(Range::Multicast)),
            ("239.255.255.250", Some(Range::Multicast)),
            ("240.0.0.1", Some(Range::Reserved)),
            ("255.255.255.255", Some(Range::Reserved)),
            ("::1", Some(Range::Loopback)),
            ("::", Some(Range::Unspecified)),
            ("fc00::1", Some(Range::UniqueLocal)),
            ("fdff:ffff::1", Some(Range::UniqueLocal)),
            ("fe80::1", Some(Range::LinkLocal)),
            ("febf::1", Some(Range::LinkLocal)),
            ("fec0::1", Some(Range::Private)),
            ("ff02::1", Some(Range::Multicast)),
            // IPv6 forms that reach an IPv4 address are judged by it.
            ("::ffff:127.0.0.1", Some(Range::Loopback)),
            ("::ffff:10.0.0.1", Some(Range::Private)),
            ("::ffff:169.254.169.254", Some(Range::LinkLocal)),
            ("::ffff:100.64.0.1", Some(Range::SharedCgnat)),
            ("::ffff:0.0.0.0", Some(Range::Unspecified)),
            ("::127.0.0.1", Some(Range::Loopback)),
            ("64:ff9b::10.0.0.1", Some(Range::Private)),
            ("2002:c0a8:0101::1", Some(Range::Private)),
            ("2002:7f00:0001::1", Some(Range::Loopback)),
            // Public.
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("172.32.0.1", None),
            ("172.15.255.255", None),
            ("100.63.255.255", None),
            ("100.128.0.1", None),
            ("192.169.0.1", None),
            ("169.253.0.1", None),
            ("223.255.255.255", None),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::8.8.8.8", None),
            ("2002:0808:0808::1", None),
            ("2001:4860:4860::8888", None),
            ("2606:4700::1111", None),
        ];
        for (ip, want) in cases {
            assert_eq!(range(ip), want, "{ip}");
        }
    }

    #[tokio::test]
    async fn a_webhook_is_refused_unless_https_and_public_and_allowed_private_takes_it() {
        let refused = |url: &'static str| async move { check(url, false).await.unwrap_err() };
        assert!(matches!(
            refused("http://93.184.216.34/hook").await,
            Refused::PlainHttp(_)
        ));
        for url in [
            "https://127.0.0.1/hook",
            "https://[::1]:8443/hook",
            "https://[::ffff:127.0.0.1]/hook",
            "https://10.0.0.5/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.1.1/",
            "https://[fd00::1]/",
            "https://localhost:9/hook",
        ] {
            match refused(url).await {
                Refused::NonPublic { .. } => {}
                other => panic!("{url}: {other:?}"),
            }
        }
        let e = refused("https://127.0.0.1/hook").await.to_string();
        assert!(
            e.contains("loopback") && e.contains("a2a.push.allowPrivateTargets: true"),
            "{e}"
        );
        assert!(matches!(
            refused("https://user:pw@93.184.216.34/").await,
            Refused::Userinfo(_)
        ));
        for bad in [
            "ftp://93.184.216.34/",
            "not a url",
            "https://",
            "http://[::1/",
        ] {
            assert!(
                matches!(check(bad, true).await, Err(Refused::NotUrl(_))),
                "{bad}"
            );
        }
        // Allowed: loopback over http is taken, and the address is the one checked.
        let target = check("http://127.0.0.1:9/hook", true).await.unwrap();
        assert_eq!(target.addr, "127.0.0.1:9".parse().unwrap());
        assert_eq!(target.host, "127.0.0.1");
        // A public literal over https passes without the key.
        assert!(check("https://93.184.216.34/hook", false).await.is_ok());
    }

    /// The address checked is the one connected to: a name is not resolved again (here it
    /// could not be: `.invalid` never resolves), so a second answer of its DNS cannot move the
    /// request elsewhere.
    #[tokio::test]
    async fn a_delivery_connects_to_the_address_checked_not_to_the_name_resolved_again() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://rebinding.invalid:{}/hook", addr.port());
        let target = Target {
            url: reqwest::Url::parse(&url).unwrap(),
            host: "rebinding.invalid".into(),
            addr,
        };
        let response = client_for(&target)
            .unwrap()
            .post(target.url.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}
