//! Places in a text: what every diagnostic points at. A leaf: the YAML reader makes spans, the
//! diagnostics carry them, and neither has to know the other.

/// A position in a file: 1-based line and 1-based column, counted in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

/// Where a node starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    pub start: Pos,
    pub end: Pos,
}

impl Span {
    /// An empty span at `start`.
    pub fn at(start: Pos) -> Span {
        Span { start, end: start }
    }
}
