//! Where the logical servers live (`docs/chains.md`, "Shards across
//! processes"): every Aqueduct server of a placement runs
//! [`LOGICAL_SERVERS`] of them, and logical server `s` belongs to node
//! `s / LOGICAL_SERVERS`. A shard key's server is its hash modulo the
//! number of logical servers of the whole placement, so every node maps a
//! key to the same server.

use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

use aqueduct_chains::sequencer::ServerId;
use aqueduct_expr::SqlError;
use aqueduct_values::Value;

/// Logical servers per process (Lynx §5.2: many per machine).
pub const LOGICAL_SERVERS: usize = 8;
/// The most Aqueduct servers one placement spreads its shards over.
pub const MAX_CHAIN_NODES: usize = 8;

/// The Aqueduct servers the logical servers are spread over, and which
/// of them this one is.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// This server's index in `nodes`.
    pub node: usize,
    /// Every node's address for hops (`--chain-listen` of each); empty
    /// when this server holds every shard itself.
    pub nodes: Vec<SocketAddr>,
}

impl Placement {
    /// Every shard in this process.
    pub fn single() -> Placement {
        Placement {
            node: 0,
            nodes: Vec::new(),
        }
    }

    /// Parses the node list `"127.0.0.1:7101,127.0.0.1:7102"` and this
    /// server's index in it.
    pub fn parse(nodes: &str, node: usize) -> Result<Placement, SqlError> {
        let bad = |why: String| {
            SqlError::new("22023", format!("invalid chain nodes {nodes:?}: {why}")).with_hint(
                "give every node's address for hops, in the same order on every node, \
                 e.g. '127.0.0.1:7101,127.0.0.1:7102', and this node's index in it",
            )
        };
        let nodes: Vec<SocketAddr> = nodes
            .split(',')
            .map(|a| {
                a.trim()
                    .parse()
                    .map_err(|e| bad(format!("{a:?} is not an address: {e}")))
            })
            .collect::<Result<_, _>>()?;
        if nodes.len() > MAX_CHAIN_NODES {
            return Err(bad(format!(
                "{} nodes, at most {MAX_CHAIN_NODES}",
                nodes.len()
            )));
        }
        if node >= nodes.len() {
            return Err(bad(format!(
                "this node's index {node} is not below the {} nodes",
                nodes.len()
            )));
        }
        Ok(Placement { node, nodes })
    }

    /// Whether other processes hold shards.
    pub fn is_spread(&self) -> bool {
        self.nodes.len() > 1
    }

    /// Nodes in the placement (1 when not spread).
    pub fn node_count(&self) -> usize {
        self.nodes.len().max(1)
    }

    /// Logical servers over all nodes.
    pub fn servers(&self) -> usize {
        LOGICAL_SERVERS * self.node_count()
    }

    /// The node that runs a logical server.
    pub fn node_of(&self, server: ServerId) -> usize {
        server as usize / LOGICAL_SERVERS
    }

    /// The index among this node's servers, when the server is here.
    pub fn local(&self, server: ServerId) -> Option<usize> {
        (self.node_of(server) == self.node).then_some(server as usize % LOGICAL_SERVERS)
    }

    /// The global id of this node's `index`th logical server.
    pub fn global(&self, index: usize) -> ServerId {
        (self.node * LOGICAL_SERVERS + index) as ServerId
    }

    /// The logical server a shard key's value belongs to.
    pub fn server_of(&self, key: &Value) -> ServerId {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.to_string().hash(&mut h);
        (h.finish() % self.servers() as u64) as ServerId
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_maps_a_key_to_the_same_server_and_owns_its_range() {
        let a = Placement::parse("127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", 0).unwrap();
        let b = Placement::parse("127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", 2).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..1000 {
            let key = Value::Int(k);
            let s = a.server_of(&key);
            assert_eq!(s, b.server_of(&key));
            assert!((s as usize) < 24);
            seen.insert(a.node_of(s));
            assert_eq!(a.local(s).is_some(), a.node_of(s) == 0);
            assert_eq!(b.local(s).is_some(), b.node_of(s) == 2);
        }
        assert_eq!(seen.len(), 3, "keys spread over every node");
        assert_eq!(b.global(3), 19);
        assert!(Placement::parse("127.0.0.1:1", 1).is_err());
        assert!(Placement::parse("nowhere", 0).is_err());
        assert_eq!(Placement::single().servers(), LOGICAL_SERVERS);
    }
}
