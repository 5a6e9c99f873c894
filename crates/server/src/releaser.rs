//! The releaser: the clock of scheduled releases. At every multiple of the
//! release interval it cuts a release under the commit lock and publishes
//! it once durable (`Engine::cut_release`). Every id is cut in turn: when
//! the process falls behind (a stall longer than an interval), the missed
//! ids are cut at once, the first holding the writes and the rest empty,
//! so clients following release by release never meet a gap.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aqueduct_sql::releases::Schedule;
use aqueduct_sql::Engine;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Cuts releases on `schedule` until `stop` completes.
pub async fn run(
    engine: Arc<Engine>,
    schedule: Schedule,
    stop: impl std::future::Future<Output = ()>,
) {
    engine.enable_releases(schedule);
    tracing::info!(
        interval_ms = schedule.interval_ms(),
        "releases every {} ms",
        schedule.interval_ms()
    );
    let mut next = schedule.due_at(now_ms()) + 1;
    tokio::pin!(stop);
    loop {
        let wait = schedule.time_of(next).saturating_sub(now_ms());
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
            _ = &mut stop => return,
        }
        // The clock may wake a little early; never cut before the time.
        if now_ms() < schedule.time_of(next) {
            continue;
        }
        let e = engine.clone();
        let id = next;
        let cut = tokio::task::spawn_blocking(move || e.cut_release(id, now_ms())).await;
        match cut {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(release = id, "release not published: {e}"),
            Err(e) => tracing::error!(release = id, "releaser task failed: {e}"),
        }
        next += 1;
    }
}
