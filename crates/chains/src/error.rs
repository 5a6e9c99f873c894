//! Why a workload could not be analysed.

use std::fmt;

/// A workload the analysis refuses, with what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnalysisError {
    /// A chain without hops.
    EmptyChain { chain: String },
    /// Two chains with the same name.
    DuplicateChain { chain: String },
    /// Two hops of one chain with the same label.
    DuplicateHop { chain: String, hop: String },
    /// Two views with the same name.
    DuplicateView { view: String },
    /// A view that derives, directly or through other views, from itself.
    ViewCycle { view: String },
    /// A hop writes a view; views are maintained by the system (§4.2).
    WriteToView {
        chain: String,
        hop: String,
        view: String,
    },
    /// A commutativity annotation names a chain that is not declared.
    UnknownChain { chain: String },
    /// A commutativity annotation names a hop past the end of its chain.
    UnknownHop { chain: String, hop: usize },
    /// The SC-graph would exceed [`crate::MAX_GRAPH_NODES`] nodes.
    TooManyNodes { nodes: usize, limit: usize },
    /// The SC-graph would exceed [`crate::MAX_GRAPH_EDGES`] edges.
    TooManyEdges { limit: usize },
}

impl fmt::Display for AnalysisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnalysisError::EmptyChain { chain } => write!(f, "chain {chain} has no hops"),
            AnalysisError::DuplicateChain { chain } => {
                write!(f, "chain {chain} is declared more than once")
            }
            AnalysisError::DuplicateHop { chain, hop } => {
                write!(f, "chain {chain} has more than one hop labelled {hop}")
            }
            AnalysisError::DuplicateView { view } => {
                write!(f, "view {view} is declared more than once")
            }
            AnalysisError::ViewCycle { view } => {
                write!(f, "view {view} derives from itself")
            }
            AnalysisError::WriteToView { chain, hop, view } => write!(
                f,
                "hop {hop} of chain {chain} writes view {view}; views are maintained by the system"
            ),
            AnalysisError::UnknownChain { chain } => {
                write!(f, "commutativity annotation names unknown chain {chain}")
            }
            AnalysisError::UnknownHop { chain, hop } => write!(
                f,
                "commutativity annotation names hop {} of chain {chain}, which has fewer hops",
                hop + 1
            ),
            AnalysisError::TooManyNodes { nodes, limit } => write!(
                f,
                "the SC-graph would have {nodes} nodes, more than the limit of {limit}"
            ),
            AnalysisError::TooManyEdges { limit } => {
                write!(f, "the SC-graph would have more than {limit} edges")
            }
        }
    }
}

impl std::error::Error for AnalysisError {}
