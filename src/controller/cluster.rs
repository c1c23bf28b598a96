//! Several controllers on one PostgreSQL state (docs/scale-out.md): each `deepcli up` is a
//! replica. Every round (a third of a claim's time) it renews its row, takes or keeps the
//! leadership, and takes, keeps or gives back the claims of the agents and platform accounts
//! it should run.
//!
//! Who should run what is decided by every replica alike, with no one to ask: each agent (and
//! account) goes to the live replica with the highest hash of the pair (rendezvous hashing).
//! A replica that joins takes about its share and nothing else moves; one that leaves or stops
//! renewing has its share spread over the others when its claims expire. A claim moves only
//! when its holder gives it back (after stopping what it ran) or lets it expire, so nothing
//! runs on two replicas at once; a replica frozen past its claim's time is fenced (its writes
//! for the claim are refused) and drops what it held on its next round.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::access::placement::Holder;

use crate::state::cluster::{self, ClaimKind};
use crate::state::db::{DbResult, Query};
use crate::state::{StateDir, StateError, StateStore};

/// How a replica names itself and is reached (`deepcli up --replica-id --advertise
/// --cluster-token-file`).
#[derive(Debug, Clone)]
pub(crate) struct ClusterOptions {
    pub id: String,
    /// Where the other replicas reach this one's listener.
    pub advertise: url::Url,
    /// The secret the replicas share; none: this replica hands no turn on and takes none.
    pub token: Option<std::sync::Arc<str>>,
    /// The file the token was read from (`--cluster-token-file`): hidden from every agent.
    pub token_file: Option<std::path::PathBuf>,
    /// How long a claim lasts unless renewed.
    pub ttl: Duration,
}

/// What the leader publishes with each apply, and the followers load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Published {
    pub config_hash: String,
    pub generation: Option<u64>,
    pub serial: u64,
}

const PUBLISHED_KEY: &str = "cluster.published";

/// A replica as `status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplicaStatus {
    pub id: String,
    pub url: String,
    pub leader: bool,
    pub agents: Vec<String>,
    pub accounts: Vec<String>,
    /// When it last renewed, by the state's clock (RFC 3339).
    pub last_seen: String,
}

/// What one round decided.
#[derive(Debug, Default)]
pub(crate) struct Round {
    pub leader: bool,
    /// The agents and accounts this replica runs now.
    pub agents: BTreeSet<String>,
    pub accounts: BTreeSet<String>,
    /// Agents taken in this round (from nobody, or from a replica that is gone): what their
    /// last holder left is settled before they run here.
    pub taken: Vec<String>,
    /// Claims to give back once what they ran has stopped.
    pub giving: Vec<(ClaimKind, String, i64)>,
    /// Who holds each agent's claim, unexpired.
    pub holders: HashMap<String, Holder>,
    pub published: Option<Published>,
    pub replicas: Vec<ReplicaStatus>,
}

/// One replica's membership: its connection and the claims it holds.
pub(crate) struct Member {
    options: ClusterOptions,
    store: StateStore,
    joined: bool,
    leader: Option<i64>,
    held: HashMap<(ClaimKind, String), i64>,
}

impl Member {
    pub(crate) fn open(dir: &StateDir, options: ClusterOptions) -> Result<Member, StateError> {
        Ok(Member {
            options,
            store: StateStore::open(dir)?,
            joined: false,
            leader: None,
            held: HashMap::new(),
        })
    }

    /// Where the other replicas reach this one, as its row records it.
    fn advertised(&self) -> String {
        let url = self.options.advertise.as_str();
        url.trim_end_matches('/').to_owned()
    }

    /// Waits until no other process runs as this replica: a row of its id seen within a
    /// claim's time is a replica that died a moment ago (its row goes stale) or another
    /// process given the same `--replica-id` (its row stays fresh). `Err` with what to do
    /// when it stays fresh for two claims' time.
    pub(crate) fn wait_for_id(&mut self) -> Result<(), String> {
        let id = self.options.id.clone();
        let ttl = self.options.ttl;
        let deadline = std::time::Instant::now() + ttl * 2;
        loop {
            let seen = self
                .store
                .on_seam(|c| cluster::replicas(&*c, ttl.as_millis() as i64))
                .map_err(|e| e.to_string())?
                .into_iter()
                .any(|r| r.id == id);
            if !seen {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "another deepcli up runs as replica `{id}` on this state (it renewed its row within the last {} ms); give each replica its own --replica-id",
                    ttl.as_millis()
                ));
            }
            tracing::warn!(replica = %id, "cluster: a replica of this id was seen a moment ago; waiting for its row to go stale");
            std::thread::sleep(ttl / 3);
        }
    }

    /// One round for the agents and accounts of the generation in force.
    pub(crate) fn round(
        &mut self,
        agents: &[String],
        accounts: &[String],
    ) -> Result<Round, StateError> {
        let id = self.options.id.clone();
        let url = self.advertised();
        let ttl = self.options.ttl.as_millis() as i64;
        let joined = !self.joined;
        // (Kept whole if the round fails: the next one tells what changed hands since.)
        let held = &self.held;
        let (leader, round, now_held) = self.store.on_seam(|c| {
            cluster::heartbeat(c, &id, &url, joined)?;
            let live: Vec<String> = cluster::replicas(&*c, ttl)?
                .into_iter()
                .map(|r| r.id)
                .collect();
            // What it holds, renewed in one statement; only what it lacks is claimed one by one.
            let renewed = cluster::renew_all(c, &id, ttl)?;
            let leader = match renewed.get(&(ClaimKind::Leader, String::new())) {
                Some(token) => Some(*token),
                None => cluster::claim(c, ClaimKind::Leader, "", &id, ttl)?.map(|c| c.token),
            };
            let mut round = Round {
                leader: leader.is_some(),
                ..Round::default()
            };
            let mut now_held = HashMap::new();
            for (kind, names) in [(ClaimKind::Agent, agents), (ClaimKind::Account, accounts)] {
                let wanted: BTreeSet<&str> = names
                    .iter()
                    .filter(|n| owner_of(n, &live) == Some(id.as_str()))
                    .map(String::as_str)
                    .collect();
                for name in &wanted {
                    let key = (kind, (*name).to_owned());
                    let token = match renewed.get(&key) {
                        Some(token) => *token,
                        None => match cluster::claim(c, kind, name, &id, ttl)? {
                            Some(claim) => claim.token,
                            // Its last holder has not given it back yet: next round.
                            None => continue,
                        },
                    };
                    if kind == ClaimKind::Agent && held.get(&key) != Some(&token) {
                        round.taken.push((*name).to_owned());
                    }
                    match kind {
                        ClaimKind::Agent => round.agents.insert((*name).to_owned()),
                        _ => round.accounts.insert((*name).to_owned()),
                    };
                    now_held.insert(key, token);
                }
                // Held, and no longer this replica's (another joined, or it left the
                // config): given back once stopped, if still held.
                for ((k, name), token) in &renewed {
                    if *k == kind && !wanted.contains(name.as_str()) {
                        round.giving.push((kind, name.clone(), *token));
                    }
                }
            }
            let (mut holders, replicas) = view(&*c, ttl, leader.is_some().then_some(id.as_str()))?;
            // What it is giving back it no longer answers for: its runtime stops now.
            for (kind, name, _) in &round.giving {
                if *kind == ClaimKind::Agent {
                    holders.remove(name);
                }
            }
            round.holders = holders;
            round.replicas = replicas;
            round.published = published(&*c)?;
            Ok((leader, round, now_held))
        })?;
        self.joined = true;
        self.leader = leader;
        self.held = now_held;
        Ok(round)
    }

    /// Renews this replica's row and every claim it holds, nothing else: what keeps its
    /// claims while the controller's loop is busy (a long apply) between two rounds.
    pub(crate) fn renew(&mut self) -> Result<(), StateError> {
        if !self.joined {
            return Ok(());
        }
        let id = self.options.id.clone();
        let url = self.advertised();
        let ttl = self.options.ttl.as_millis() as i64;
        self.store.on_seam(|c| {
            cluster::heartbeat(c, &id, &url, false)?;
            cluster::renew_all(c, &id, ttl).map(drop)
        })
    }

    /// Gives a claim back, once what it ran has stopped.
    pub(crate) fn give_back(&mut self, kind: ClaimKind, name: &str, token: i64) {
        let id = self.options.id.clone();
        if let Err(e) = self
            .store
            .on_seam(|c| cluster::release(c, kind, name, &id, token))
        {
            tracing::warn!(error = %e, claim = name, "cannot give a claim back; it expires");
        }
    }

    /// The leader publishes what it applied, fenced by its leadership: a leader that lost it
    /// while frozen publishes nothing.
    pub(crate) fn publish(&mut self, published: &Published) -> Result<(), StateError> {
        let Some(token) = self.leader else {
            return Ok(());
        };
        let id = self.options.id.clone();
        let value = serde_json::to_string(published).unwrap_or_default();
        self.store
            .on_seam(|c| cluster::publish(c, &id, token, PUBLISHED_KEY, &value))
    }

    /// A replica that stops: its row and claims go, so the others take them at once.
    pub(crate) fn leave(&mut self) {
        let id = self.options.id.clone();
        if let Err(e) = self.store.on_seam(|c| cluster::leave(c, &id)) {
            tracing::warn!(error = %e, "cannot leave the cluster; its claims expire");
        }
    }
}

/// The live replica that should run `name`: the one with the highest hash of the pair.
pub(crate) fn owner_of<'a>(name: &str, live: &'a [String]) -> Option<&'a str> {
    live.iter()
        .max_by_key(|replica| {
            crate::hash::Hasher::default()
                .part(name.as_bytes())
                .part(replica.as_bytes())
                .finish()
        })
        .map(String::as_str)
}

/// Who holds each agent's claim unexpired, and the replicas as `status` shows them.
fn view(
    db: &impl Query,
    ttl: i64,
    leader: Option<&str>,
) -> DbResult<(HashMap<String, Holder>, Vec<ReplicaStatus>)> {
    let now = cluster::now_ms(db)?;
    let replicas = cluster::replicas(db, ttl)?;
    let leader = match leader {
        Some(id) => Some(id.to_owned()),
        None => cluster::held(db, ClaimKind::Leader, "")?
            .filter(|c| c.expires_ms > now)
            .map(|c| c.holder),
    };
    let url: HashMap<&str, &str> = replicas
        .iter()
        .map(|r| (r.id.as_str(), r.url.as_str()))
        .collect();
    let mut shown: BTreeMap<String, ReplicaStatus> = replicas
        .iter()
        .map(|r| {
            let status = ReplicaStatus {
                id: r.id.clone(),
                url: r.url.clone(),
                leader: leader.as_deref() == Some(r.id.as_str()),
                last_seen: jiff::Timestamp::from_millisecond(r.seen_ms)
                    .map(|t| t.to_string())
                    .unwrap_or_default(),
                ..ReplicaStatus::default()
            };
            (r.id.clone(), status)
        })
        .collect();
    let mut holders = HashMap::new();
    for kind in [ClaimKind::Agent, ClaimKind::Account] {
        for (name, claim) in cluster::claims(db, kind)? {
            if claim.expires_ms <= now {
                continue;
            }
            if let Some(r) = shown.get_mut(&claim.holder) {
                match kind {
                    ClaimKind::Agent => r.agents.push(name.clone()),
                    _ => r.accounts.push(name.clone()),
                }
            }
            if kind == ClaimKind::Agent
                && let Some(url) = url.get(claim.holder.as_str())
            {
                holders.insert(
                    name,
                    Holder {
                        replica: claim.holder.clone(),
                        url: (*url).to_owned(),
                        token: claim.token,
                    },
                );
            }
        }
    }
    Ok((holders, shown.into_values().collect()))
}

fn published(db: &impl Query) -> DbResult<Option<Published>> {
    let text = cluster::published(db, PUBLISHED_KEY)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("agent-{i}")).collect()
    }

    /// Each name goes to one live replica, about evenly; when a replica joins, only what it
    /// takes moves, and when one leaves, only what it had.
    #[test]
    fn agents_spread_over_replicas_and_move_only_as_replicas_come_and_go() {
        let agents = names(300);
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let place = |live: &[String]| -> HashMap<String, String> {
            agents
                .iter()
                .map(|n| (n.clone(), owner_of(n, live).unwrap().to_owned()))
                .collect()
        };
        let before = place(&three);
        for replica in &three {
            let share = before.values().filter(|r| *r == replica).count();
            assert!((60..=140).contains(&share), "{replica} runs {share} of 300");
        }
        let mut four = three.clone();
        four.push("d".into());
        let joined = place(&four);
        for (agent, owner) in &joined {
            if owner != "d" {
                assert_eq!(owner, &before[agent], "{agent} moved between old replicas");
            }
        }
        let two: Vec<String> = ["a", "c"].map(String::from).to_vec();
        let left = place(&two);
        for (agent, owner) in &before {
            if owner != "b" {
                assert_eq!(
                    &left[agent], owner,
                    "{agent} moved though its replica stayed"
                );
            }
        }
        assert_eq!(owner_of("x", &[]), None);
    }

    /// Two replicas on one state: each runs its share, a follower sees the leader, the one
    /// that leaves gives its agents to the other, and a replica that missed its claim's
    /// time cannot publish (fenced).
    #[test]
    fn replicas_share_the_agents_and_a_stale_leader_is_fenced() {
        let (_tmp, _schema, dir) = crate::state::postgres_state();
        let options = |id: &str, ttl| ClusterOptions {
            id: id.into(),
            advertise: format!("http://{id}.test:7430").parse().unwrap(),
            token: None,
            token_file: None,
            ttl: Duration::from_millis(ttl),
        };
        let agents = names(40);
        let mut a = Member::open(&dir, options("a", 60_000)).unwrap();
        let first = a.round(&agents, &[]).unwrap();
        assert!(first.leader);
        assert_eq!(first.agents.len(), 40, "alone, it runs every agent");
        assert_eq!(first.taken.len(), 40);
        let mut b = Member::open(&dir, options("b", 60_000)).unwrap();
        let joined = b.round(&agents, &[]).unwrap();
        assert!(!joined.leader);
        // Nothing is taken from a live holder: b waits for a to give its share back.
        assert!(joined.agents.is_empty());
        let a2 = a.round(&agents, &[]).unwrap();
        assert!(a2.leader && a2.taken.is_empty());
        let mut giving: Vec<&str> = a2.giving.iter().map(|(_, n, _)| n.as_str()).collect();
        giving.sort();
        assert!(!giving.is_empty() && giving.len() < 40, "{giving:?}");
        for (kind, name, token) in &a2.giving {
            a.give_back(*kind, name, *token);
        }
        let b2 = b.round(&agents, &[]).unwrap();
        assert_eq!(
            b2.agents.iter().map(String::as_str).collect::<Vec<_>>(),
            giving
        );
        assert_eq!(b2.holders.len(), 40);
        let shown: Vec<(&str, bool, usize)> = b2
            .replicas
            .iter()
            .map(|r| (r.id.as_str(), r.leader, r.agents.len()))
            .collect();
        assert_eq!(
            shown,
            [("a", true, 40 - giving.len()), ("b", false, giving.len())]
        );
        // a leaves: b takes everything at once.
        a.leave();
        let b3 = b.round(&agents, &[]).unwrap();
        assert!(b3.leader);
        assert_eq!(b3.agents.len(), 40);
        assert_eq!(b3.taken.len(), 40 - giving.len());

        // A leader whose claim expired and was taken publishes nothing.
        let mut c = Member::open(&dir, options("c", 1)).unwrap();
        b.leave();
        assert!(c.round(&agents, &[]).unwrap().leader);
        std::thread::sleep(Duration::from_millis(5));
        let mut d = Member::open(&dir, options("d", 60_000)).unwrap();
        assert!(d.round(&agents, &[]).unwrap().leader);
        let e = c
            .publish(&Published {
                config_hash: "sha256:x".into(),
                generation: Some(1),
                serial: 1,
            })
            .unwrap_err();
        assert!(e.to_string().contains("fenced"), "{e}");
    }
}
