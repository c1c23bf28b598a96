//! The console's sessions (console.md, "Signing in"): the operator token, posted once to the
//! login form, is exchanged for a cookie that is a fresh random 256-bit value — never the token.
//! Only the cookie's SHA-256 is kept, in memory, with its expiry and the session's CSRF token,
//! which every form carries and every POST is checked against. Compares are constant-time.
//! Nothing here touches the network or the state: the handlers ask it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::access::http::constant_time_eq;

/// The cookie's name.
pub(crate) const COOKIE: &str = "deepcli_console";
/// How long a session lasts after its login.
pub(crate) const LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// The most sessions kept at once: a new login past it drops the one closest to expiring.
const MAX_SESSIONS: usize = 256;

/// One signed-in browser.
#[derive(Debug, Clone)]
struct Session {
    csrf: String,
    expires: Instant,
}

/// The sessions of one controller, by the SHA-256 of their cookie.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_hash: Mutex<HashMap<[u8; 32], Session>>,
}

/// A session just opened: the cookie to set, and its CSRF token.
#[derive(Debug, Clone)]
pub(crate) struct Opened {
    pub cookie: String,
    pub csrf: String,
}

/// Why a request is not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("not signed in (or the session expired): sign in at /console/login")]
    NoSession,
    #[error("the form's CSRF token is missing or wrong: reload the page and try again")]
    BadCsrf,
    #[error(
        "the operator token is wrong: it is in <state>/operator-token (or DEEPCLI_OPERATOR_TOKEN)"
    )]
    WrongToken,
    #[error("the system's random source failed; try again")]
    NoRandom,
}

fn hash(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// 32 random bytes from the operating system, in hex.
fn random_hex() -> Result<String, Refused> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| Refused::NoRandom)?;
    Ok(hex::encode(bytes))
}

impl Sessions {
    /// Signs in with `given` if it is the operator `token` (compared in constant time): a new
    /// session, good for [`LIFETIME`] from `now`.
    pub(crate) fn login(&self, token: &str, given: &str, now: Instant) -> Result<Opened, Refused> {
        if given.is_empty() || !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            return Err(Refused::WrongToken);
        }
        let opened = Opened {
            cookie: random_hex()?,
            csrf: random_hex()?,
        };
        let mut map = self.by_hash.lock().map_err(|_| Refused::NoSession)?;
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(
            hash(&opened.cookie),
            Session {
                csrf: opened.csrf.clone(),
                expires: now + LIFETIME,
            },
        );
        Ok(opened)
    }

    /// The CSRF token of the live session `cookie` names.
    pub(crate) fn csrf_of(&self, cookie: Option<&str>, now: Instant) -> Result<String, Refused> {
        let cookie = cookie.ok_or(Refused::NoSession)?;
        let mut map = self.by_hash.lock().map_err(|_| Refused::NoSession)?;
        let key = hash(cookie);
        match map.get(&key) {
            Some(s) if s.expires > now => Ok(s.csrf.clone()),
            Some(_) => {
                map.remove(&key);
                Err(Refused::NoSession)
            }
            None => Err(Refused::NoSession),
        }
    }

    /// A POST's check: a live session, and the form's `csrf` its token (constant time).
    pub(crate) fn check_post(
        &self,
        cookie: Option<&str>,
        csrf: Option<&str>,
        now: Instant,
    ) -> Result<(), Refused> {
        let expected = self.csrf_of(cookie, now)?;
        match csrf {
            Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(()),
            _ => Err(Refused::BadCsrf),
        }
    }

    /// Signs `cookie`'s session out.
    pub(crate) fn logout(&self, cookie: Option<&str>) {
        if let (Some(cookie), Ok(mut map)) = (cookie, self.by_hash.lock()) {
            map.remove(&hash(cookie));
        }
    }
}

/// The console cookie's value in a `Cookie` header, if there is one.
pub(crate) fn cookie_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_string())
}

/// The `Set-Cookie` of a new session: HttpOnly, SameSite=Strict, the whole site.
pub(crate) fn set_cookie(cookie: &str) -> String {
    format!(
        "{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` that forgets the session.
pub(crate) fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_cookie_is_fresh_random_and_never_the_token() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let a = sessions.login(TOKEN, TOKEN, now).unwrap();
        let b = sessions.login(TOKEN, TOKEN, now).unwrap();
        assert_ne!(a.cookie, TOKEN);
        assert!(!a.cookie.contains(TOKEN));
        assert_ne!(a.cookie, b.cookie);
        assert_ne!(a.csrf, b.csrf);
        // 256 bits, in hex.
        assert_eq!(a.cookie.len(), 64);
        assert!(a.cookie.bytes().all(|c| c.is_ascii_hexdigit()));
        // Only the hash is kept.
        let map = sessions.by_hash.lock().unwrap();
        assert!(map.contains_key(&hash(&a.cookie)));
        assert!(!map.keys().any(|k| hex::encode(k) == a.cookie));
    }

    #[test]
    fn a_wrong_or_empty_token_opens_nothing() {
        let sessions = Sessions::default();
        let now = Instant::now();
        for given in ["", "x", &TOKEN[..31], &format!("{TOKEN}0")] {
            assert_eq!(
                sessions.login(TOKEN, given, now).unwrap_err(),
                Refused::WrongToken
            );
        }
        assert!(sessions.by_hash.lock().unwrap().is_empty());
    }

    #[test]
    fn a_post_needs_the_session_and_its_own_csrf_token() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let a = sessions.login(TOKEN, TOKEN, now).unwrap();
        let b = sessions.login(TOKEN, TOKEN, now).unwrap();
        assert_eq!(
            sessions.check_post(Some(&a.cookie), Some(&a.csrf), now),
            Ok(())
        );
        // Another session's token, none, or a wrong one.
        for csrf in [Some(b.csrf.as_str()), None, Some(""), Some("x")] {
            assert_eq!(
                sessions.check_post(Some(&a.cookie), csrf, now),
                Err(Refused::BadCsrf)
            );
        }
        // No cookie, or one deepcli did not give.
        assert_eq!(
            sessions.check_post(None, Some(&a.csrf), now),
            Err(Refused::NoSession)
        );
        assert_eq!(
            sessions.check_post(Some(TOKEN), Some(&a.csrf), now),
            Err(Refused::NoSession)
        );
    }

    #[test]
    fn a_session_expires_and_a_logout_ends_it() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let a = sessions.login(TOKEN, TOKEN, now).unwrap();
        assert!(sessions.csrf_of(Some(&a.cookie), now + LIFETIME).is_err());
        // Expired sessions are dropped when seen.
        assert!(sessions.by_hash.lock().unwrap().is_empty());
        let b = sessions.login(TOKEN, TOKEN, now).unwrap();
        assert!(sessions.csrf_of(Some(&b.cookie), now).is_ok());
        sessions.logout(Some(&b.cookie));
        assert_eq!(
            sessions.csrf_of(Some(&b.cookie), now),
            Err(Refused::NoSession)
        );
    }

    #[test]
    fn logins_past_the_limit_drop_the_oldest() {
        let sessions = Sessions::default();
        let start = Instant::now();
        let first = sessions.login(TOKEN, TOKEN, start).unwrap();
        for i in 1..=MAX_SESSIONS {
            sessions
                .login(TOKEN, TOKEN, start + Duration::from_millis(i as u64))
                .unwrap();
        }
        assert_eq!(sessions.by_hash.lock().unwrap().len(), MAX_SESSIONS);
        assert!(sessions.csrf_of(Some(&first.cookie), start).is_err());
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            "a=1; deepcli_console=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_of(&headers).as_deref(), Some("abc"));
        assert_eq!(cookie_of(&axum::http::HeaderMap::new()), None);
        let set = set_cookie("abc");
        for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
            assert!(set.contains(part), "{set}");
        }
    }
}
