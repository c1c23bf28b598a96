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
//! Must not decide anything: the walk over the tiers is `plan.rs`.

use rustc_hash::FxHashMap as HashMap;

use super::plan::{BindingRef, CompiledBinding, Miss};
use super::scope::{AccountPattern, Tier};
use super::shared_str::SharedStr;
use crate::config::model::{DmScope, GroupScope};
use crate::ids::{self, DEFAULT_ACCOUNT, PeerClass};

/// An interned id of the bindings' matches.
pub(super) type Sym = u32;
/// "No constraint" in an [`Entry`].
const UNSET: Sym = Sym::MAX;

/// A context: one channel with one account pattern.
type ContextId = u32;

/// A run of [`TierIndex::lists`]; a run of one holds its binding position itself in `start`,
/// so the most common list costs no second read.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    start: u32,
    len: u32,
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
    fn number(self) -> u64 {
        let class = |c: PeerClass| c as u64;
        match self {
            Slot::Peer(c) => class(c),
            Slot::WildcardGuild(c) => 2 + class(c),
            Slot::WildcardTeam(c) => 4 + class(c),
            Slot::GuildRoles => 6,
            Slot::Guild => 7,
            Slot::Team => 8,
        }
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

/// (symbol, context, slot) as one number: 32 bits of symbol, 28 of context, 4 of slot, so that
/// sorting groups the places of one id together.
fn key(context: ContextId, slot: Slot, sym: Sym) -> u64 {
    (u64::from(sym) << 32) | u64::from(place_key(context, slot))
}

/// (context, slot) as one number: 28 bits of context, 4 of slot.
fn place_key(context: ContextId, slot: Slot) -> u32 {
    (context << 4) | slot.number() as u32
}

const MAX_CONTEXTS: usize = 1 << 28;

/// [`Places::key`] of an id no list is keyed on (a role, say).
const NO_PLACE: u32 = u32::MAX;
/// [`Places::key`] of an id keyed on in several places: `run` is a run of
/// [`TierIndex::places`]. (No place key is this large: slots stop at 8.)
const SPILLED: u32 = u32::MAX - 1;

/// The keyed lists of one id: the only one inline (`key` a [`place_key`], `run` its list), or
/// several in [`TierIndex::places`].
#[derive(Debug, Clone, Copy)]
struct Places {
    key: u32,
    run: Run,
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
    pub fn new(
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
    pub fn is_empty(&self) -> bool {
        self.exact.is_none() && self.any.is_none()
    }
}

#[derive(Debug, Clone, Default)]
pub(super) struct TierIndex {
    /// Keys are [`SharedStr`]s so that a short id is compared where the table holds it.
    ids: HashMap<SharedStr, IdInfo>,
    channels: HashMap<SharedStr, Channel>,
    /// The places of ids keyed on in several, per id sorted by place key.
    places: Vec<(u32, Run)>,
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
    Keyed(u64),
    Unkeyed(ContextId, Unkeyed),
}

impl TierIndex {
    /// Indexes `bindings` (config order); `default_agent` and the agents the bindings name get
    /// their keys built with `main_key`.
    pub fn build(bindings: &[CompiledBinding], default_agent: &str, main_key: &str) -> TierIndex {
        let mut index = TierIndex {
            default_account: SharedStr::from(DEFAULT_ACCOUNT),
            ..TierIndex::default()
        };
        let mut numbers: HashMap<String, u32> = HashMap::default();
        let mut agent_number = |index: &mut TierIndex, id: &str| -> u32 {
            if let Some(&n) = numbers.get(id) {
                return n;
            }
            let n = u32::try_from(index.agents.len()).expect("fewer agents than bindings");
            index.agents.push(AgentKeys {
                id: SharedStr::from(id),
                main_key: SharedStr::from(format!("agent:{id}:{main_key}")),
            });
            numbers.insert(id.to_string(), n);
            n
        };
        index.default_agent = agent_number(&mut index, default_agent);

        let mut places: Vec<(u64, u32)> = Vec::with_capacity(bindings.len() + bindings.len() / 8);
        let mut unkeyed: Vec<(ContextId, Unkeyed, u32)> = Vec::new();
        index.entries.reserve_exact(bindings.len());
        for (i, b) in bindings.iter().enumerate() {
            let i = u32::try_from(i).expect("more than 4 billion bindings");
            let scope = &b.scope;
            let guild = scope.guild.as_deref().map_or(UNSET, |g| index.intern(g));
            let team = scope.team.as_deref().map_or(UNSET, |t| index.intern(t));
            let start = index.roles.len();
            for role in &scope.roles {
                let sym = index.intern(role);
                index.roles.push(sym);
            }
            index.roles[start..].sort_unstable();
            let roles = Run {
                start: run_number(start),
                len: run_number(index.roles.len() - start),
            };
            let agent = agent_number(&mut index, &b.agent_id);
            let file = index.file_number(&b.source.file);
            index.entries.push(Entry {
                guild,
                team,
                roles,
                agent,
                file,
                line: b.source.line,
                index: u32::try_from(b.source.index).expect("fewer than 4 billion bindings"),
                dm_scope: b.dm_scope,
                group_scope: b.group_scope,
            });
            let context = index.context(&scope.channel, &scope.account);
            let place = match scope.tier() {
                Tier::Peer | Tier::Wildcard => {
                    // A peer of an unknown kind or with an empty id never matches (§3).
                    let Some(peer) = &scope.peer else { continue };
                    let Some(class) = peer.kind.class() else {
                        continue;
                    };
                    match peer.id.as_deref() {
                        Some("") => continue,
                        Some(id) => Place::Keyed(key(context, Slot::Peer(class), index.intern(id))),
                        None => {
                            unkeyed.push((context, Unkeyed::Wildcard(class), i));
                            if guild != UNSET {
                                Place::Keyed(key(context, Slot::WildcardGuild(class), guild))
                            } else if team != UNSET {
                                Place::Keyed(key(context, Slot::WildcardTeam(class), team))
                            } else {
                                Place::Unkeyed(context, Unkeyed::WildcardOpen(class))
                            }
                        }
                    }
                }
                Tier::GuildRoles => Place::Keyed(key(context, Slot::GuildRoles, guild)),
                Tier::Guild => Place::Keyed(key(context, Slot::Guild, guild)),
                Tier::Team => Place::Keyed(key(context, Slot::Team, team)),
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
        let mut by_sym: Vec<Places> = vec![
            Places {
                key: NO_PLACE,
                run: Run::default(),
            };
            index.ids.len()
        ];
        let mut rest = places.as_slice();
        let mut of_sym: Vec<(u32, Run)> = Vec::new();
        while let Some(&(k, _)) = rest.first() {
            let sym = (k >> 32) as Sym;
            of_sym.clear();
            while let Some(&(k, _)) = rest.first().filter(|(k, _)| (k >> 32) as Sym == sym) {
                let len = rest.iter().take_while(|(other, _)| *other == k).count();
                let run = index.push_run(rest[..len].iter().map(|&(_, i)| i), len);
                let place = k as u32;
                of_sym.push((place, run));
                index.contexts[(place >> 4) as usize].keyed |= 1 << (place & 0xf);
                rest = &rest[len..];
            }
            by_sym[sym as usize] = match of_sym.as_slice() {
                [(key, run)] => Places {
                    key: *key,
                    run: *run,
                },
                many => {
                    let start = run_number(index.places.len());
                    index.places.extend_from_slice(many);
                    Places {
                        key: SPILLED,
                        run: Run {
                            start,
                            len: run_number(many.len()),
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
            let run = index.push_run(rest[..len].iter().map(|&(_, _, i)| i), len);
            index.contexts[context as usize].unkeyed[list.number()] = run;
            rest = &rest[len..];
        }
        index
    }

    fn intern(&mut self, id: &str) -> Sym {
        if let Some(info) = self.ids.get(id) {
            return info.sym;
        }
        let sym = Sym::try_from(self.ids.len()).expect("fewer than 4 billion ids");
        self.ids.insert(
            id.into(),
            IdInfo {
                sym,
                places: Places {
                    key: NO_PLACE,
                    run: Run::default(),
                },
            },
        );
        sym
    }

    fn context(&mut self, channel: &str, account: &AccountPattern) -> ContextId {
        let next = ContextId::try_from(self.contexts.len()).expect("fewer contexts than bindings");
        let entry = match self.channels.get_mut(channel) {
            Some(entry) => entry,
            None => self.channels.entry(channel.into()).or_insert(Channel {
                name: SharedStr::from(channel),
                ..Channel::default()
            }),
        };
        let found = match account {
            AccountPattern::Any => *entry.any.get_or_insert(next),
            AccountPattern::Exact(account) => match entry.accounts.get(account.as_str()) {
                Some(&(_, context)) => context,
                None => {
                    entry.accounts.insert(
                        account.as_str().into(),
                        (SharedStr::from(account.as_str()), next),
                    );
                    next
                }
            },
        };
        if found == next {
            assert!(
                self.contexts.len() < MAX_CONTEXTS,
                "too many channel accounts"
            );
            self.contexts.push(Context::default());
        }
        found
    }

    fn file_number(&mut self, file: &std::sync::Arc<str>) -> u32 {
        let known = self
            .files
            .iter()
            .rposition(|f| std::sync::Arc::ptr_eq(f, file) || f == file);
        let n = known.unwrap_or_else(|| {
            self.files.push(file.clone());
            self.files.len() - 1
        });
        run_number(n)
    }

    /// A run of the `len` binding positions of `positions`.
    fn push_run(&mut self, mut positions: impl Iterator<Item = u32>, len: usize) -> Run {
        if len == 1 {
            return Run {
                start: positions.next().expect("a run of one"),
                len: 1,
            };
        }
        let start = self.lists.len();
        self.lists.extend(positions);
        Run {
            start: run_number(start),
            len: run_number(len),
        }
    }

    fn run<'r>(&'r self, run: &'r Run) -> &'r [u32] {
        match run.len {
            0 => &[],
            1 => std::slice::from_ref(&run.start),
            len => &self.lists[run.start as usize..][..len as usize],
        }
    }

    /// The contexts of a normalized channel and account.
    pub fn locate(&self, channel: &str, account: &str) -> Located<'_> {
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
    pub fn names(&self, at: &Located<'_>, channel: &str, account: &str) -> (SharedStr, SharedStr) {
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
    pub fn id(&self, id: &str) -> Option<&IdInfo> {
        self.ids.get(id)
    }

    /// A keyed list of a context.
    pub fn keyed<'r>(
        &'r self,
        context: Option<ContextId>,
        slot: Slot,
        id: Option<&'r IdInfo>,
    ) -> &'r [u32] {
        let (Some(context), Some(id)) = (context, id) else {
            return &[];
        };
        if self.contexts[context as usize].keyed & (1 << slot.number()) == 0 {
            return &[];
        }
        let want = place_key(context, slot);
        let places = &id.places;
        if places.key == want {
            return self.run(&places.run);
        }
        if places.key != SPILLED {
            return &[];
        }
        let spilled = &self.places[places.run.start as usize..][..places.run.len as usize];
        match spilled.binary_search_by_key(&want, |&(key, _)| key) {
            Ok(at) => self.run(&spilled[at].1),
            Err(_) => &[],
        }
    }

    /// An unkeyed list of a context.
    pub fn unkeyed(&self, context: Option<ContextId>, list: Unkeyed) -> &[u32] {
        context.map_or(&[], |c| {
            self.run(&self.contexts[c as usize].unkeyed[list.number()])
        })
    }

    /// Where binding `b` is written.
    pub fn source(&self, b: usize) -> BindingRef {
        let e = &self.entries[b];
        BindingRef {
            file: self.files[e.file as usize].clone(),
            line: e.line,
            index: e.index as usize,
        }
    }

    pub fn entry(&self, binding: usize) -> &Entry {
        &self.entries[binding]
    }

    pub fn agent(&self, number: u32) -> &AgentKeys {
        &self.agents[number as usize]
    }

    pub fn default_agent(&self) -> &AgentKeys {
        &self.agents[self.default_agent as usize]
    }

    /// Whether binding `b`'s guild, team and roles hold for the message. Its account pattern,
    /// tier key and peer already hold by where it is indexed.
    pub fn check(&self, b: usize, q: &Symbols<'_, '_>) -> Result<(), Miss> {
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

fn run_number(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 4 billion list entries")
}
