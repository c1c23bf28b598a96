//! A real credential check against the platform, outside any connection: `channels login`
//! and `channels status --probe` when no controller reports the account live. `getMe` for
//! Telegram, `auth.test` for Slack.

use std::time::Duration;

use super::{AdapterSpec, Identity, Platform};

/// Checks the account's bot token with the platform; the bot's identity, or why not.
pub async fn check(http: &reqwest::Client, spec: &AdapterSpec) -> Result<Identity, String> {
    let token = spec
        .bot_token
        .as_ref()
        .map_err(|why| format!("`botToken`: {why}"))?;
    match spec.platform {
        Platform::Telegram => {
            let api = super::telegram::Api {
                http,
                base: &spec.api_base,
                token: &token.0,
            };
            super::telegram::get_me(&api)
                .await
                .map_err(|e| e.to_string())
        }
        Platform::Slack => super::slack::auth_test(http, &spec.api_base, &token.0)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// [`check`] from synchronous code (the management service), within `timeout`.
pub fn check_now(spec: &AdapterSpec, timeout: Duration) -> Result<Identity, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the probe: {e}"))?;
    runtime.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        tokio::time::timeout(timeout, check(&http, spec))
            .await
            .map_err(|_| format!("no answer within {} s", timeout.as_secs()))?
    })
}

/// `deleteWebhook` for `channels logout` (Telegram).
pub fn delete_webhook_now(spec: &AdapterSpec, timeout: Duration) -> Result<(), String> {
    let token = spec
        .bot_token
        .as_ref()
        .map_err(|why| format!("`botToken`: {why}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))?;
    runtime.block_on(async {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        super::telegram::delete_webhook(&http, &spec.api_base, &token.0)
            .await
            .map_err(|e| e.to_string())
    })
}
