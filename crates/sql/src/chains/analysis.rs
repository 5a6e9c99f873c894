//! The analysis of every declared chain together (Lynx §4, in
//! `aqueduct_chains`): each chain's hops with the tables they read and
//! write, the views as tables derived from their sources, the
//! commutativity annotations; and the verdict, piecewise or distributed.

use std::collections::HashMap;
use std::sync::Arc;

use aqueduct_chains::{Chain, Hop, HopRef, Report, Workload};
use aqueduct_expr::SqlError;
use aqueduct_tables::Catalog;

use super::declare::{self, ChainDecl};
use super::hop::PROGRESS_TABLE;

/// How a chain runs, as the analysis decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Hop by hop, answering after the first.
    Piecewise,
    /// As one distributed transaction.
    Distributed,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Piecewise => "piecewise",
            Mode::Distributed => "distributed",
        }
    }
}

/// The declarations of one schema version, parsed and analysed.
pub struct Compiled {
    pub version: u64,
    pub decls: HashMap<String, Arc<ChainDecl>>,
    pub report: Report,
}

impl Compiled {
    pub fn mode(&self, chain: &str) -> Mode {
        match self.report.is_piecewise(chain) {
            Some(false) => Mode::Distributed,
            _ => Mode::Piecewise,
        }
    }
}

/// Parses every chain of `catalog` (and `extra`, a chain being declared)
/// and analyses them together with the catalog's views.
pub fn compile(catalog: &Catalog, extra: Option<&ChainDecl>) -> Result<Compiled, SqlError> {
    let mut decls: HashMap<String, Arc<ChainDecl>> = HashMap::new();
    for def in catalog.chains.values() {
        let (decl, _) = declare::parse_create(&def.sql)?;
        decls.insert(def.name.clone(), Arc::new(decl));
    }
    if let Some(d) = extra {
        decls.insert(d.name.clone(), Arc::new(d.clone()));
    }
    let report = analyze(catalog, &decls)?;
    Ok(Compiled {
        version: catalog.schema_version(),
        decls,
        report,
    })
}

/// Lynx §4 over the declared chains: hops with the tables they read and
/// write, views as tables derived from their sources, and the
/// commutativity annotations.
fn analyze(catalog: &Catalog, decls: &HashMap<String, Arc<ChainDecl>>) -> Result<Report, SqlError> {
    let mut workload = Workload::new();
    let mut names: Vec<&String> = decls.keys().collect();
    names.sort();
    for name in &names {
        let decl = &decls[*name];
        let mut chain = Chain::new(name.as_str());
        for (i, h) in decl.hops.iter().enumerate() {
            let mut hop = Hop::named(declare::hop_label(name, i))
                .reads(
                    h.reads
                        .iter()
                        .filter(|t| t.as_str() != PROGRESS_TABLE)
                        .cloned(),
                )
                .writes(h.writes.iter().cloned());
            if h.commutative {
                hop = hop.commutes_with_self();
            }
            chain = chain.hop(hop);
        }
        workload = workload.chain(chain);
    }
    for name in &names {
        for (i, h) in decls[*name].hops.iter().enumerate() {
            for (other, n) in &h.commutes_with {
                let known = decls.get(other).is_some_and(|d| *n <= d.hops.len());
                if known {
                    workload = workload.commute(
                        HopRef::new(name.as_str(), i),
                        HopRef::new(other.as_str(), n - 1),
                    );
                }
            }
        }
    }
    for (view, sql) in catalog.views.values() {
        let mut sources = std::collections::BTreeSet::new();
        if let Ok(statements) = aqueduct_plan::parse::parse(sql) {
            for st in &statements {
                let _ = sqlparser::ast::visit_relations(st, |r| {
                    let s = r.to_string();
                    let s = s.strip_prefix("public.").unwrap_or(&s).to_ascii_lowercase();
                    sources.insert(s);
                    std::ops::ControlFlow::<()>::Continue(())
                });
            }
        }
        // The catalog keeps the whole `CREATE VIEW`: its own name is no source.
        sources.remove(view.as_str());
        workload = workload.view(view.as_str(), sources);
    }
    aqueduct_chains::analyze(&workload)
        .map_err(|e| SqlError::new("54000", format!("the chains cannot be analysed: {e}")))
}
