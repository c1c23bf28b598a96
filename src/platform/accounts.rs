//! The account rows `channels login` / `logout` write and the running adapters read
//! (`adapters.sql`): the bot identity recorded per account, and the accounts logged out.
//!
//! A connection of its own (as the Access layer has). Every call is short; async callers run
//! it on the blocking pool.

use super::Identity;
use crate::state::db::{Optional, Query, params};
use crate::state::{LayerConnection, StateDir, StateError};

pub(crate) struct AccountStore {
    db: LayerConnection,
}

/// The bot identity recorded for an account.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub bot_user_id: String,
    pub bot_name: Option<String>,
    pub team_id: Option<String>,
    pub at: String,
}

impl AccountStore {
    pub(crate) fn open(dir: &StateDir) -> Result<AccountStore, StateError> {
        Ok(AccountStore {
            db: LayerConnection::open(dir, "platform account")?,
        })
    }

    pub(crate) fn record_identity(
        &self,
        channel: &str,
        account: &str,
        identity: &Identity,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            c.execute(
                "INSERT INTO adapter_identities (channel, account_id, bot_user_id, bot_name, team_id, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (channel, account_id) DO UPDATE SET bot_user_id = excluded.bot_user_id,
                   bot_name = excluded.bot_name, team_id = excluded.team_id, at = excluded.at",
                params![
                    channel,
                    account,
                    identity.bot_user_id,
                    identity.name,
                    identity.team_id,
                    now
                ],
            )
            .map(drop)
        })
    }

    /// Forgets the recorded identity; whether there was one.
    pub(crate) fn forget_identity(&self, channel: &str, account: &str) -> Result<bool, StateError> {
        self.db.write(|c| {
            c.execute(
                "DELETE FROM adapter_identities WHERE channel = ?1 AND account_id = ?2",
                params![channel, account],
            )
            .map(|n| n > 0)
        })
    }

    /// `channels logout` (true) or `login` (false).
    pub(crate) fn set_logged_out(
        &self,
        channel: &str,
        account: &str,
        out: bool,
    ) -> Result<(), StateError> {
        let now = crate::clock::now();
        self.db.write(|c| {
            if out {
                c.execute(
                    "INSERT INTO adapter_logouts (channel, account_id, at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (channel, account_id) DO UPDATE SET at = excluded.at",
                    params![channel, account, now],
                )
            } else {
                c.execute(
                    "DELETE FROM adapter_logouts WHERE channel = ?1 AND account_id = ?2",
                    params![channel, account],
                )
            }
            .map(drop)
        })
    }

    pub(crate) fn logged_out(&self, channel: &str, account: &str) -> Result<bool, StateError> {
        self.db.query(|c| {
            c.query_row(
                "SELECT 1 FROM adapter_logouts WHERE channel = ?1 AND account_id = ?2",
                params![channel, account],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
        })
    }

    #[cfg(test)]
    pub(crate) fn identity(
        &self,
        channel: &str,
        account: &str,
    ) -> Result<Option<Recorded>, StateError> {
        self.db.write(|c| {
            c.query_row(
                "SELECT bot_user_id, bot_name, team_id, at FROM adapter_identities \
                 WHERE channel = ?1 AND account_id = ?2",
                params![channel, account],
                |r| {
                    Ok(Recorded {
                        bot_user_id: r.get(0)?,
                        bot_name: r.get(1)?,
                        team_id: r.get(2)?,
                        at: r.get(3)?,
                    })
                },
            )
            .optional()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_records_the_identity_and_logout_forgets_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().join("state"));
        let postgres = crate::state::db::testing::PgSchema::new();
        for store in [
            AccountStore::open(&state).unwrap(),
            AccountStore::open(&state.clone().with_postgres(postgres.url().clone())).unwrap(),
        ] {
            login_and_logout(&store);
        }
    }

    fn login_and_logout(store: &AccountStore) {
        let me = Identity {
            bot_user_id: "U1".into(),
            name: Some("deep".into()),
            bot_id: None,
            team_id: Some("T1".into()),
        };
        assert!(!store.logged_out("slack", "a").unwrap());
        store.record_identity("slack", "a", &me).unwrap();
        let recorded = store.identity("slack", "a").unwrap().unwrap();
        assert_eq!(
            (recorded.bot_user_id.as_str(), recorded.team_id.as_deref()),
            ("U1", Some("T1"))
        );
        store.set_logged_out("slack", "a", true).unwrap();
        assert!(store.logged_out("slack", "a").unwrap());
        assert!(store.forget_identity("slack", "a").unwrap());
        assert!(!store.forget_identity("slack", "a").unwrap());
        assert!(store.identity("slack", "a").unwrap().is_none());
        store.set_logged_out("slack", "a", false).unwrap();
        assert!(!store.logged_out("slack", "a").unwrap());
    }
}
