//! The server side of publications (`docs/publications.md`): what each
//! subscriber receives. A reader of the change feed, never a writer.
//!
//! Modules, each depending only on those above it:
//!
//! - [`projection`]: a publication's attributes, row filter and
//!   operations applied to one table's changes;
//! - [`views`]: maintained views as published objects: their changes
//!   from the view's tap, their rows at a snapshot's LSN;
//! - [`stream`]: one subscriber's stream from its watermark: projected
//!   transactions with their dependency counts, schema lines, progress;
//! - [`bootstrap`]: the publication's tables at one LSN, in chunks, with
//!   the subscriber's hold on the log set before the snapshot is taken;
//! - [`metrics`]: counters of each publication's streams.
//!
//! The wire format and the dependency tracker are `aqueduct_publish`'s;
//! the HTTP endpoints that serve these are `aqueduct_http`'s.

pub mod bootstrap;
pub mod metrics;
pub mod projection;
pub mod stream;
pub mod views;

pub use bootstrap::{Bootstrap, BootstrapRequest, Bootstraps};
pub use metrics::{Counters, PublicationMetrics, StreamGauge};
pub use projection::{ObjectProjection, Projection, ROW_ID_ATTRIBUTE};
pub use stream::{mode_refused, PublicationStream, StreamRequest};

use aqueduct_expr::SqlError;
use aqueduct_feed::FeedError;

pub use aqueduct_publish::{consumer_name, consumer_prefix};

/// A feed error as the SQL error a subscriber is told: 55000 when the
/// stream cannot start where it asked (bootstrap again).
pub(crate) fn feed_error(e: FeedError) -> SqlError {
    SqlError::new(e.sqlstate(), e.to_string())
}
