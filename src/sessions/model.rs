//! An agent's `model`, applied to its ACP sessions (config.md, `model`): through the session
//! config option of category `model` that the agent offers in `session/new` and `session/load`
//! (`session/set_config_option`), the primary first and each fallback in order when the agent
//! does not offer it or refuses it. Where nothing can be applied, the report says why.
//!
//! This module decides and asks; it keeps nothing itself (the session's selection lives in the
//! runtime ([`SessionRuntime::session_model`]), the agent's last report in [`super::Sessions`]).

use crate::config::model::Model;
use crate::runtime::SessionRuntime;
use crate::runtime::acp::{ModelReport, SessionModel};

/// The model ids a config `model` names, in the order they are tried.
pub(crate) fn candidates(model: &Model) -> Vec<String> {
    match model {
        Model::Id(id) => vec![id.clone()],
        Model::WithFallbacks { primary, fallbacks } => {
            std::iter::once(primary).chain(fallbacks).cloned().collect()
        }
    }
}

/// The value of the agent's that stands for config model `id`: the same id, else the id
/// without its provider (`anthropic/claude-sonnet-4` is offered as `claude-sonnet-4`).
fn offered<'a>(id: &str, values: &'a [String]) -> Option<&'a String> {
    let bare = id.rsplit_once('/').map_or(id, |(_, bare)| bare);
    values
        .iter()
        .find(|v| *v == id)
        .or_else(|| values.iter().find(|v| *v == bare))
}

/// Applies `wanted` (the config's candidates, in order) to runtime session `session_id`,
/// whose selection is `session`: the first candidate the agent offers and accepts. Returns
/// the session's selection afterwards and the report.
pub(crate) async fn apply(
    handle: &dyn SessionRuntime,
    session_id: &str,
    mut session: SessionModel,
    wanted: &[String],
) -> (SessionModel, ModelReport) {
    session.wanted = wanted.to_vec();
    let primary = wanted.first().cloned().unwrap_or_default();
    let not_applied = |why: String| ModelReport {
        wanted: primary.clone(),
        applied: None,
        why: Some(why),
    };
    let Some((config_id, values)) = session.option.clone() else {
        return (
            session,
            not_applied(
                "the agent offers no model selection (no session config option of category `model`)"
                    .to_string(),
            ),
        );
    };
    let mut tried = Vec::new();
    for candidate in wanted {
        let Some(value) = offered(candidate, &values) else {
            tried.push(format!("`{candidate}` is not offered"));
            continue;
        };
        if session.current.as_ref() != Some(value) {
            let set = handle.set_config_option(session_id, &config_id, value);
            if let Err(message) = set.await {
                tried.push(format!("`{candidate}` was refused: {message}"));
                continue;
            }
            session.current = Some(value.clone());
        }
        let why = (!tried.is_empty()).then(|| format!("a fallback: {}", tried.join("; ")));
        let report = ModelReport {
            wanted: primary.clone(),
            applied: Some(value.clone()),
            why,
        };
        return (session, report);
    }
    let current = session.current.as_ref().map_or(String::new(), |c| {
        format!("; the agent's own `{c}` is in use")
    });
    let why = format!(
        "{} (the agent offers {}){current}",
        tried.join("; "),
        values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    (session, not_applied(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_offered_by_its_id_or_without_its_provider() {
        let values = vec!["claude-sonnet-4".to_string(), "openai/gpt-4.1".to_string()];
        assert_eq!(
            offered("anthropic/claude-sonnet-4", &values).map(String::as_str),
            Some("claude-sonnet-4")
        );
        assert_eq!(
            offered("openai/gpt-4.1", &values).map(String::as_str),
            Some("openai/gpt-4.1")
        );
        assert_eq!(offered("gpt-4.1", &values), None);
    }
}
