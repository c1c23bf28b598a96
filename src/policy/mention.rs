//! Mention patterns (policy.md, `mentionPatterns` and an agent's `groupChat.mentionPatterns`):
//! regexes checked against a message's text. Compiled with the `regex` crate, whose matching
//! is linear in the text whatever the pattern, under size limits, so no pattern an operator
//! writes can make gating slow; a pattern the crate refuses (look-around, back-references,
//! one that compiles past the limits) is a validation error, never a runtime surprise.

use regex::{RegexSet, RegexSetBuilder};

/// Patterns longer than this are refused (characters).
pub const MAX_PATTERN_CHARS: usize = 512;
/// More patterns than this at one place are refused.
pub const MAX_PATTERNS: usize = 64;
/// The compiled program of one place's patterns may not grow past this (bytes).
const SIZE_LIMIT: usize = 1 << 20;
const DFA_SIZE_LIMIT: usize = 1 << 20;

/// Why a place's mention patterns do not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("{count} patterns; at most {MAX_PATTERNS} are allowed at one place")]
    TooMany { count: usize },
    #[error("pattern {index} is {chars} characters long; at most {MAX_PATTERN_CHARS} are allowed")]
    TooLong { index: usize, chars: usize },
    #[error("pattern {index} is empty: it would match every message")]
    Empty { index: usize },
    /// The regex engine refused it: syntax it does not support, or too large once compiled.
    #[error("pattern {index} is not a regex deepcli can run: {message}")]
    Invalid { index: usize, message: String },
}

impl PatternError {
    /// The position of the pattern at fault, if one is.
    pub fn index(&self) -> Option<usize> {
        match self {
            PatternError::TooMany { .. } => None,
            PatternError::TooLong { index, .. }
            | PatternError::Empty { index }
            | PatternError::Invalid { index, .. } => Some(*index),
        }
    }
}

/// The compiled patterns of one place.
#[derive(Debug, Clone)]
pub struct Mentions {
    set: RegexSet,
}

impl Mentions {
    /// Compiles `patterns` as one set; each is checked on its own first, so an error names the
    /// pattern at fault.
    pub fn compile(patterns: &[String]) -> Result<Mentions, PatternError> {
        if patterns.len() > MAX_PATTERNS {
            return Err(PatternError::TooMany {
                count: patterns.len(),
            });
        }
        for (index, pattern) in patterns.iter().enumerate() {
            let chars = pattern.chars().count();
            if chars > MAX_PATTERN_CHARS {
                return Err(PatternError::TooLong { index, chars });
            }
            if pattern.is_empty() {
                return Err(PatternError::Empty { index });
            }
            builder(std::slice::from_ref(pattern))
                .build()
                .map_err(|e| PatternError::Invalid {
                    index,
                    message: one_line(&e.to_string()),
                })?;
        }
        let set = builder(patterns)
            .build()
            .map_err(|e| PatternError::Invalid {
                index: 0,
                message: one_line(&e.to_string()),
            })?;
        Ok(Mentions { set })
    }

    /// The pattern derived from an agent's identity name: the name as a word of its own,
    /// `@` before it optional, any case.
    pub fn derived(name: &str) -> Option<Mentions> {
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        let pattern = format!(
            r"(?i)(?:^|[^\p{{L}}\p{{N}}_])@?{}(?:$|[^\p{{L}}\p{{N}}_])",
            regex::escape(name)
        );
        builder(&[pattern]).build().ok().map(|set| Mentions { set })
    }

    /// A set that matches no text.
    pub fn nothing() -> Mentions {
        Mentions {
            set: RegexSet::empty(),
        }
    }

    pub fn matches(&self, text: &str) -> bool {
        self.set.is_match(text)
    }
}

fn builder<S: AsRef<str>>(patterns: &[S]) -> RegexSetBuilder {
    let mut b = RegexSetBuilder::new(patterns);
    b.size_limit(SIZE_LIMIT).dfa_size_limit(DFA_SIZE_LIMIT);
    b
}

/// The regex crate's messages span lines (the pattern, a caret, the error): one line here.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '^' || c == '~'))
        .collect();
    lines
        .iter()
        .find_map(|l| l.strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| lines.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> Result<Mentions, PatternError> {
        Mentions::compile(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn patterns_match_anywhere_in_the_text() {
        let m = set(&["@main\\b", "(?i)hey bot"]).unwrap();
        assert!(m.matches("ping @main please"));
        assert!(m.matches("HEY BOT"));
        assert!(!m.matches("@mainly"));
    }

    #[test]
    fn what_the_engine_cannot_run_is_refused_with_the_pattern_named() {
        // Look-around and back-references would need backtracking.
        let e = set(&["ok", "(?=x)"]).unwrap_err();
        assert_eq!(e.index(), Some(1), "{e}");
        assert!(e.to_string().contains("look-around"), "{e}");
        let e = set(&[r"(a)\1"]).unwrap_err();
        assert_eq!(e.index(), Some(0), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        // A pattern that compiles past the size limit.
        let e = set(&["ok", "(?:a{100}){100}{100}"]).unwrap_err();
        assert_eq!(e.index(), Some(1), "{e}");
        assert!(matches!(set(&[""]), Err(PatternError::Empty { index: 0 })));
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(matches!(
            Mentions::compile(&[long]),
            Err(PatternError::TooLong { index: 0, .. })
        ));
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("p{i}")).collect();
        assert!(matches!(
            Mentions::compile(&many),
            Err(PatternError::TooMany { .. })
        ));
    }

    #[test]
    fn catastrophic_backtracking_patterns_match_in_linear_time() {
        // `(a+)+$` takes exponential time in a backtracking engine on "aaaa…b".
        let m = set(&["(a+)+$", "(a|aa)+c", "(x+x+)+y"]).unwrap();
        let text = format!("{}b", "a".repeat(100_000));
        let started = std::time::Instant::now();
        assert!(!m.matches(&text));
        // Generous: a backtracking engine would not finish this in our lifetime.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_derived_pattern_is_the_name_as_a_word() {
        let m = Mentions::derived("Research").unwrap();
        assert!(m.matches("@research what is new"));
        assert!(m.matches("Research, look"));
        assert!(m.matches("hi RESEARCH"));
        assert!(!m.matches("researchers"));
        assert!(!m.matches("#research2"));
        let m = Mentions::derived("C++ Bot (beta)").unwrap();
        assert!(m.matches("ask @c++ bot (beta) now"));
        assert!(Mentions::derived("  ").is_none());
    }
}
