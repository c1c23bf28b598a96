//! The Unix sockets a sandbox with a network of its own is given (isolation.md): the hub's door
//! (`hub.sock`, what its `deepcli hub mcp` forwards to) and, for `network: allowlist`, the
//! egress proxy (`egress.sock`). One directory per agent under the state directory, mounted at
//! `/run/deepcli` inside its sandbox; opened before its runtime starts, closed when it goes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::runtime::RuntimeSpec;
use crate::sandbox::Network;
use crate::sandbox::egress::{Proxy, Refusals};

/// What one agent's doors were opened for: a change opens them anew.
#[derive(PartialEq)]
struct Key {
    run_dir: PathBuf,
    network: Network,
}

struct Open {
    key: Key,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Open {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = std::fs::remove_file(self.key.run_dir.join("hub.sock"));
        let _ = std::fs::remove_file(self.key.run_dir.join("egress.sock"));
    }
}

/// The open doors, by agent.
#[derive(Default)]
pub(super) struct Doors {
    open: BTreeMap<String, Open>,
    pub(super) refusals: Refusals,
}

impl Doors {
    /// Opens the doors `runtimes` need and closes the rest. A door that cannot be opened is
    /// logged; its runtime then finds no hub (and, for `allowlist`, no network).
    pub(super) fn converge(&mut self, runtimes: &[RuntimeSpec], hub: &Arc<crate::hub::Hub>) {
        let mut wanted = BTreeMap::new();
        for spec in runtimes {
            if let (Some(run_dir), Some(layout)) = (&spec.run_dir, &spec.sandbox) {
                let key = Key {
                    run_dir: run_dir.clone(),
                    network: layout.network.clone(),
                };
                wanted.insert(spec.agent_id.clone(), key);
            }
        }
        self.open
            .retain(|agent, open| wanted.get(agent).is_some_and(|k| *k == open.key));
        for (agent, key) in wanted {
            if self.open.contains_key(&agent) {
                continue;
            }
            match self.start(&agent, &key, hub) {
                Ok(tasks) => {
                    self.open.insert(agent, Open { key, tasks });
                }
                Err(e) => tracing::error!(
                    agent = %agent,
                    dir = %key.run_dir.display(),
                    error = %e,
                    "cannot open the sandbox's sockets"
                ),
            }
        }
    }

    fn start(
        &self,
        agent: &str,
        key: &Key,
        hub: &Arc<crate::hub::Hub>,
    ) -> std::io::Result<Vec<tokio::task::JoinHandle<()>>> {
        crate::owner_only::create_dir_all(&key.run_dir)?;
        let socket = key.run_dir.join("hub.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let router = crate::hub::http::agent_door(hub.clone(), agent);
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        })];
        if let Network::Allowlist { domains } = &key.network {
            let proxy = Proxy {
                agent_id: agent.to_string(),
                domains: domains.clone(),
                refusals: self.refusals.clone(),
            };
            let socket = key.run_dir.join("egress.sock");
            // Bound here, so that the socket is there before the runtime starts.
            let _ = std::fs::remove_file(&socket);
            let listener = tokio::net::UnixListener::bind(&socket)?;
            tasks.push(tokio::spawn(async move {
                let _ = proxy.serve(listener).await;
            }));
        }
        Ok(tasks)
    }

    /// Registers `deepcli_sandbox_egress_refused_total{agent}` in a scrape's `registry`.
    pub(super) fn register_metrics(&self, registry: &mut crate::metrics::Registry) {
        use prometheus_client::metrics::counter::ConstCounter;
        let rows = self
            .refusals
            .lock()
            .map(|map| {
                map.iter()
                    .map(|(agent, n)| ([("agent", agent.clone())], ConstCounter::new(*n)))
                    .collect()
            })
            .unwrap_or_default();
        registry.register(
            "deepcli_sandbox_egress_refused",
            "Connections an agent's egress proxy refused",
            crate::metrics::Rows(rows),
        );
    }
}
