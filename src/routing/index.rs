//! The tier index of a routing plan (routing.md §4), laid out for resolving at any size with a
//! bounded number of lookups that touch little memory.
//!
//! * Every id a binding's `match` keys on or checks (peer, guild, team and role ids) is interned
//!   once: a [`Sym`]. An input's ids are looked up once per message; an id no binding names is
//!   no symbol, so its tiers cost nothing.
//! * A context is one channel with one account pattern (an exact account, or `*`). Its keyed
//!   tiers (peer, guild+roles, guild, team) are kept with the id they are keyed on: the id's
//!   record ([`IdInfo`]) holds its symbol and its (context, slot) places, the only one inline.
//!   So one hash lookup per id of the message finds both what the checks compare and every
//!   list keyed on it; its unkeyed lists (account, channel, wildcard) live in the context.
//! * A list is a run of binding positions in config order inside one flat array.
//! * A binding's own checks (guild, team, roles) and what its result needs are one small
//!   [`Entry`], so checking a candidate reads one cache line.
//!
//! The wildcard tier is also split by what its bindings ask for: a wildcard binding with a
//! guild can only match messages of that guild, so resolving looks only at the wildcards of
//! the message's guild and team and at those without either. `--explain` walks the whole tier,
//! so that it shows every binding that did not match and why.
//!
//! Index numbers (binding positions, symbols, runs) are `u32`, and a place is a context and a
//! slot packed into one: only [`PlaceKey`] and [`IndexKey`] know the packing. Building refuses
//! a plan that outgrows them with an [`IndexError`].
//!
//! Must not decide anything: the walk over the tiers is `plan.rs`.

use rustc_hash::FxHashMap as HashMap;

use super::binding::{BindingRef, CompiledBinding, Miss};
use super::scope::{AccountPattern, Tier};
use super::shared_str::SharedStr;
use crate::config::model::{DmScope, GroupScope};
use crate::ids::{self, DEFAULT_ACCOUNT, PeerClass};

/// An interned id of the bindings' matches.
pub(super) type Sym = u32;
/// "No constraint" in an [`Entry`]. [`number`] never gives it, so no id is interned as it.
const UNSET: Sym = Sym::MAX;

/// A run of [`TierIndex::lists`]; a run of one holds its binding position itself in `start`,
/// so the most common list costs no second read.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    start: u32,
    len: u32,
}

/// Why a plan cannot be indexed: it has more of something than the index's fixed-width numbers
/// can count. Index numbers are `u32` (and a context shares one with a slot), which keeps an
/// entry and an id's record small. Config files are too small to come near (16 MiB at most), but
/// a saved plan has no such bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the routing index holds at most {limit} {what}; this plan has more")]
pub struct IndexError {
    what: Counted,
    limit: u64,
}

/// What an [`IndexError`] ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Bindings,
    ChannelAccounts,
    Ids,
    Agents,
    Roles,
    ListEntries,
    Files,
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Counted::Bindings => "route bindings",
            Counted::ChannelAccounts => {
                "channel accounts in bindings (a channel with one `accountId`, or with `*`)"
            }
            Counted::Ids => "distinct peer, guild, team and role ids in bindings",
            Counted::Agents => "agents named by bindings",
            Counted::Roles => "role ids over all bindings",
            Counted::ListEntries => "entries in its binding lists",
            Counted::Files => "binding files",
        })
    }
}

/// The most of anything the index numbers with a `u32`: numbers stop one short of `u32::MAX`,
/// which stays free for [`UNSET`].
const U32_NUMBERS: usize = u32::MAX as usize;

/// `n` as an index number (a position, a length or a symbol), if it is one.
fn number(n: usize, what: Counted) -> Result<u32, IndexError> {
    if n < U32_NUMBERS {
        // Below `u32::MAX`, so exact.
        Ok(n as u32)
    } else {
        Err(IndexError {
            what,
            limit: U32_NUMBERS as u64,
        })
    }
}

/// A context: one channel with one account pattern. Below [`ContextId::LIMIT`], so that a
/// [`PlaceKey`] holds it with a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ContextId(u32);

impl ContextId {
    const LIMIT: usize = 1 << (u32::BITS - PlaceKey::SLOT_BITS);

    fn new(n: usize) -> Result<ContextId, IndexError> {
        if n < ContextId::LIMIT {
            // Below 2^28, so exact.
            Ok(ContextId(n as u32))
        } else {
            Err(IndexError {
                what: Counted::ChannelAccounts,
                limit: ContextId::LIMIT as u64,
            })
        }
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a keyed list sits, a context and a slot, in one `u32` (the context above 4 bits of
/// slot): an id's record holds its only place inline, and a spilled id's places are ordered
/// and searched by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct PlaceKey(u32);

impl PlaceKey {
    const SLOT_BITS: u32 = 4;
    /// The key of an id no list is keyed on (a role, say).
    const NONE: PlaceKey = PlaceKey(u32::MAX);
    /// The key of an id keyed on in several places: its record's run is a run of
    /// [`TierIndex::places`].
    const SPILLED: PlaceKey = PlaceKey(u32::MAX - 1);

    const fn encode(context: ContextId, slot: Slot) -> PlaceKey {
        PlaceKey((context.0 << PlaceKey::SLOT_BITS) | slot.number())
    }

    fn context(self) -> ContextId {
        ContextId(self.0 >> PlaceKey::SLOT_BITS)
    }

    /// The slot's bit in [`Context::keyed`].
    fn slot_bit(self) -> u16 {
        1 << (self.0 & ((1 << PlaceKey::SLOT_BITS) - 1))
    }
}

// Every slot fits its bits, and no encoded key is a sentinel.
const _: () = {
    assert!(Slot::MAX_NUMBER < 1 << PlaceKey::SLOT_BITS);
    assert!(Slot::MAX_NUMBER < u16::BITS);
    let last = ContextId((ContextId::LIMIT - 1) as u32);
    assert!(PlaceKey::encode(last, Slot::Team).0 < PlaceKey::SPILLED.0);
};

/// An id and one of its places in one `u64`, the id above: sorting keys groups the places of
/// one id together, in place-key order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct IndexKey(u64);

impl IndexKey {
    fn encode(sym: Sym, place: PlaceKey) -> IndexKey {
        IndexKey((u64::from(sym) << 32) | u64::from(place.0))
    }

    fn sym(self) -> Sym {
        (self.0 >> 32) as Sym
    }

    fn place(self) -> PlaceKey {
        // The low half, by construction.
        PlaceKey(self.0 as u32)
    }
}

/// The keyed lists of a context, by what they are keyed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// A concrete peer of a class, keyed by its id.
    Peer(PeerClass),
    /// Wildcard-peer bindings of a class that name a guild, keyed by it.
    WildcardGuild(PeerClass),
    /// Wildcard-peer bindings of a class that name a team but no guild, keyed by the team.
    WildcardTeam(PeerClass),
    GuildRoles,
    Guild,
    Team,
}

impl Slot {
    const MAX_NUMBER: u32 = 8;

    const fn number(self) -> u32 {
        match self {
            Slot::Peer(c) => c as u32,
            Slot::WildcardGuild(c) => 2 + c as u32,
            Slot::WildcardTeam(c) => 4 + c as u32,
            Slot::GuildRoles => 6,
            Slot::Guild => 7,
            Slot::Team => Slot::MAX_NUMBER,
        }
    }

    /// The slot's bit in [`Context::keyed`].
    fn bit(self) -> u16 {
        1 << self.number()
    }
}

/// A context's unkeyed lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unkeyed {
    /// The whole wildcard tier of a class (what `--explain` walks).
    Wildcard(PeerClass),
    /// The wildcard bindings of a class that name neither a guild nor a team.
    WildcardOpen(PeerClass),
    Account,
    Channel,
}

impl Unkeyed {
    const COUNT: usize = 6;

    fn number(self) -> usize {
        match self {
            Unkeyed::Wildcard(c) => c as usize,
            Unkeyed::WildcardOpen(c) => 2 + c as usize,
            Unkeyed::Account => 4,
            Unkeyed::Channel => 5,
        }
    }
}

/// The keyed lists of one id: none ([`PlaceKey::NONE`]), the only one inline (`key` its place,
/// `run` its list), or several in [`TierIndex::places`] ([`PlaceKey::SPILLED`]).
#[derive(Debug, Clone, Copy)]
struct Places {
    key: PlaceKey,
    run: Run,
}

impl Places {
    const NONE: Places = Places {
        key: PlaceKey::NONE,
        run: Run { start: 0, len: 0 },
    };
}

/// What the index knows of one id: its symbol and the lists keyed on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct IdInfo {
    pub sym: Sym,
    places: Places,
}

/// What resolving needs of one route binding, besides where it is indexed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    guild: Sym,
    team: Sym,
    roles: Run,
    /// Position in [`TierIndex::agents`].
    pub agent: u32,
    /// Position in [`TierIndex::files`].
    file: u32,
    line: u32,
    index: u32,
    pub dm_scope: Option<DmScope>,
    pub group_scope: Option<GroupScope>,
}

/// An agent as a route result names it.
#[derive(Debug, Clone)]
pub(super) struct AgentKeys {
    pub id: SharedStr,
    /// `agent:<id>:<mainKey>`.
    pub main_key: SharedStr,
}

/// A context's unkeyed lists, and which of its keyed lists exist (a bit per [`Slot`]): a
/// lookup in a list that does not exist touches nothing else.
#[derive(Debug, Clone, Copy, Default)]
struct Context {
    unkeyed: [Run; Unkeyed::COUNT],
    keyed: u16,
}

#[derive(Debug, Clone, Default)]
struct Channel {
    name: SharedStr,
    any: Option<ContextId>,
    accounts: HashMap<SharedStr, (SharedStr, ContextId)>,
}

/// The ids of one message as the index knows them (`None`: absent, or named by no binding).
/// Role ids are looked up only when a candidate asks for roles.
#[derive(Debug, Default)]
pub(super) struct Symbols<'i, 'a> {
    pub peer: Option<&'i IdInfo>,
    pub parent: Option<&'i IdInfo>,
    pub guild: Option<&'i IdInfo>,
    pub team: Option<&'i IdInfo>,
    pub role_ids: &'a [String],
    roles: std::cell::OnceCell<smallvec::SmallVec<[Sym; 8]>>,
}

impl<'i, 'a> Symbols<'i, 'a> {
    pub(super) fn new(
        peer: Option<&'i IdInfo>,
        parent: Option<&'i IdInfo>,
        guild: Option<&'i IdInfo>,
        team: Option<&'i IdInfo>,
        role_ids: &'a [String],
    ) -> Self {
        Symbols {
            peer,
            parent,
            guild,
            team,
            role_ids,
            roles: std::cell::OnceCell::new(),
        }
    }
}

fn sym_of(info: Option<&IdInfo>) -> Option<Sym> {
    info.map(|i| i.sym)
}

/// Where a message's channel and account sit in the index.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Located<'i> {
    pub exact: Option<ContextId>,
    pub any: Option<ContextId>,
    channel: Option<&'i Channel>,
    account: Option<&'i SharedStr>,
}

impl Located<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.exact.is_none() && self.any.is_none()
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct TierIndex {
    /// Keys are [`SharedStr`]s so that a short id is compared where the table holds it.
    ids: HashMap<SharedStr, IdInfo>,
    channels: HashMap<SharedStr, Channel>,
    /// The places of ids keyed on in several, per id sorted by place key.
    places: Vec<(PlaceKey, Run)>,
    contexts: Vec<Context>,
    /// Binding positions, list after list.
    lists: Vec<u32>,
    /// Per route binding, in config order.
    entries: Vec<Entry>,
    /// The role symbols of the entries, sorted per entry.
    roles: Vec<Sym>,
    agents: Vec<AgentKeys>,
    default_agent: u32,
    /// The files bindings are written in (one, in practice).
    files: Vec<std::sync::Arc<str>>,
    default_account: SharedStr,
}

/// Where a binding goes: a keyed list or an unkeyed one of a context.
enum Place {
    Keyed(IndexKey),
    Unkeyed(ContextId, Unkeyed),
}

impl TierIndex {
    /// Indexes `bindings` (config order); `default_agent` and the agents the bindings name get
    /// their keys built with `main_key`.
    pub(super) fn build(
        bindings: &[CompiledBinding],
        default_agent: &str,
        main_key: &str,
    ) -> Result<TierIndex, IndexError> {
        let mut index = TierIndex {
            default_account: SharedStr::from(DEFAULT_ACCOUNT),
            ..TierIndex::default()
        };
        let mut numbers: HashMap<String, u32> = HashMap::default();
        let mut agent_number = |index: &mut TierIndex, id: &str| -> Result<u32, IndexError> {
            if let Some(&n) = numbers.get(id) {
                return Ok(n);
            }
            let n = number(index.agents.len(), Counted::Agents)?;
            index.agents.push(AgentKeys {
                id: SharedStr::from(id),
                main_key: SharedStr::from(format!("agent:{id}:{main_key}")),
            });
            numbers.insert(id.to_string(), n);
            Ok(n)
        };
        index.default_agent = agent_number(&mut index, default_agent)?;

        let mut places: Vec<(IndexKey, u32)> =
            Vec::with_capacity(bindings.len() + bindings.len() / 8);
        let mut unkeyed: Vec<(ContextId, Unkeyed, u32)> = Vec::new();
        index.entries.reserve_exact(bindings.len());
        for (i, b) in bindings.iter().enumerate() {
            let i = number(i, Counted::Bindings)?;
            let scope = &b.scope;
            let guild = match scope.guild.as_deref() {
                Some(g) => index.intern(g)?,
                None => UNSET,
            };
            let team = match scope.team.as_deref() {
                Some(t) => index.intern(t)?,
                None => UNSET,
            };
            let start = index.roles.len();
            for role in &scope.roles {
                let sym = index.intern(role)?;
                index.roles.push(sym);
            }
            index.roles[start..].sort_unstable();
            let roles = Run {
                start: number(start, Counted::Roles)?,
                len: number(index.roles.len() - start, Counted::Roles)?,
            };
            let agent = agent_number(&mut index, &b.agent_id)?;
            let file = index.file_number(&b.source.file)?;
            index.entries.push(Entry {
                guild,
                team,
                roles,
                agent,
                file,
                line: b.source.line,
                index: number(b.source.index, Counted::Bindings)?,
                dm_scope: b.dm_scope,
                group_scope: b.group_scope,
            });
            let context = index.context(&scope.channel, &scope.account)?;
            let keyed = move |slot, sym| {
                Place::Keyed(IndexKey::encode(sym, PlaceKey::encode(context, slot)))
            };
            let place = match scope.tier() {
                Tier::Peer | Tier::Wildcard => {
                    // A peer of an unknown kind or with an empty id never matches (§3).
                    let Some(peer) = &scope.peer else { continue };
                    let Some(class) = peer.kind.class() else {
                        continue;
                    };
                    match peer.id.as_deref() {
                        Some("") => continue,
                        Some(id) => keyed(Slot::Peer(class), index.intern(id)?),
                        None => {
                            unkeyed.push((context, Unkeyed::Wildcard(class), i));
                            if guild != UNSET {
                                keyed(Slot::WildcardGuild(class), guild)
                            } else if team != UNSET {
                                keyed(Slot::WildcardTeam(class), team)
                            } else {
                                Place::Unkeyed(context, Unkeyed::WildcardOpen(class))
                            }
                        }
                    }
                }
                Tier::GuildRoles => keyed(Slot::GuildRoles, guild),
                Tier::Guild => keyed(Slot::Guild, guild),
                Tier::Team => keyed(Slot::Team, team),
                Tier::Account => Place::Unkeyed(context, Unkeyed::Account),
                Tier::Channel => Place::Unkeyed(context, Unkeyed::Channel),
            };
            match place {
                Place::Keyed(k) => places.push((k, i)),
                Place::Unkeyed(context, list) => unkeyed.push((context, list, i)),
            }
        }

        // Group the keyed places into runs, and the runs by id; a stable sort keeps config
        // order inside a key.
        places.sort_by_key(|&(k, _)| k);
        index.lists.reserve_exact(places.len() + unkeyed.len());
        let mut by_sym: Vec<Places> = vec![Places::NONE; index.ids.len()];
        let mut rest = places.as_slice();
        let mut of_sym: Vec<(PlaceKey, Run)> = Vec::new();
        while let Some(&(k, _)) = rest.first() {
            let sym = k.sym();
            of_sym.clear();
            while let Some(&(k, _)) = rest.first().filter(|(k, _)| k.sym() == sym) {
                let len = rest.iter().take_while(|(other, _)| *other == k).count();
                let run = index.push_run(rest[..len].iter().map(|&(_, i)| i), len)?;
                let place = k.place();
                of_sym.push((place, run));
                index.contexts[place.context().index()].keyed |= place.slot_bit();
                rest = &rest[len..];
            }
            by_sym[sym as usize] = match of_sym.as_slice() {
                [(key, run)] => Places {
                    key: *key,
                    run: *run,
                },
                many => {
                    let start = number(index.places.len(), Counted::ListEntries)?;
                    index.places.extend_from_slice(many);
                    Places {
                        key: PlaceKey::SPILLED,
                        run: Run {
                            start,
                            len: number(many.len(), Counted::ListEntries)?,
                        },
                    }
                }
            };
        }
        for info in index.ids.values_mut() {
            info.places = by_sym[info.sym as usize];
        }
        unkeyed.sort_by_key(|&(context, list, _)| (context, list.number()));
        let mut rest = unkeyed.as_slice();
        while let Some(&(context, list, _)) = rest.first() {
            let len = rest
                .iter()
                .take_while(|(c, l, _)| *c == context && *l == list)
                .count();
            let run = index.push_run(rest[..len].iter().map(|&(_, _, i)| i), len)?;
            index.contexts[context.index()].unkeyed[list.number()] = run;
            rest = &rest[len..];
        }
        Ok(index)
    }

    fn intern(&mut self, id: &str) -> Result<Sym, IndexError> {
        if let Some(info) = self.ids.get(id) {
            return Ok(info.sym);
        }
        let sym = number(self.ids.len(), Counted::Ids)?;
        self.ids.insert(
            id.into(),
            IdInfo {
                sym,
                places: Places::NONE,
            },
        );
        Ok(sym)
    }

    fn context(
        &mut self,
        channel: &str,
        account: &AccountPattern,
    ) -> Result<ContextId, IndexError> {
        // Only a context not seen before needs a new number, and may find none left.
        let next = self.contexts.len();
        let entry = match self.channels.get_mut(channel) {
            Some(entry) => entry,
            None => self.channels.entry(channel.into()).or_insert(Channel {
                name: SharedStr::from(channel),
                ..Channel::default()
            }),
        };
        let known = match account {
            AccountPattern::Any => entry.any,
            AccountPattern::Exact(account) => entry
                .accounts
                .get(account.as_str())
                .map(|&(_, context)| context),
        };
        if let Some(context) = known {
            return Ok(context);
        }
        let context = ContextId::new(next)?;
        match account {
            AccountPattern::Any => entry.any = Some(context),
            AccountPattern::Exact(account) => {
                entry.accounts.insert(
                    account.as_str().into(),
                    (SharedStr::from(account.as_str()), context),
                );
            }
        }
        self.contexts.push(Context::default());
        Ok(context)
    }

    fn file_number(&mut self, file: &std::sync::Arc<str>) -> Result<u32, IndexError> {
        let known = self
            .files
            .iter()
            .rposition(|f| std::sync::Arc::ptr_eq(f, file) || f == file);
        let n = known.unwrap_or_else(|| {
            self.files.push(file.clone());
            self.files.len() - 1
        });
        number(n, Counted::Files)
    }

    /// A run of the `len` binding positions of `positions`.
    fn push_run(
        &mut self,
        mut positions: impl Iterator<Item = u32>,
        len: usize,
    ) -> Result<Run, IndexError> {
        if len == 1 {
            return Ok(Run {
                start: positions.next().expect("`positions` has `len` items"),
                len: 1,
            });
        }
        let start = number(self.lists.len(), Counted::ListEntries)?;
        self.lists.extend(positions);
        Ok(Run {
            start,
            len: number(len, Counted::ListEntries)?,
        })
    }

    fn run<'r>(&'r self, run: &'r Run) -> &'r [u32] {
        match run.len {
            0 => &[],
            1 => std::slice::from_ref(&run.start),
            len => &self.lists[run.start as usize..][..len as usize],
        }
    }

    /// The contexts of a normalized channel and account.
    pub(super) fn locate(&self, channel: &str, account: &str) -> Located<'_> {
        let Some(c) = self.channels.get(channel) else {
            return Located::default();
        };
        let exact = c.accounts.get(account);
        Located {
            exact: exact.map(|&(_, context)| context),
            any: c.any,
            channel: Some(c),
            account: exact.map(|(name, _)| name),
        }
    }

    /// The channel and account as a result names them, as the plan holds them when it can.
    pub(super) fn names(
        &self,
        at: &Located<'_>,
        channel: &str,
        account: &str,
    ) -> (SharedStr, SharedStr) {
        let account = at
            .account
            .cloned()
            .or_else(|| (account == DEFAULT_ACCOUNT).then(|| self.default_account.clone()))
            .unwrap_or_else(|| SharedStr::from(account));
        let channel = at
            .channel
            .map_or_else(|| SharedStr::from(channel), |c| c.name.clone());
        (channel, account)
    }

    /// What the index knows of an id (normalized), if any binding names it.
    pub(super) fn id(&self, id: &str) -> Option<&IdInfo> {
        self.ids.get(id)
    }

    /// A keyed list of a context.
    pub(super) fn keyed<'r>(
        &'r self,
        context: Option<ContextId>,
        slot: Slot,
        id: Option<&'r IdInfo>,
    ) -> &'r [u32] {
        let (Some(context), Some(id)) = (context, id) else {
            return &[];
        };
        if self.contexts[context.index()].keyed & slot.bit() == 0 {
            return &[];
        }
        let want = PlaceKey::encode(context, slot);
        let places = &id.places;
        if places.key == want {
            return self.run(&places.run);
        }
        if places.key != PlaceKey::SPILLED {
            return &[];
        }
        let spilled = &self.places[places.run.start as usize..][..places.run.len as usize];
        match spilled.binary_search_by_key(&want, |&(key, _)| key) {
            Ok(at) => self.run(&spilled[at].1),
            Err(_) => &[],
        }
    }

    /// An unkeyed list of a context.
    pub(super) fn unkeyed(&self, context: Option<ContextId>, list: Unkeyed) -> &[u32] {
        context.map_or(&[], |c| {
            self.run(&self.contexts[c.index()].unkeyed[list.number()])
        })
    }

    /// Where binding `b` is written.
    pub(super) fn source(&self, b: usize) -> BindingRef {
        let e = &self.entries[b];
        BindingRef {
            file: self.files[e.file as usize].clone(),
            line: e.line,
            index: e.index as usize,
        }
    }

    pub(super) fn entry(&self, binding: usize) -> &Entry {
        &self.entries[binding]
    }

    pub(super) fn agent(&self, number: u32) -> &AgentKeys {
        &self.agents[number as usize]
    }

    pub(super) fn default_agent(&self) -> &AgentKeys {
        &self.agents[self.default_agent as usize]
    }

    /// Whether binding `b`'s guild, team and roles hold for the message. Its account pattern,
    /// tier key and peer already hold by where it is indexed.
    pub(super) fn check(&self, b: usize, q: &Symbols<'_, '_>) -> Result<(), Miss> {
        let e = &self.entries[b];
        if e.guild != UNSET && Some(e.guild) != sym_of(q.guild) {
            return Err(Miss::Guild);
        }
        if e.team != UNSET && Some(e.team) != sym_of(q.team) {
            return Err(Miss::Team);
        }
        if e.roles.len > 0 {
            let roles = q.roles.get_or_init(|| {
                q.role_ids
                    .iter()
                    .filter_map(|r| self.id(ids::trim(r)).map(|i| i.sym))
                    .collect()
            });
            if !self.run_roles(e.roles).iter().any(|r| roles.contains(r)) {
                return Err(Miss::Roles);
            }
        }
        Ok(())
    }

    fn run_roles(&self, run: Run) -> &[Sym] {
        &self.roles[run.start as usize..][..run.len as usize]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SLOTS: [Slot; 9] = [
        Slot::Peer(PeerClass::Direct),
        Slot::Peer(PeerClass::Group),
        Slot::WildcardGuild(PeerClass::Direct),
        Slot::WildcardGuild(PeerClass::Group),
        Slot::WildcardTeam(PeerClass::Direct),
        Slot::WildcardTeam(PeerClass::Group),
        Slot::GuildRoles,
        Slot::Guild,
        Slot::Team,
    ];

    #[test]
    fn slots_have_distinct_bits() {
        let bits = SLOTS.iter().fold(0u16, |seen, slot| {
            assert_eq!(seen & slot.bit(), 0, "{slot:?}");
            seen | slot.bit()
        });
        assert_eq!(bits.count_ones() as usize, SLOTS.len());
    }

    #[test]
    fn too_many_channel_accounts_is_an_error() {
        let last = ContextId::LIMIT - 1;
        assert_eq!(ContextId::new(last).map(ContextId::index), Ok(last));
        let refused = ContextId::new(ContextId::LIMIT).unwrap_err();
        assert_eq!(refused.what, Counted::ChannelAccounts);
        assert_eq!(
            refused.to_string(),
            "the routing index holds at most 268435456 channel accounts in bindings \
             (a channel with one `accountId`, or with `*`); this plan has more"
        );
    }

    #[test]
    fn index_numbers_stop_below_unset() {
        assert_eq!(number(0, Counted::Bindings), Ok(0));
        assert_eq!(number(U32_NUMBERS - 1, Counted::Ids), Ok(UNSET - 1));
        for n in [U32_NUMBERS, usize::MAX] {
            let refused = number(n, Counted::Bindings).unwrap_err();
            assert_eq!(
                refused.to_string(),
                "the routing index holds at most 4294967295 route bindings; this plan has more"
            );
        }
    }

    fn key() -> impl Strategy<Value = (Sym, ContextId, Slot)> {
        let edges = |max: u32| prop_oneof![0..4u32, (max - 4)..max, 0..max];
        (
            edges(UNSET),
            edges(ContextId::LIMIT as u32).prop_map(ContextId),
            prop::sample::select(SLOTS.to_vec()),
        )
    }

    proptest! {
        #[test]
        fn keys_decode_what_they_encode((sym, context, slot) in key()) {
            let place = PlaceKey::encode(context, slot);
            prop_assert_ne!(place, PlaceKey::NONE);
            prop_assert_ne!(place, PlaceKey::SPILLED);
            prop_assert_eq!(place.context(), context);
            prop_assert_eq!(place.slot_bit(), slot.bit());
            let key = IndexKey::encode(sym, place);
            prop_assert_eq!(key.sym(), sym);
            prop_assert_eq!(key.place(), place);
        }

        /// What building relies on: sorted keys hold each id's places together, in the order
        /// [`TierIndex::keyed`] searches them.
        #[test]
        fn keys_sort_by_id_then_place(keys in prop::collection::vec(key(), 0..64)) {
            let mut packed: Vec<IndexKey> = keys
                .iter()
                .map(|&(sym, context, slot)| IndexKey::encode(sym, PlaceKey::encode(context, slot)))
                .collect();
            packed.sort();
            let mut plain = keys.clone();
            plain.sort_by_key(|&(sym, context, slot)| (sym, context, slot.number()));
            let decoded: Vec<_> = packed.iter().map(|k| (k.sym(), k.place())).collect();
            let expected: Vec<_> = plain
                .iter()
                .map(|&(sym, context, slot)| (sym, PlaceKey::encode(context, slot)))
                .collect();
            prop_assert_eq!(decoded, expected);
        }
    }
}
