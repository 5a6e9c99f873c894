//! The input of the analysis: chains, their hops, the views they may read
//! and the commutativity annotations (Lynx §4.1–§4.2, §5.1).
//!
//! Everything here is plain data. Names of tables, views, chains and hops
//! are compared exactly; a caller that folds the case of identifiers must
//! do so before building a [`Workload`].

use std::collections::BTreeSet;

/// One hop of a chain: a piece that runs as a local transaction on one
/// server (§3). The analysis only needs to know which tables and views it
/// reads and which tables it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The hop's name, used in reports; `None` renders as `hop<N>` with
    /// `N` counted from 1.
    pub name: Option<String>,
    /// Names read by the hop: base tables, or views (a name declared with
    /// [`Workload::view`] is a view, any other name a base table).
    pub reads: BTreeSet<String>,
    /// Base tables the hop inserts into, updates or deletes from. Views are
    /// maintained by the system and may not be written (§4.2).
    pub writes: BTreeSet<String>,
    /// The hop commutes with every other instance of itself, so two
    /// instances of it get no C-edge (§4.2, "self-commuting" hops; Figure 7,
    /// lines 21–22).
    pub commutes_with_self: bool,
}

impl Hop {
    /// A hop without a name, reading and writing nothing yet.
    pub fn new() -> Hop {
        Hop {
            name: None,
            reads: BTreeSet::new(),
            writes: BTreeSet::new(),
            commutes_with_self: false,
        }
    }

    /// A hop with a name.
    pub fn named(name: impl Into<String>) -> Hop {
        Hop {
            name: Some(name.into()),
            ..Hop::new()
        }
    }

    /// Adds tables or views the hop reads.
    pub fn reads<I, S>(mut self, names: I) -> Hop
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.reads.extend(names.into_iter().map(Into::into));
        self
    }

    /// Adds base tables the hop writes.
    pub fn writes<I, S>(mut self, names: I) -> Hop
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.writes.extend(names.into_iter().map(Into::into));
        self
    }

    /// Marks the hop as commuting with every instance of itself.
    pub fn commutes_with_self(mut self) -> Hop {
        self.commutes_with_self = true;
        self
    }

    /// The label of the hop at `index` (0-based) in reports: its name, or
    /// `hop<index + 1>`.
    pub fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("hop{}", index + 1),
        }
    }
}

impl Default for Hop {
    fn default() -> Hop {
        Hop::new()
    }
}

/// A transaction chain: a named, ordered sequence of hops (§3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The chain's name, unique within a [`Workload`].
    pub name: String,
    /// The hops, in execution order.
    pub hops: Vec<Hop>,
}

impl Chain {
    /// A chain without hops yet.
    pub fn new(name: impl Into<String>) -> Chain {
        Chain {
            name: name.into(),
            hops: Vec::new(),
        }
    }

    /// Appends a hop.
    pub fn hop(mut self, hop: Hop) -> Chain {
        self.hops.push(hop);
        self
    }

    /// Whether some hop writes: such a chain may conflict with another
    /// instance of itself and so appears twice in the SC-graph (§4.1).
    pub fn is_updating(&self) -> bool {
        self.hops.iter().any(|hop| !hop.writes.is_empty())
    }
}

/// A hop of a declared chain, by chain name and 0-based hop index; the
/// operand of a pairwise commutativity annotation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HopRef {
    /// The chain's name.
    pub chain: String,
    /// The hop's position in the chain, from 0.
    pub hop: usize,
}

impl HopRef {
    /// The `hop`-th hop (from 0) of `chain`.
    pub fn new(chain: impl Into<String>, hop: usize) -> HopRef {
        HopRef {
            chain: chain.into(),
            hop,
        }
    }
}

impl<S: Into<String>> From<(S, usize)> for HopRef {
    fn from((chain, hop): (S, usize)) -> HopRef {
        HopRef::new(chain, hop)
    }
}

/// A maintained view (a derived table in Lynx' words, §2): its name and
/// the tables it is computed from, which may themselves be views (a
/// secondary index over a join view, Figure 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// The view's name.
    pub name: String,
    /// The base tables or views it derives from.
    pub sources: BTreeSet<String>,
}

/// How many instances of each chain the SC-graph holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceRule {
    /// Lynx' rule (§4.1): two instances of every updating chain, one of
    /// every read-only chain. Two suffice: an SC-cycle through more
    /// instances implies one through two (§4.1, footnote 3). This is the
    /// rule for chains that any number of clients may run concurrently.
    #[default]
    TwoPerUpdatingChain,
    /// One instance of every chain: classical transaction chopping, where
    /// each listed transaction runs once (the setting of Figure 2).
    OnePerChain,
}

/// Everything the analysis looks at: the chains, the views and the
/// commutativity annotations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workload {
    /// The chains, in declaration order; reports keep this order.
    pub chains: Vec<Chain>,
    /// The maintained views hops may read.
    pub views: Vec<View>,
    /// Unordered pairs of hops that commute with each other in every
    /// instance, so that no C-edge joins them (§4.2). A pair of a hop with
    /// itself means the same as [`Hop::commutes_with_self`].
    pub commuting: Vec<(HopRef, HopRef)>,
    /// How many instances of each chain to put in the SC-graph.
    pub instance_rule: InstanceRule,
}

impl Workload {
    /// An empty workload under Lynx' instance rule.
    pub fn new() -> Workload {
        Workload::default()
    }

    /// Adds a chain.
    pub fn chain(mut self, chain: Chain) -> Workload {
        self.chains.push(chain);
        self
    }

    /// Declares a view derived from `sources` (base tables or views).
    pub fn view<I, S>(mut self, name: impl Into<String>, sources: I) -> Workload
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.views.push(View {
            name: name.into(),
            sources: sources.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Annotates two hops (possibly of different chains, possibly the same
    /// hop) as commuting with each other.
    pub fn commute(mut self, a: impl Into<HopRef>, b: impl Into<HopRef>) -> Workload {
        self.commuting.push((a.into(), b.into()));
        self
    }

    /// Chooses how many instances of each chain the SC-graph holds.
    pub fn instance_rule(mut self, rule: InstanceRule) -> Workload {
        self.instance_rule = rule;
        self
    }
}
