//! What the management service asks a platform, outside any connection: a real credential
//! check (`channels login`, `channels status --probe` when no controller reports the account
//! connected: `getMe` / `auth.test`), `deleteWebhook` (`channels logout`), and `resolve`:
//! human names to the ids bindings need, page by page through the platform's directory.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::discord;
use super::slack::{self, Conversation, Page, User};
use super::telegram::{self, Chat, GetChat};
use super::{AdapterSpec, Identity, Lenient, Platform, Unreached};

/// Why a credential check ([`check`]) did not give the bot's identity. A platform that was not
/// reached says nothing of the credentials: [`CheckError::Unreachable`] is never a refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CheckError {
    /// The bot token does not resolve (or is not usable): nothing was sent. Its words name
    /// the field (`botToken`, Discord's `token`).
    #[error("{0}")]
    NoToken(String),
    /// No answer from the platform's host: DNS, connect, TLS, or none in time.
    #[error("{0}")]
    Unreachable(Unreached),
    /// The platform answered, and refused the credentials.
    #[error("{0}")]
    Refused(String),
    /// The platform answered something else (rate limited, an answer that is not its API's), or
    /// the check could not run here.
    #[error("{0}")]
    Failed(String),
}

impl From<telegram::ApiError> for CheckError {
    fn from(e: telegram::ApiError) -> CheckError {
        match e {
            telegram::ApiError::Unauthorized(_) => CheckError::Refused(e.to_string()),
            telegram::ApiError::Unreachable(u) => CheckError::Unreachable(u),
            e => CheckError::Failed(e.to_string()),
        }
    }
}

impl From<discord::ApiError> for CheckError {
    fn from(e: discord::ApiError) -> CheckError {
        match e {
            discord::ApiError::Unauthorized(_) => CheckError::Refused(e.to_string()),
            discord::ApiError::Unreachable(u) => CheckError::Unreachable(u),
            e => CheckError::Failed(e.to_string()),
        }
    }
}

impl From<slack::ApiError> for CheckError {
    fn from(e: slack::ApiError) -> CheckError {
        match e {
            slack::ApiError::Unauthorized(_) => CheckError::Refused(e.to_string()),
            slack::ApiError::Unreachable(u) => CheckError::Unreachable(u),
            e => CheckError::Failed(e.to_string()),
        }
    }
}

/// Checks the account's bot token with the platform; the bot's identity, or why not.
pub(crate) async fn check(
    http: &reqwest::Client,
    spec: &AdapterSpec,
) -> Result<Identity, CheckError> {
    let token = spec
        .bot_token
        .as_ref()
        .map_err(|why| CheckError::NoToken(format!("`{}`: {why}", spec.platform.token_field())))?;
    match spec.platform {
        Platform::Telegram => {
            let api = telegram::Api {
                http,
                base: &spec.api_base,
                token: token.expose(),
            };
            Ok(api.get_me().await?)
        }
        Platform::Slack => Ok(slack::auth_test(http, &spec.api_base, token.expose()).await?),
        Platform::Discord => {
            let limits = discord::RateLimits::default();
            let api = discord::Api {
                http,
                base: &spec.api_base,
                token: token.expose(),
                limits: &limits,
            };
            Ok(api.me().await?)
        }
    }
}

/// Why [`on_own_runtime`] got no result.
enum Stalled {
    /// The runtime or the HTTP client could not be made.
    Start(String),
    /// Nothing within the bound.
    Timeout(Duration),
}

/// Runs `f` on a runtime of its own, on a thread of its own (callers may be on a runtime's
/// blocking pool), within `timeout`.
fn on_own_runtime<T: Send + 'static, E: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce(
        reqwest::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>
    + Send
    + 'static,
) -> Result<Result<T, E>, Stalled> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Stalled::Start(format!("cannot start: {e}")))?;
        runtime.block_on(async move {
            let http = crate::http_client::builder()
                .timeout(timeout)
                .build()
                .map_err(|e| Stalled::Start(format!("cannot build the HTTP client: {e}")))?;
            tokio::time::timeout(timeout, f(http))
                .await
                .map_err(|_| Stalled::Timeout(timeout))
        })
    })
    .join()
    .unwrap_or_else(|_| Err(Stalled::Start("the platform check failed".into())))
}

/// [`check`] from synchronous code.
pub(crate) fn check_now(spec: &AdapterSpec, timeout: Duration) -> Result<Identity, CheckError> {
    let owned = spec.clone();
    match on_own_runtime(timeout, move |http| {
        Box::pin(async move { check(&http, &owned).await })
    }) {
        Ok(checked) => checked,
        Err(Stalled::Start(why)) => Err(CheckError::Failed(why)),
        Err(Stalled::Timeout(after)) => Err(CheckError::Unreachable(Unreached {
            host: super::api_host(&spec.api_base),
            detail: format!("no answer within {} ms", after.as_millis()),
        })),
    }
}

/// Why a call run by [`on_own_runtime`] got no answer, in words.
fn stalled(spec: &AdapterSpec, stalled: Stalled) -> String {
    match stalled {
        Stalled::Start(why) => why,
        Stalled::Timeout(after) => Unreached {
            host: super::api_host(&spec.api_base),
            detail: format!("no answer within {} ms", after.as_millis()),
        }
        .to_string(),
    }
}

/// `deleteWebhook` (Telegram's `channels logout`).
pub(crate) fn delete_webhook_now(spec: &AdapterSpec, timeout: Duration) -> Result<(), String> {
    let owned = spec.clone();
    on_own_runtime(timeout, move |http| {
        Box::pin(async move {
            let token = owned
                .bot_token
                .as_ref()
                .map_err(|why| format!("`botToken`: {why}"))?;
            let api = telegram::Api {
                http: &http,
                base: &owned.api_base,
                token: token.expose(),
            };
            api.delete_webhook(Duration::from_secs(15))
                .await
                .map_err(|e| e.to_string())
        })
    })
    .unwrap_or_else(|e| Err(stalled(spec, e)))
}

/// What a name turned into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// As given.
    pub name: String,
    /// `user`, `group`, `channel` or `role` (Discord).
    pub kind: String,
    /// `found`, `not-found` or `ambiguous`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// For `ambiguous`: every match; for `not-found`: a note.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Candidate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: String,
    pub name: String,
}

/// The kind a name means: `--kind`, else `@name` a user and `#name` a channel.
pub(crate) fn kind_of(name: &str, kind: Option<&str>) -> String {
    match kind {
        Some(k) => k.to_string(),
        None if name.starts_with('#') => "channel".into(),
        None if name.starts_with('&') => "role".into(),
        None => "user".into(),
    }
}

/// Most directory pages read for one resolve (Slack answers up to 200 entries a page).
const MAX_PAGES: usize = 200;

/// The arguments of a paged Slack list method.
#[derive(Debug, Clone, Serialize)]
struct ListArgs {
    /// `conversations.list`: which kinds, archived ones left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    types: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exclude_archived: Option<bool>,
    limit: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
}

/// Every entry of a paged Slack list method (`users.list` → `members`, `conversations.list`
/// → `channels`), following `response_metadata.next_cursor`.
async fn slack_directory<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    spec: &AdapterSpec,
    method: &str,
    mut args: ListArgs,
) -> Result<Vec<T>, String> {
    let token = spec
        .bot_token
        .as_ref()
        .map_err(|why| format!("`botToken`: {why}"))?;
    let mut out = Vec::new();
    for _ in 0..MAX_PAGES {
        let page: Page<T> = loop {
            match slack::call(http, &spec.api_base, token.expose(), method, &args).await {
                Ok(page) => break page,
                Err(slack::ApiError::RateLimited(wait)) if wait <= Duration::from_secs(30) => {
                    tokio::time::sleep(wait).await;
                }
                Err(e) => return Err(format!("{method}: {e}")),
            }
        };
        out.extend(page.members.into_iter().flatten());
        out.extend(page.channels.into_iter().flatten());
        let cursor = page
            .response_metadata
            .and_then(|m| m.next_cursor)
            .unwrap_or_default();
        if cursor.is_empty() {
            return Ok(out);
        }
        args.cursor = Some(cursor);
    }
    Ok(out)
}

fn matched(name: &str, kind: String, hits: Vec<Candidate>, note: Option<String>) -> Resolution {
    let (status, id) = match hits.len() {
        0 => ("not-found", None),
        1 => ("found", Some(hits[0].id.clone())),
        _ => ("ambiguous", None),
    };
    Resolution {
        name: name.to_string(),
        kind,
        status: status.to_string(),
        id,
        candidates: if hits.len() > 1 { hits } else { Vec::new() },
        note: if status == "not-found" { note } else { None },
    }
}

/// Resolves `names` on the account's platform.
pub(crate) async fn resolve(
    http: &reqwest::Client,
    spec: &AdapterSpec,
    names: &[String],
    kind: Option<&str>,
) -> Result<Vec<Resolution>, String> {
    let mut out = Vec::new();
    match spec.platform {
        Platform::Discord => return resolve_discord(http, spec, names, kind).await,
        Platform::Slack => {
            let wants = |k: &str| names.iter().any(|n| kind_of(n, kind) == k);
            let list = ListArgs {
                types: None,
                exclude_archived: None,
                limit: 200,
                cursor: None,
            };
            let users: Vec<User> = if wants("user") {
                slack_directory(http, spec, "users.list", list.clone()).await?
            } else {
                Vec::new()
            };
            let channels: Vec<Conversation> = if wants("channel") || wants("group") {
                let args = ListArgs {
                    types: Some("public_channel,private_channel,mpim"),
                    exclude_archived: Some(true),
                    ..list
                };
                slack_directory(http, spec, "conversations.list", args).await?
            } else {
                Vec::new()
            };
            for name in names {
                let k = kind_of(name, kind);
                let bare = name.trim().trim_start_matches(['@', '#']).to_lowercase();
                let is = |v: &Option<String>| v.as_ref().is_some_and(|s| s.to_lowercase() == bare);
                let hits: Vec<Candidate> = if k == "user" {
                    users
                        .iter()
                        .filter(|u| u.deleted != Some(true))
                        .filter(|u| {
                            let display = u.profile.as_ref().and_then(|p| p.display_name.clone());
                            is(&u.name) || is(&display) || is(&u.real_name) || is(&u.id)
                        })
                        .map(|u| Candidate {
                            id: u.id.clone().unwrap_or_default(),
                            name: u
                                .real_name
                                .clone()
                                .or_else(|| u.name.clone())
                                .unwrap_or_default(),
                        })
                        .collect()
                } else {
                    channels
                        .iter()
                        .filter(|c| is(&c.name) || is(&c.id))
                        .map(|c| Candidate {
                            id: c.id.clone().unwrap_or_default(),
                            name: c.name.clone().unwrap_or_default(),
                        })
                        .collect()
                };
                out.push(matched(name, k, hits, None));
            }
        }
        Platform::Telegram => {
            let token = spec
                .bot_token
                .as_ref()
                .map_err(|why| format!("`botToken`: {why}"))?;
            let api = telegram::Api {
                http,
                base: &spec.api_base,
                token: token.expose(),
            };
            for name in names {
                let k = kind_of(name, kind);
                let bare = name.trim();
                if bare
                    .trim_start_matches('-')
                    .chars()
                    .all(|c| c.is_ascii_digit())
                    && !bare.is_empty()
                {
                    out.push(matched(
                        name,
                        k,
                        vec![Candidate {
                            id: bare.into(),
                            name: bare.into(),
                        }],
                        None,
                    ));
                    continue;
                }
                let chat = format!("@{}", bare.trim_start_matches(['@', '#']));
                let found = api
                    .call::<_, Lenient<Chat>>(
                        "getChat",
                        &GetChat { chat_id: &chat },
                        Duration::from_secs(15),
                    )
                    .await;
                let hits = match found {
                    Ok(Lenient(c)) => {
                        let c = c.unwrap_or_default();
                        c.id.map(|id| Candidate {
                            id: id.to_string(),
                            name: c.title.or(c.username).unwrap_or_default(),
                        })
                        .into_iter()
                        .collect()
                    }
                    Err(telegram::ApiError::Refused { .. }) => Vec::new(),
                    Err(e) => return Err(format!("getChat: {e}")),
                };
                let note = (k == "user").then(|| {
                    "Telegram has no user directory: a user's numeric id shows in `deepcli pairing list` and `channels logs`".to_string()
                });
                out.push(matched(name, k, hits, note));
            }
        }
    }
    Ok(out)
}

/// Most members one name search answers (Discord's limit).
const MEMBER_SEARCH: u32 = 1000;

/// Discord: channels (and threads) and roles of every guild the bot is in by name, members by
/// their user name, global name or nickname (`GET /guilds/{id}/members/search`: the Server
/// Members intent must be on); an id as it is.
async fn resolve_discord(
    http: &reqwest::Client,
    spec: &AdapterSpec,
    names: &[String],
    kind: Option<&str>,
) -> Result<Vec<Resolution>, String> {
    let token = spec
        .bot_token
        .as_ref()
        .map_err(|why| format!("`token`: {why}"))?;
    let limits = discord::RateLimits::default();
    let api = discord::Api {
        http,
        base: &spec.api_base,
        token: token.expose(),
        limits: &limits,
    };
    let guilds: Vec<Lenient<discord::Guild>> = api
        .get("/users/@me/guilds?limit=200")
        .await
        .map_err(|e| format!("GET /users/@me/guilds: {e}"))?;
    let guilds: Vec<discord::Guild> = guilds.into_iter().filter_map(|g| g.0).collect();
    let wants = |k: &str| names.iter().any(|n| kind_of(n, kind) == k);
    let mut channels: Vec<(Candidate, String)> = Vec::new();
    let mut roles: Vec<(Candidate, String)> = Vec::new();
    for guild in &guilds {
        let (Some(id), guild_name) = (&guild.id, guild.name.clone().unwrap_or_default()) else {
            continue;
        };
        let named = |items: Vec<Lenient<discord::Channel>>| {
            items
                .into_iter()
                .filter_map(|c| c.0)
                .filter_map(|c| {
                    Some((
                        Candidate {
                            id: c.id?,
                            name: format!("{} ({guild_name})", c.name.clone().unwrap_or_default()),
                        },
                        c.name.unwrap_or_default(),
                    ))
                })
                .collect::<Vec<_>>()
        };
        if wants("channel") || wants("group") {
            let list: Vec<Lenient<discord::Channel>> = api
                .get(&format!("/guilds/{id}/channels"))
                .await
                .map_err(|e| format!("GET /guilds/{id}/channels: {e}"))?;
            channels.extend(named(list));
        }
        if wants("role") {
            let list: Vec<Lenient<discord::Role>> =
                api.get(&format!("/guilds/{id}/roles"))
                    .await
                    .map_err(|e| format!("GET /guilds/{id}/roles: {e}"))?;
            roles.extend(list.into_iter().filter_map(|r| r.0).filter_map(|r| {
                let name = r.name.unwrap_or_default();
                Some((
                    Candidate {
                        id: r.id?,
                        name: format!("{name} ({guild_name})"),
                    },
                    name,
                ))
            }));
        }
    }
    let mut out = Vec::new();
    for name in names {
        let k = kind_of(name, kind);
        let bare = name.trim().trim_start_matches(['@', '#', '&']);
        if !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit()) {
            let hit = Candidate {
                id: bare.into(),
                name: bare.into(),
            };
            out.push(matched(name, k, vec![hit], None));
            continue;
        }
        let lower = bare.to_lowercase();
        let hits: Vec<Candidate> = match k.as_str() {
            "user" => {
                let mut hits: Vec<Candidate> = Vec::new();
                for guild in &guilds {
                    let Some(id) = &guild.id else { continue };
                    let query: String = form_urlencoded::byte_serialize(bare.as_bytes()).collect();
                    let path =
                        format!("/guilds/{id}/members/search?query={query}&limit={MEMBER_SEARCH}");
                    let members: Vec<Lenient<discord::Member>> = api
                        .get(&path)
                        .await
                        .map_err(|e| format!("GET /guilds/{id}/members/search: {e}"))?;
                    for member in members.into_iter().filter_map(|m| m.0) {
                        let user = member.user.clone().unwrap_or_default();
                        let is = |v: &Option<String>| {
                            v.as_ref().is_some_and(|s| s.to_lowercase() == lower)
                        };
                        if (is(&user.username) || is(&user.global_name) || is(&member.nick))
                            && let Some(uid) = user.id
                            && !hits.iter().any(|h| h.id == uid)
                        {
                            hits.push(Candidate {
                                id: uid,
                                name: user.global_name.or(user.username).unwrap_or_default(),
                            });
                        }
                    }
                }
                hits
            }
            "role" => roles
                .iter()
                .filter(|(_, n)| n.to_lowercase() == lower)
                .map(|(c, _)| c.clone())
                .collect(),
            _ => channels
                .iter()
                .filter(|(_, n)| n.to_lowercase() == lower)
                .map(|(c, _)| c.clone())
                .collect(),
        };
        let note = guilds.is_empty().then(|| {
            "the bot is in no guild: invite it with the OAuth2 URL Generator (scope `bot`)"
                .to_string()
        });
        out.push(matched(name, k, hits, note));
    }
    Ok(out)
}

/// [`resolve`] from synchronous code.
pub(crate) fn resolve_now(
    spec: &AdapterSpec,
    names: Vec<String>,
    kind: Option<String>,
    timeout: Duration,
) -> Result<Vec<Resolution>, String> {
    let owned = spec.clone();
    on_own_runtime(timeout, move |http| {
        Box::pin(async move { resolve(&http, &owned, &names, kind.as_deref()).await })
    })
    .unwrap_or_else(|e| Err(stalled(spec, e)))
}
