//! Where each agent runs when several controllers share one state (docs/scale-out.md, "Every
//! replica serves every door"). The controller's cluster round publishes who holds each
//! agent's claim; every turn reads it here. A turn for an agent another replica runs is handed
//! to that replica whole, over `POST <its advertised URL>/internal/turn`, authenticated by the
//! cluster token (never the operator token). The owner answers it as one that came to its own
//! door: its per-session lane keeps the order, the delivery row in the shared state keeps it
//! answered once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::http::HeaderMap;

use super::auth::HandedInBy;
use super::delivered::Delivered;
use super::error::AccessError;

/// The cluster token, on every call between replicas.
pub(crate) const TOKEN_HEADER: &str = "x-deepcli-cluster-token";
/// Who handed the message in at the first replica: `signed`, `operator` or `adapter`.
pub(crate) const CALLER_HEADER: &str = "x-deepcli-caller";
/// The replica that handed the turn on.
pub(crate) const FORWARDED_BY_HEADER: &str = "x-deepcli-forwarded-by";

/// The replica that holds an agent's claim, and the claim's fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub replica: String,
    pub url: String,
    pub token: i64,
}

/// Where an agent's turns are answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Here, under the claim with this fencing token.
    Here(i64),
    /// By another replica.
    There(Holder),
    /// By none now: its claim expired or is moving.
    Nobody,
}

/// A write made for an agent's claim: refused in its transaction unless `holder` still holds
/// the claim with `token` (`state::cluster::check_fence`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub holder: String,
    pub token: i64,
}

/// What a replica knows of where agents run, and how it hands a turn on.
pub(crate) struct Placement {
    me: String,
    token: Option<Arc<str>>,
    agents: ArcSwap<HashMap<String, Holder>>,
    /// The platform accounts whose claims this replica holds (`<channel>/<account>`): their
    /// outbox rows are posted from here, and from no other replica.
    accounts: ArcSwap<std::collections::HashSet<String>>,
    client: reqwest::Client,
    /// For the Hub's turns and session calls, which stream their answer: no total timeout (a
    /// spawned run may take hours), but the owner says it is working every second, so a read
    /// that waits [`SILENCE`] is an owner that is gone.
    streaming: reqwest::Client,
}

/// How often the owner of a turn handed on by the Hub says it is still working on it.
pub(crate) const WORKING_EVERY: Duration = Duration::from_secs(1);
/// How long a replica waits for the next word of a turn it handed on before it counts the
/// owner as gone.
const SILENCE: Duration = Duration::from_secs(15);

impl Placement {
    /// The placement of replica `me`; without a cluster token it neither hands turns on nor
    /// takes them from others (a turn for an agent elsewhere is refused, saying why).
    pub(crate) fn new(me: &str, token: Option<Arc<str>>, prompt_timeout: Duration) -> Placement {
        let client = crate::http_client::direct()
            .connect_timeout(Duration::from_secs(5))
            // The owner answers when its agent has: the prompt's time, and some to spare.
            .timeout(prompt_timeout + Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        let streaming = crate::http_client::direct()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(SILENCE)
            .build()
            .unwrap_or_default();
        Placement {
            me: me.to_owned(),
            token,
            agents: ArcSwap::default(),
            accounts: ArcSwap::default(),
            client,
            streaming,
        }
    }

    /// Whether `replica` is this one.
    pub(crate) fn is_me(&self, replica: &str) -> bool {
        self.me == replica
    }

    /// Puts a round's placement in force: each agent whose claim is held, by whom, and the
    /// accounts this replica holds.
    pub(crate) fn publish(
        &self,
        agents: HashMap<String, Holder>,
        accounts: std::collections::HashSet<String>,
    ) {
        self.agents.store(Arc::new(agents));
        self.accounts.store(Arc::new(accounts));
    }

    /// Whether this replica posts what the outbox holds for `channel`/`account`.
    pub(crate) fn carries(&self, channel: &str, account: &str) -> bool {
        self.accounts
            .load()
            .contains(&format!("{channel}/{account}"))
    }

    pub(crate) fn owner(&self, agent: &str) -> Owner {
        match self.agents.load().get(agent) {
            Some(h) if h.replica == self.me => Owner::Here(h.token),
            Some(h) => Owner::There(h.clone()),
            None => Owner::Nobody,
        }
    }

    /// The other replicas that run agents, as this replica's view of the placement has them.
    pub(crate) fn others(&self) -> Vec<Holder> {
        let mut seen = std::collections::BTreeMap::new();
        for holder in self.agents.load().values() {
            if holder.replica != self.me {
                seen.entry(holder.replica.clone())
                    .or_insert_with(|| holder.clone());
            }
        }
        seen.into_values().collect()
    }

    /// The fence of a write for `agent`'s turn: this replica's claim as it last knew it (one
    /// it does not hold fails the check).
    pub(crate) fn fence(&self, agent: &str) -> Fence {
        let token = match self.owner(agent) {
            Owner::Here(token) => token,
            Owner::There(_) | Owner::Nobody => -1,
        };
        Fence {
            holder: self.me.clone(),
            token,
        }
    }

    /// Whether a call carries this cluster's token.
    pub(crate) fn admits(&self, headers: &HeaderMap) -> bool {
        let (Some(token), Some(given)) = (
            &self.token,
            headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()),
        ) else {
            return false;
        };
        super::auth::constant_time_eq(token.as_bytes(), given.as_bytes())
    }

    /// Hands the message `body` on to `holder`, which runs `agent`: its answer, or why there
    /// is none (a refusal of the owner is passed on whole).
    pub(crate) async fn forward(
        &self,
        holder: &Holder,
        agent: &str,
        body: &[u8],
        caller: HandedInBy<'_>,
    ) -> Result<Delivered, AccessError> {
        let Some(token) = &self.token else {
            return Err(AccessError::Elsewhere(format!(
                "replica {} runs agent `{agent}`, and this replica ({}) has no cluster token to hand the message on with; start every replica with --cluster-token-file (or DEEPCLI_CLUSTER_TOKEN)",
                holder.replica, self.me
            )));
        };
        let url = format!("{}/internal/turn", holder.url.trim_end_matches('/'));
        let (kind, signature) = match caller {
            HandedInBy::Signed(signature) => ("signed", signature),
            HandedInBy::Operator => ("operator", None),
            HandedInBy::Adapter => ("adapter", None),
        };
        let mut request = self
            .client
            .post(&url)
            .header(TOKEN_HEADER, token.as_ref())
            .header(CALLER_HEADER, kind)
            .header(FORWARDED_BY_HEADER, &self.me)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(signature) = signature {
            request = request.header(super::auth::SIGNATURE_HEADER, signature);
        }
        let unreachable = |why: String| {
            AccessError::Elsewhere(format!(
                "replica {} runs agent `{agent}` and cannot be reached at {}: {why}; try again (its claim moves to another replica if it is gone)",
                holder.replica, holder.url
            ))
        };
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(crate::http_client::error_text(e)))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| unreachable(crate::http_client::error_text(e)))?;
        if (200..300).contains(&status) {
            let delivered = Delivered::recorded(text.clone());
            let duplicate = serde_json::from_str::<serde_json::Value>(&text)
                .is_ok_and(|v| v["duplicate"] == true);
            return Ok(if duplicate {
                delivered.as_duplicate()
            } else {
                delivered
            });
        }
        let body: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|_| serde_json::json!({"error": text}));
        Err(AccessError::Forwarded {
            replica: holder.replica.clone(),
            agent: agent.to_owned(),
            status,
            error: body["error"].as_str().unwrap_or("").to_owned(),
            body,
        })
    }

    /// A call to `path` of `holder`'s internal door with JSON `body`, carrying the cluster
    /// token: what the Hub hands a turn or a session call on with. Its answer streams; `Err`
    /// says why it cannot be made (no cluster token here).
    pub(crate) fn call(
        &self,
        holder: &Holder,
        path: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::RequestBuilder, String> {
        let Some(token) = &self.token else {
            return Err(format!(
                "replica {} runs it, and this replica ({}) has no cluster token to hand it on with; start every replica with --cluster-token-file (or DEEPCLI_CLUSTER_TOKEN)",
                holder.replica, self.me
            ));
        };
        Ok(self
            .streaming
            .post(format!("{}{path}", holder.url.trim_end_matches('/')))
            .header(TOKEN_HEADER, token.as_ref())
            .header(FORWARDED_BY_HEADER, &self.me)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body))
    }

    /// How a forwarded call says who handed the message in at the first replica.
    pub(crate) fn caller<'h>(headers: &'h HeaderMap) -> Option<HandedInBy<'h>> {
        let signature = headers
            .get(super::auth::SIGNATURE_HEADER)
            .and_then(|v| v.to_str().ok());
        match headers.get(CALLER_HEADER).and_then(|v| v.to_str().ok())? {
            "signed" => Some(HandedInBy::Signed(signature)),
            "operator" => Some(HandedInBy::Operator),
            "adapter" => Some(HandedInBy::Adapter),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(replica: &str, token: i64) -> Holder {
        Holder {
            replica: replica.into(),
            url: format!("http://{replica}"),
            token,
        }
    }

    #[test]
    fn an_agent_is_answered_where_its_claim_is_held() {
        let placement = Placement::new("a", Some("secret".into()), Duration::from_secs(1));
        assert_eq!(placement.owner("echo"), Owner::Nobody);
        placement.publish(
            HashMap::from([
                ("echo".to_owned(), holder("a", 7)),
                ("coder".to_owned(), holder("b", 9)),
            ]),
            ["telegram/default".to_owned()].into(),
        );
        assert!(placement.carries("telegram", "default"));
        assert!(!placement.carries("slack", "default"));
        assert_eq!(placement.owner("echo"), Owner::Here(7));
        assert_eq!(placement.owner("coder"), Owner::There(holder("b", 9)));
        assert_eq!(placement.fence("echo").token, 7);
        // A write for an agent held elsewhere carries a token no claim has.
        assert_eq!(placement.fence("coder").token, -1);
    }

    #[test]
    fn only_the_cluster_token_is_admitted() {
        let placement = Placement::new("a", Some("secret".into()), Duration::from_secs(1));
        let mut headers = HeaderMap::new();
        assert!(!placement.admits(&headers));
        headers.insert(TOKEN_HEADER, "wrong".parse().unwrap());
        assert!(!placement.admits(&headers));
        headers.insert(TOKEN_HEADER, "secret".parse().unwrap());
        assert!(placement.admits(&headers));
        // Without a token of its own a replica admits nobody.
        let alone = Placement::new("a", None, Duration::from_secs(1));
        assert!(!alone.admits(&headers));
    }
}
