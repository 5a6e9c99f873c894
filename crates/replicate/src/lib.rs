//! Replication of the log (`docs/replication.md`).
//!
//! - [`catchup`]: Sirius' catch-up as a step function — which member to
//!   ask next, from which LSN, and how many records; no I/O.
//! - [`follower`]: its shell, a thread that pulls ranges of a member's log
//!   over HTTP, appends them at the same LSNs and applies them through the
//!   same code as a local commit; the server it runs in takes no write of
//!   its own (`aqueduct serve --follow`).
//! - [`read_index`]: the commit LSN of the servers a follower follows,
//!   asked now, for its linearizable reads.
//! - [`group`]: a Raft group of voting members (openraft), whose log
//!   storage is the log and whose state machine is the tables
//!   (`aqueduct serve --cluster`).

pub mod catchup;
pub mod follower;
pub mod group;
pub mod read_index;

pub use follower::{spawn, FollowConfig, FollowStatus};
