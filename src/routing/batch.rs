//! `deepcli route --batch`: JSON route inputs in, one JSON result per line out, as fast as
//! the machine allows. Input is taken a block at a time and answered in order; a large block is
//! answered on every core. Results are written by [`RouteResult::write_json`], held byte-equal
//! to serde_json's output by its equivalence test.
//!
//! [`RouteResult::write_json`]: super::RouteResult::write_json

use std::collections::BTreeMap;
use std::io;

use serde_json::json;

use super::declared::{Declared, Undeclared};
use super::{RouteInput, RoutingPlan};

/// How a batch ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// Lines read.
    pub lines: usize,
    /// Lines that were not route inputs (each answered with an `error` line).
    pub bad: usize,
    /// The routes to channel accounts the hub does not declare, with how many lines each (only
    /// when the batch was given what is declared).
    pub undeclared: BTreeMap<Undeclared, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("reading the input: {0}")]
    Read(#[source] io::Error),
    /// The reader of the output went away (a closed pipe, say).
    #[error("writing the output: {0}")]
    Write(#[source] io::Error),
    /// A line was not UTF-8: the lines before it were answered.
    #[error("reading the input: stream did not contain valid UTF-8")]
    NotUtf8,
}

/// JSON lines in, JSON lines out. Input is taken a block at a time (every complete line
/// buffered), and the answers to a block are written and flushed before the next read, so a
/// caller that writes one line and waits for the answer gets it.
///
/// A large block is cut at line ends into a piece per core, whose answers are made side by
/// side and written in order: the output is what one thread would write.
///
/// With `declared`, each route's channel account is looked up in it, and the ones it lacks are
/// counted in [`Done::undeclared`] (one lookup per line; the answers are the same).
pub fn run(
    plan: &RoutingPlan,
    declared: Option<&Declared>,
    input: &mut impl io::Read,
    out: &mut impl io::Write,
) -> Result<Done, BatchError> {
    let mut lines = LineBuffer::with_capacity(256 * 1024);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut number = 0usize;
    let mut done = Done::default();
    let within = Within { plan, declared };
    while let Some(block) = lines.next_block(input).map_err(BatchError::Read)? {
        let (answered, lines_read) = answer_block(within, block, number, threads);
        for piece in answered {
            done.bad += piece.bad;
            for (undeclared, n) in piece.undeclared {
                *done.undeclared.entry(undeclared).or_default() += n;
            }
            out.write_all(&piece.out).map_err(BatchError::Write)?;
            if piece.not_utf8 {
                out.flush().map_err(BatchError::Write)?;
                return Err(BatchError::NotUtf8);
            }
        }
        number += lines_read;
        out.flush().map_err(BatchError::Write)?;
    }
    done.lines = number;
    Ok(done)
}

/// What every line is answered with: the plan, and what the hub declares.
#[derive(Clone, Copy)]
struct Within<'a> {
    plan: &'a RoutingPlan,
    declared: Option<&'a Declared>,
}

/// The answers to the lines of one piece of input.
struct Answered {
    out: Vec<u8>,
    /// Lines that were not route inputs.
    bad: usize,
    /// Lines routed to channel accounts the hub does not declare.
    undeclared: BTreeMap<Undeclared, usize>,
    /// A line was not UTF-8: `out` answers the lines before it, and the batch ends.
    not_utf8: bool,
}

/// Pieces smaller than this are not worth a thread.
const MIN_PIECE: usize = 32 * 1024;

/// Answers `block`, whose first line is line `first + 1` of the input, in up to `threads`
/// pieces on as many threads; and how many lines it holds.
fn answer_block(
    within: Within<'_>,
    block: &[u8],
    first: usize,
    threads: usize,
) -> (Vec<Answered>, usize) {
    let pieces = cut_at_lines(block, (block.len() / MIN_PIECE).clamp(1, threads));
    let mut firsts = Vec::with_capacity(pieces.len());
    let mut next = first;
    for piece in &pieces {
        firsts.push(next);
        next += lines_in(piece);
    }
    let answered = std::thread::scope(|scope| {
        let others: Vec<_> = pieces[1..]
            .iter()
            .zip(&firsts[1..])
            .map(|(&piece, &first)| scope.spawn(move || answer(within, piece, first)))
            .collect();
        let mut answered = vec![answer(within, pieces[0], firsts[0])];
        answered.extend(
            others
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        answered
    });
    (answered, next - first)
}

/// `bytes` cut after line ends into `n` pieces of about equal size (fewer when the lines run
/// out); never none.
fn cut_at_lines(bytes: &[u8], n: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::with_capacity(n);
    let mut rest = bytes;
    for left in (1..n).rev() {
        let target = rest.len() / (left + 1);
        let Some(end) = rest[target..].iter().position(|&b| b == b'\n') else {
            break;
        };
        let (piece, after) = rest.split_at(target + end + 1);
        pieces.push(piece);
        rest = after;
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest);
    }
    pieces
}

/// Lines in `bytes`, the last one counted without its newline.
fn lines_in(bytes: &[u8]) -> usize {
    bytes.split_inclusive(|&b| b == b'\n').count()
}

/// Answers the lines of `piece`, the first of which is line `first + 1` of the input.
fn answer(within: Within<'_>, piece: &[u8], first: usize) -> Answered {
    let mut answered = Answered {
        out: Vec::with_capacity(piece.len() * 3),
        bad: 0,
        undeclared: BTreeMap::new(),
        not_utf8: false,
    };
    for (number, line) in (first + 1..).zip(piece.split_inclusive(|&b| b == b'\n')) {
        let Ok(line) = std::str::from_utf8(line) else {
            answered.not_utf8 = true;
            break;
        };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<RouteInput>(line) {
            Ok(input) => {
                let result = within.plan.resolve(&input);
                if let Some(undeclared) = within
                    .declared
                    .and_then(|d| d.check(&result.channel, &result.account_id))
                {
                    *answered.undeclared.entry(undeclared).or_default() += 1;
                }
                result.write_json(&mut answered.out);
            }
            Err(e) => {
                answered.bad += 1;
                let error = json!({"error": input_error(&e), "line": number});
                // Writing JSON into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut answered.out, &error);
            }
        }
        answered.out.push(b'\n');
    }
    answered
}

/// Blocks of whole lines of a byte stream, each line with its `\n` (the last one may lack
/// it), cut out of one buffer that is refilled only when it holds no complete line.
struct LineBuffer {
    buf: Vec<u8>,
    /// Where the unread bytes start.
    start: usize,
}

impl LineBuffer {
    fn with_capacity(capacity: usize) -> LineBuffer {
        LineBuffer {
            buf: Vec::with_capacity(capacity),
            start: 0,
        }
    }

    /// Every complete line buffered, read first when there is none; at the end of the input
    /// the last line without its newline; `None` once everything was handed out.
    fn next_block(&mut self, from: &mut impl io::Read) -> io::Result<Option<&[u8]>> {
        let mut searched = 0;
        loop {
            let unread = &self.buf[self.start..];
            if let Some(end) = unread[searched..].iter().rposition(|&b| b == b'\n') {
                let block = self.start..self.start + searched + end + 1;
                self.start = block.end;
                return Ok(Some(&self.buf[block]));
            }
            searched = unread.len();
            // No complete line: keep the partial one at the front and read more behind it.
            self.buf.drain(..self.start);
            self.start = 0;
            if self.buf.len() == self.buf.capacity() {
                self.buf.reserve(self.buf.capacity());
            }
            let len = self.buf.len();
            self.buf.resize(self.buf.capacity(), 0);
            let read = loop {
                match from.read(&mut self.buf[len..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            match read {
                Ok(0) => {
                    self.buf.truncate(len);
                    if len == 0 {
                        return Ok(None);
                    }
                    // The last line, without its newline.
                    self.start = len;
                    return Ok(Some(&self.buf[..len]));
                }
                Ok(n) => self.buf.truncate(len + n),
                Err(e) => {
                    self.buf.truncate(len);
                    return Err(e);
                }
            }
        }
    }
}

/// serde's message without its `at line 1 column N` (the line is always 1 here and would be
/// mistaken for the batch line), with the column kept.
fn input_error(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(m, _)| m);
    format!("not a route input: {message} (column {})", e.column())
}
