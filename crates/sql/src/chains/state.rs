//! The engine's part of the chains: the declarations analysed, kept by
//! schema version, and the logical servers, started once.

use std::sync::{Arc, OnceLock};

use aqueduct_expr::SqlError;
use aqueduct_tables::Catalog;

use super::analysis::{compile, Compiled};
use super::runtime::Runtime;

/// The engine's chains.
pub struct Chains {
    compiled: parking_lot::Mutex<Option<Arc<Compiled>>>,
    runtime: OnceLock<Arc<Runtime>>,
    /// Serializes the runtime's start.
    starting: parking_lot::Mutex<()>,
    /// Simulated datacenters (`latency.rs`), set before the runtime starts.
    pub datacenters: parking_lot::Mutex<Option<super::latency::Datacenters>>,
    /// The nodes the logical servers are spread over (`placement.rs`),
    /// set before the runtime starts.
    pub placement: parking_lot::Mutex<super::placement::Placement>,
    /// Tests only: every chain runs piecewise, whatever the analysis says
    /// (to show the serializability checker catches what it prevents).
    pub force_piecewise: std::sync::atomic::AtomicBool,
}

impl Default for Chains {
    fn default() -> Chains {
        Chains {
            compiled: Default::default(),
            runtime: OnceLock::new(),
            starting: Default::default(),
            datacenters: Default::default(),
            placement: parking_lot::Mutex::new(super::placement::Placement::single()),
            force_piecewise: Default::default(),
        }
    }
}

impl Chains {
    /// The declarations as of `catalog`, parsed and analysed.
    pub fn compiled(&self, catalog: &Catalog) -> Result<Arc<Compiled>, SqlError> {
        let version = catalog.schema_version();
        if let Some(c) = self.compiled.lock().as_ref() {
            if c.version == version {
                return Ok(c.clone());
            }
        }
        let compiled = Arc::new(compile(catalog, None)?);
        *self.compiled.lock() = Some(compiled.clone());
        Ok(compiled)
    }

    /// The logical servers, started by `start` on first use.
    pub fn runtime(
        &self,
        start: impl FnOnce() -> Result<Arc<Runtime>, SqlError>,
    ) -> Result<Arc<Runtime>, SqlError> {
        if let Some(r) = self.runtime.get() {
            return Ok(r.clone());
        }
        let _one = self.starting.lock();
        if let Some(r) = self.runtime.get() {
            return Ok(r.clone());
        }
        let r = start()?;
        let _ = self.runtime.set(r.clone());
        Ok(r)
    }
}
