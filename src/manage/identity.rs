//! Reading an agent's identity from the `IDENTITY.md` of its workspace: the `- Name:`,
//! `- Emoji:`, `- Theme:` (or `Creature:` / `Vibe:`) and `- Avatar:` lines OpenClaw writes.

use serde::Serialize;

/// The identity fields found in a file; unset fields were not there (or empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IdentityFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emoji: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avatar: Option<String>,
}

impl IdentityFields {
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.emoji.is_none() && self.theme.is_none() && self.avatar.is_none()
    }

    /// `self`'s fields where set, else `fallback`'s.
    pub fn or(self, fallback: IdentityFields) -> IdentityFields {
        IdentityFields {
            name: self.name.or(fallback.name),
            emoji: self.emoji.or(fallback.emoji),
            theme: self.theme.or(fallback.theme),
            avatar: self.avatar.or(fallback.avatar),
        }
    }
}

/// Parses `- Name: …` style lines. Markdown emphasis around the label (`- **Name:** …`) is
/// accepted; placeholder values in parentheses or brackets (template hints) are ignored. The
/// first value of each field wins.
pub fn parse(text: &str) -> IdentityFields {
    let mut out = IdentityFields::default();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix(['-', '*']) else {
            continue;
        };
        let rest = rest.trim_start().replace("**", "").replace("__", "");
        let Some((label, value)) = rest.split_once(':') else {
            continue;
        };
        let value = value.trim().trim_matches('*').trim();
        if value.is_empty()
            || (value.starts_with('(') && value.ends_with(')'))
            || (value.starts_with('[') && value.ends_with(']'))
            || value.starts_with('_')
            || value.starts_with("{{")
            || matches!(value, "—" | "-" | "–")
        {
            continue;
        }
        let slot = match label.trim().to_ascii_lowercase().as_str() {
            "name" => &mut out.name,
            "emoji" => &mut out.emoji,
            "theme" | "creature" | "vibe" => &mut out.theme,
            "avatar" => &mut out.avatar,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openclaw_identity_lines() {
        let text = "# IDENTITY\n\n- **Name:** Research\n- Emoji: 🔎\n- Creature: owl\n- Vibe: curious\n- Avatar: (path or URL)\n";
        let f = parse(text);
        assert_eq!(f.name.as_deref(), Some("Research"));
        assert_eq!(f.emoji.as_deref(), Some("🔎"));
        assert_eq!(f.theme.as_deref(), Some("owl"));
        assert_eq!(f.avatar, None);
    }
}
