//! An agent's `model`, applied to its ACP sessions (config.md, `model`): through the session
//! config option of category `model` that the agent offers in `session/new` and `session/load`
//! (`session/set_config_option`), the primary first and each fallback in order when the agent
//! does not offer it or refuses it. Where nothing can be applied, the report says why.
//!
//! This module decides and asks; it keeps nothing itself (the session's selection lives in the
//! runtime's [`AcpHandle`], the agent's last report in [`super::Access`]).

use agent_client_protocol::v1::schema::{
    SessionConfigKind, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOptions, SetSessionConfigOptionRequest,
};

use crate::config::model::Model;
use crate::runtime::acp::{AcpHandle, ModelReport, SessionModel};

/// The model ids a config `model` names, in the order they are tried.
pub fn candidates(model: &Model) -> Vec<String> {
    match model {
        Model::Id(id) => vec![id.clone()],
        Model::WithFallbacks { primary, fallbacks } => {
            std::iter::once(primary).chain(fallbacks).cloned().collect()
        }
    }
}

/// The session's model selection, from the config options a `session/new` or `session/load`
/// answer carried: the select option of category `model` (or, without categories, the one
/// with id `model`), its id, current value and offered values.
pub fn selection(options: Option<&[SessionConfigOption]>) -> SessionModel {
    let options = options.unwrap_or_default();
    let is_model = |o: &&SessionConfigOption| {
        o.category == Some(SessionConfigOptionCategory::Model)
            || (o.category.is_none() && &*o.id.0 == "model")
    };
    let select = options.iter().filter(is_model).find_map(|o| match &o.kind {
        SessionConfigKind::Select(select) => Some((o, select)),
        _ => None,
    });
    let Some((option, select)) = select else {
        return SessionModel::default();
    };
    let values = match &select.options {
        SessionConfigSelectOptions::Ungrouped(options) => {
            options.iter().map(|o| o.value.0.to_string()).collect()
        }
        SessionConfigSelectOptions::Grouped(groups) => groups
            .iter()
            .flat_map(|g| &g.options)
            .map(|o| o.value.0.to_string())
            .collect(),
        _ => Vec::new(),
    };
    SessionModel {
        wanted: Vec::new(),
        option: Some((option.id.0.to_string(), values)),
        current: Some(select.current_value.0.to_string()),
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
pub async fn apply(
    handle: &AcpHandle,
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
            let request = SetSessionConfigOptionRequest::new(
                session_id.to_string(),
                config_id.clone(),
                value.as_str(),
            );
            if let Err(e) = handle.cx.send_request(request).block_task().await {
                tried.push(format!("`{candidate}` was refused: {}", e.message));
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

    #[test]
    fn the_model_option_is_found_by_category_or_id() {
        let option = |id: &str, category: Option<SessionConfigOptionCategory>| {
            SessionConfigOption::select(
                id.to_string(),
                "Model",
                "a",
                vec![
                    agent_client_protocol::v1::schema::SessionConfigSelectOption::new("a", "A"),
                    agent_client_protocol::v1::schema::SessionConfigSelectOption::new("b", "B"),
                ],
            )
            .category(category)
        };
        let found = selection(Some(&[
            option("mode", Some(SessionConfigOptionCategory::Mode)),
            option("llm", Some(SessionConfigOptionCategory::Model)),
        ]));
        assert_eq!(
            found.option,
            Some(("llm".to_string(), vec!["a".to_string(), "b".to_string()]))
        );
        assert_eq!(found.current.as_deref(), Some("a"));
        assert_eq!(
            selection(Some(&[option("model", None)]))
                .option
                .map(|o| o.0),
            Some("model".to_string())
        );
        assert_eq!(selection(None), SessionModel::default());
        assert_eq!(
            selection(Some(&[option(
                "mode",
                Some(SessionConfigOptionCategory::Mode)
            )]))
            .option,
            None
        );
    }
}
