//! The subscriber's core (`docs/publications.md` §5): the agent that
//! applies a publication stream to a sink in the order the stream's mode
//! asks for, exactly once where the sink can store its position with the
//! rows. Pure: the shell owns sockets, timers, workers and sink clients
//! and passes time in.
//!
//! Modules, each depending only on those above it:
//!
//! - [`limits`]: the agent's limits, with compile-time checks;
//! - [`retry`]: backoff delays with jitter drawn from the LSN;
//! - [`batch`]: what one sink transaction holds and the position record
//!   written with it;
//! - [`sink`]: the [`Sink`] trait of the shell's adapters and an in-memory
//!   model of transactional and guarded sinks;
//! - [`io`]: the agent's [`Input`]s, [`Effect`]s and settings;
//! - `window`, `scheduler`, `watermark` (private): the received items, the
//!   slot counters with their waiters and debts, the position;
//! - [`agent`]: [`Agent::step`], tying them together.

pub mod agent;
pub mod batch;
pub mod io;
pub mod limits;
pub mod retry;
mod scheduler;
pub mod sink;
mod watermark;
mod window;

#[cfg(feature = "planted-bugs")]
pub use agent::AgentBug;
pub use agent::{Agent, Phase};
pub use batch::{BatchId, Item, Origin, Record, Resume, SchemaPos};
pub use io::{AgentConfig, BootstrapStep, Effect, Input, Operator, StreamEnd};
#[cfg(feature = "planted-bugs")]
pub use sink::SinkBug;
pub use sink::{
    key_text, Commit, ErrorClass, MemRows, MemSink, PositionMode, RowState, Sink, SinkError,
};
