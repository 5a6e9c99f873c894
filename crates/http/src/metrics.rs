//! Prometheus text exposition (format 0.0.4) of the engine's counters.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use aqueduct_sql::Engine;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Everything the engine knows about itself, as Prometheus text.
pub fn render_metrics(engine: &Engine) -> String {
    let mut out = String::new();
    let m = &engine.metrics;
    family(
        &mut out,
        "aqueduct_statements_total",
        "counter",
        "SQL statements executed, by kind.",
    );
    for (kind, c) in [
        ("select", &m.select),
        ("insert", &m.insert),
        ("update", &m.update),
        ("delete", &m.delete),
        ("ddl", &m.ddl),
        ("other", &m.other),
    ] {
        let _ = writeln!(
            out,
            "aqueduct_statements_total{{kind=\"{kind}\"}} {}",
            c.load(Ordering::Relaxed)
        );
    }
    family(
        &mut out,
        "aqueduct_statement_errors_total",
        "counter",
        "SQL statements that failed.",
    );
    let _ = writeln!(
        out,
        "aqueduct_statement_errors_total {}",
        m.errors.load(Ordering::Relaxed)
    );
    family(
        &mut out,
        "aqueduct_statements_running",
        "gauge",
        "SQL statements running now.",
    );
    let _ = writeln!(
        out,
        "aqueduct_statements_running {}",
        m.running.load(Ordering::Relaxed)
    );
    family(
        &mut out,
        "aqueduct_view_reads_computed_total",
        "counter",
        "Reads of views answered from the base tables after an upquery or the wait for the views timed out (timeout action 'compute').",
    );
    let _ = writeln!(
        out,
        "aqueduct_view_reads_computed_total {}",
        m.computed_after_timeout.load(Ordering::Relaxed)
    );

    let releases = &engine.releases;
    if let Some(schedule) = releases.schedule() {
        let st = releases.stats();
        let current = releases.current();
        let (kept, kept_bytes) = releases.kept();
        for (name, kind, help, v) in [
            (
                "aqueduct_release_interval_seconds",
                "gauge",
                "The release interval.",
                schedule.interval_ms() as f64 / 1000.0,
            ),
            (
                "aqueduct_release_current",
                "gauge",
                "Id of the release that release reads see.",
                current.as_ref().map_or(0.0, |c| c.release.id as f64),
            ),
            (
                "aqueduct_release_lsn",
                "gauge",
                "LSN of the current release.",
                current.as_ref().map_or(0.0, |c| c.release.lsn as f64),
            ),
            (
                "aqueduct_releases_published_total",
                "counter",
                "Releases published.",
                st.published as f64,
            ),
            (
                "aqueduct_release_cut_lag_seconds",
                "gauge",
                "From the last release's due time to its cut.",
                st.cut_lag_ms as f64 / 1000.0,
            ),
            (
                "aqueduct_release_publish_delay_seconds",
                "gauge",
                "From the last release's due time to its publication.",
                st.publish_delay_ms as f64 / 1000.0,
            ),
            (
                "aqueduct_release_publish_delay_max_seconds",
                "gauge",
                "The largest publication delay so far.",
                st.max_publish_delay_ms as f64 / 1000.0,
            ),
            (
                "aqueduct_releases_kept",
                "gauge",
                "Releases whose change sets are kept.",
                kept as f64,
            ),
            (
                "aqueduct_release_changes_bytes",
                "gauge",
                "Bytes of kept change sets (estimated).",
                kept_bytes as f64,
            ),
        ] {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {v}");
        }
    }

    let db = engine.database();
    let t = &db.metrics;
    family(
        &mut out,
        "aqueduct_commits_total",
        "counter",
        "Committed write transactions.",
    );
    let _ = writeln!(
        out,
        "aqueduct_commits_total {}",
        t.commits.load(Ordering::Relaxed)
    );
    family(
        &mut out,
        "aqueduct_serialization_failures_total",
        "counter",
        "Transactions that failed validation (SQLSTATE 40001).",
    );
    let _ = writeln!(
        out,
        "aqueduct_serialization_failures_total {}",
        t.serialization_failures.load(Ordering::Relaxed)
    );

    let log = db.log();
    let lm = log.metrics();
    for (name, help, v) in [
        (
            "aqueduct_log_appends_total",
            "Batches appended to the log.",
            &lm.batches,
        ),
        (
            "aqueduct_log_records_total",
            "Records appended to the log.",
            &lm.records,
        ),
        (
            "aqueduct_log_bytes_total",
            "Bytes appended to the log.",
            &lm.bytes,
        ),
        (
            "aqueduct_log_syncs_total",
            "fdatasync calls on the log.",
            &lm.syncs,
        ),
        (
            "aqueduct_log_segments_sealed_total",
            "Log segments sealed.",
            &lm.segments_sealed,
        ),
        (
            "aqueduct_log_compaction_passes_total",
            "Log compaction passes.",
            &lm.compaction_passes,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
    }
    family(
        &mut out,
        "aqueduct_log_sync_seconds",
        "histogram",
        "Time of one fdatasync of the log.",
    );
    let hist = lm.sync_histogram();
    for (le, n) in &hist {
        let le = if le.is_infinite() {
            "+Inf".to_string()
        } else {
            le.to_string()
        };
        let _ = writeln!(out, "aqueduct_log_sync_seconds_bucket{{le=\"{le}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "aqueduct_log_sync_seconds_sum {}",
        lm.sync_micros_total.load(Ordering::Relaxed) as f64 / 1e6
    );
    let _ = writeln!(
        out,
        "aqueduct_log_sync_seconds_count {}",
        hist.last().map(|(_, n)| *n).unwrap_or(0)
    );
    family(&mut out, "aqueduct_log_lsn", "gauge", "Last committed LSN.");
    let _ = writeln!(out, "aqueduct_log_lsn {}", log.committed_lsn());

    family(
        &mut out,
        "aqueduct_recovery_seconds",
        "gauge",
        "Time the last start-up took to replay the log.",
    );
    let _ = writeln!(
        out,
        "aqueduct_recovery_seconds {}",
        engine.replay.elapsed.as_secs_f64()
    );
    family(
        &mut out,
        "aqueduct_table_rows",
        "gauge",
        "Rows in each base table.",
    );
    for (name, rows) in engine.table_rows() {
        let _ = writeln!(
            out,
            "aqueduct_table_rows{{table=\"{}\"}} {rows}",
            escape(&name)
        );
    }
    family(
        &mut out,
        "aqueduct_table_bytes",
        "gauge",
        "Approximate bytes of each base table's rows in memory (not bounded by --memory-limit).",
    );
    for (name, bytes) in engine.table_bytes() {
        let _ = writeln!(
            out,
            "aqueduct_table_bytes{{table=\"{}\"}} {bytes}",
            escape(&name)
        );
    }
    let progress = engine.views.progress();
    family(
        &mut out,
        "aqueduct_dataflow_processed_lsn",
        "gauge",
        "LSN up to which the views reflect every write.",
    );
    let _ = writeln!(
        out,
        "aqueduct_dataflow_processed_lsn {}",
        progress.processed
    );
    family(
        &mut out,
        "aqueduct_dataflow_queued_batches",
        "gauge",
        "Committed batches waiting for the dataflow worker.",
    );
    let _ = writeln!(
        out,
        "aqueduct_dataflow_queued_batches {}",
        progress.queued_batches
    );
    family(
        &mut out,
        "aqueduct_dataflow_backpressure_waits_total",
        "counter",
        "Commits that waited for room in the dataflow worker's queue (views behind writers).",
    );
    let _ = writeln!(
        out,
        "aqueduct_dataflow_backpressure_waits_total {}",
        progress.backpressure_waits
    );
    family(
        &mut out,
        "aqueduct_state_bytes",
        "gauge",
        "Bytes of all view and operator state (what --memory-limit bounds).",
    );
    let _ = writeln!(out, "aqueduct_state_bytes {}", progress.state_bytes);
    family(
        &mut out,
        "aqueduct_memory_limit_bytes",
        "gauge",
        "The bound on view and operator state (0: none).",
    );
    let _ = writeln!(out, "aqueduct_memory_limit_bytes {}", progress.memory_limit);
    let views = engine.views.stats();
    type Get = fn(&aqueduct_sql::views::ViewStats) -> u64;
    for (name, kind, help, get) in [
        (
            "aqueduct_view_keys",
            "gauge",
            "Keys each view holds (a partial view: the keys filled and not evicted).",
            (|v| v.keys as u64) as Get,
        ),
        (
            "aqueduct_view_hits_total",
            "counter",
            "Keyed reads of each view answered from its state.",
            |v| v.reads.hits,
        ),
        (
            "aqueduct_view_misses_total",
            "counter",
            "Keyed reads of each view that missed and waited for an upquery.",
            |v| v.reads.misses,
        ),
        (
            "aqueduct_view_evictions_total",
            "counter",
            "Keys of each view evicted to stay under the memory limit.",
            |v| v.reads.evictions,
        ),
    ] {
        family(&mut out, name, kind, help);
        for v in &views {
            let _ = writeln!(out, "{name}{{view=\"{}\"}} {}", escape(&v.name), get(v));
        }
    }
    family(
        &mut out,
        "aqueduct_view_upquery_seconds",
        "histogram",
        "Time from a read's miss until its key was filled, per view.",
    );
    for v in &views {
        let h = &v.reads.upquery;
        let name = escape(&v.name);
        let mut seen = 0;
        for (i, le) in aqueduct_sql::views::LATENCY_BUCKETS_US.iter().enumerate() {
            seen += h.buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "aqueduct_view_upquery_seconds_bucket{{view=\"{name}\",le=\"{}\"}} {seen}",
                *le as f64 / 1e6
            );
        }
        let _ = writeln!(
            out,
            "aqueduct_view_upquery_seconds_bucket{{view=\"{name}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "aqueduct_view_upquery_seconds_sum{{view=\"{name}\"}} {}",
            h.sum_us as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "aqueduct_view_upquery_seconds_count{{view=\"{name}\"}} {}",
            h.count
        );
    }
    for (name, help, get) in [
        (
            "aqueduct_view_rows",
            "Rows in each maintained view.",
            (|v| v.rows) as Get,
        ),
        (
            "aqueduct_view_bytes",
            "Approximate bytes each view's state takes (its readers included).",
            |v| v.bytes,
        ),
        (
            "aqueduct_view_watermark_lsn",
            "LSN of the last write each view reflects.",
            |v| v.watermark,
        ),
    ] {
        family(&mut out, name, "gauge", help);
        for v in &views {
            let _ = writeln!(out, "{name}{{view=\"{}\"}} {}", escape(&v.name), get(v));
        }
    }
    feed_metrics(&mut out, engine);
    out
}

/// The change feed and its durable consumers.
fn feed_metrics(out: &mut String, engine: &Engine) {
    let feed = engine.feed();
    let m = &feed.metrics;
    for (name, kind, help, value) in [
        (
            "aqueduct_feed_messages_published_total",
            "counter",
            "Committed transactions the change feed has published.",
            m.published.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_feed_messages_delivered_total",
            "counter",
            "Messages handed to subscribers (each subscriber counts).",
            m.delivered.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_feed_subscribers",
            "gauge",
            "Subscriptions open (in process and over HTTP).",
            m.subscribers.load(Ordering::Relaxed) as u64,
        ),
        (
            "aqueduct_feed_cut_off_total",
            "counter",
            "Subscribers cut off for falling too far behind.",
            m.cut_off.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_feed_memory_bytes",
            "gauge",
            "Bytes of recent messages the feed holds in memory.",
            feed.memory_bytes() as u64,
        ),
        (
            "aqueduct_feed_head_lsn",
            "gauge",
            "LSN of the last transaction the feed published.",
            feed.head(),
        ),
    ] {
        family(out, name, kind, help);
        let _ = writeln!(out, "{name} {value}");
    }
    let consumers = feed.consumers();
    for (name, help, get) in [
        (
            "aqueduct_feed_consumer_next_lsn",
            "The LSN each durable consumer needs next.",
            (|c| c.next_lsn) as fn(&aqueduct_feed::ConsumerInfo) -> u64,
        ),
        (
            "aqueduct_feed_consumer_lag",
            "LSNs committed past each durable consumer's position.",
            |c| c.lag,
        ),
        (
            "aqueduct_feed_consumer_dropped",
            "1 for a durable consumer dropped past its cap.",
            |c| u64::from(c.dropped.is_some()),
        ),
    ] {
        family(out, name, "gauge", help);
        for c in &consumers {
            let _ = writeln!(out, "{name}{{consumer=\"{}\"}} {}", escape(&c.name), get(c));
        }
    }
}

/// Each publication's streams and subscribers (`docs/publications.md`,
/// section 9): counters of what was sent, and each subscriber's position
/// and lag from its durable consumer (`pub:{publication}:{subscriber}`).
pub(crate) fn publication_metrics(
    out: &mut String,
    engine: &Engine,
    metrics: &aqueduct_publisher::PublicationMetrics,
) {
    let all = metrics.all();
    for (name, kind, help, get) in [
        (
            "aqueduct_publication_messages_total",
            "counter",
            "Transactions sent to subscribers.",
            (|c| c.messages.load(Ordering::Relaxed)) as fn(&aqueduct_publisher::Counters) -> u64,
        ),
        (
            "aqueduct_publication_changes_total",
            "counter",
            "Row changes sent to subscribers.",
            |c| c.changes.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_publication_schema_messages_total",
            "counter",
            "Schema changes sent to subscribers.",
            |c| c.schema_messages.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_publication_bytes_total",
            "counter",
            "Bytes of stream and bootstrap lines sent.",
            |c| c.bytes.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_publication_streams",
            "gauge",
            "Streams and bootstraps open now.",
            |c| c.streams.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_publication_bootstraps_total",
            "counter",
            "Bootstraps started.",
            |c| c.bootstraps.load(Ordering::Relaxed),
        ),
        (
            "aqueduct_publication_bootstrap_rows_total",
            "counter",
            "Rows sent by bootstraps.",
            |c| c.bootstrap_rows.load(Ordering::Relaxed),
        ),
    ] {
        family(out, name, kind, help);
        for (p, c) in &all {
            let _ = writeln!(out, "{name}{{publication=\"{}\"}} {}", escape(p), get(c));
        }
    }
    let subscribers: Vec<(String, String, aqueduct_feed::ConsumerInfo)> = engine
        .feed()
        .consumers()
        .into_iter()
        .filter_map(|c| {
            let rest = c.name.strip_prefix("pub:")?;
            let (p, s) = rest.split_once(':')?;
            Some((p.to_string(), s.to_string(), c))
        })
        .collect();
    for (name, help, get) in [
        (
            "aqueduct_publication_subscriber_next_lsn",
            "The LSN each subscriber needs next (everything before it is applied).",
            (|c| c.next_lsn) as fn(&aqueduct_feed::ConsumerInfo) -> u64,
        ),
        (
            "aqueduct_publication_subscriber_lag_lsns",
            "LSNs committed past what each subscriber has applied.",
            |c| c.lag,
        ),
        (
            "aqueduct_publication_subscriber_dropped",
            "1 for a subscriber cut off past its cap (it bootstraps again).",
            |c| u64::from(c.dropped.is_some()),
        ),
    ] {
        family(out, name, "gauge", help);
        for (p, s, c) in &subscribers {
            let _ = writeln!(
                out,
                "{name}{{publication=\"{}\",subscriber=\"{}\"}} {}",
                escape(p),
                escape(s),
                get(c)
            );
        }
    }
}
