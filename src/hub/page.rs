//! One paging convention for every list the Hub gives, to agents and to the operator (hub.md,
//! "Paging"): `limit` (default [`DEFAULT_LIMIT`], at most [`MAX_LIMIT`]) and an opaque `cursor`;
//! a result with more after it says `nextCursor`, which the next call passes as `cursor`
//! (written into each list's result where the result is made).
//! A cursor is a position in the list as it is ordered: an entry that moves between two
//! calls may be seen twice or not at all.

/// A page's size when the caller names none.
pub(crate) const DEFAULT_LIMIT: usize = 50;
/// The largest page.
pub(crate) const MAX_LIMIT: usize = 200;
/// How many entries a list reads from the state at a time when it filters them as it goes
/// (the sessions, walked by last activity).
pub(crate) const CHUNK: usize = 256;

/// Which page a caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    pub limit: usize,
    pub offset: usize,
}

/// A cursor this hub did not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`cursor` {0:?} is not one this hub gave: pass a result's `nextCursor` unchanged, or no cursor for the first page"
)]
pub(crate) struct BadCursor(pub String);

impl Page {
    /// The page `limit` (clamped to 1..=[`MAX_LIMIT`]; `default` when unset) and `cursor` name.
    pub(crate) fn new(
        limit: Option<usize>,
        cursor: Option<&str>,
        default: usize,
    ) -> Result<Page, BadCursor> {
        let offset = match cursor.map(str::trim).filter(|c| !c.is_empty()) {
            None => 0,
            Some(c) => c
                .strip_prefix('c')
                .and_then(|hex| usize::from_str_radix(hex, 16).ok())
                .ok_or_else(|| BadCursor(c.to_string()))?,
        };
        Ok(Page {
            limit: limit.unwrap_or(default).clamp(1, MAX_LIMIT),
            offset,
        })
    }

    /// This page of `items` (the whole list, in order) and the cursor of the next, if any.
    pub(crate) fn of<T>(self, items: impl IntoIterator<Item = T>) -> (Vec<T>, Option<String>) {
        let mut rest = items.into_iter().skip(self.offset);
        let page: Vec<T> = rest.by_ref().take(self.limit).collect();
        let more = rest.next().is_some();
        let next = more.then(|| self.after(page.len()));
        (page, next)
    }

    /// The cursor of the position `taken` entries past this page's start.
    pub(crate) fn after(self, taken: usize) -> String {
        cursor(self.offset.saturating_add(taken))
    }
}

/// The cursor of position `offset`.
fn cursor(offset: usize) -> String {
    format!("c{offset:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_walked_page_by_page_with_opaque_cursors() {
        let items: Vec<u32> = (0..7).collect();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page = Page::new(Some(3), cursor.as_deref(), DEFAULT_LIMIT).unwrap();
            let (got, next) = page.of(items.iter().copied());
            seen.extend(got);
            pages += 1;
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!((seen, pages), ((0..7).collect::<Vec<_>>(), 3));
        // An exact fit has no next page.
        let (got, next) = Page::new(Some(7), None, 50).unwrap().of(items.iter());
        assert_eq!((got.len(), next), (7, None));
        // Defaults and bounds.
        assert_eq!(Page::new(None, None, 20).unwrap().limit, 20);
        assert_eq!(Page::new(Some(0), None, 20).unwrap().limit, 1);
        assert_eq!(Page::new(Some(100_000), None, 20).unwrap().limit, MAX_LIMIT);
        assert_eq!(Page::new(None, Some(""), 20).unwrap().offset, 0);
        // A cursor past the end is an empty last page.
        let far = Page::new(None, Some("cffff"), 20).unwrap();
        assert_eq!(far.of(items.iter()), (vec![], None));
        for bad in ["12", "cz", "c-1", "c1ffffffffffffffffffff"] {
            let err = Page::new(None, Some(bad), 20).unwrap_err();
            assert!(err.to_string().contains("nextCursor"), "{err}");
        }
    }
}
