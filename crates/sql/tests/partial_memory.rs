//! The memory limit holds: over a long zipf-distributed read workload that
//! touches far more keys than fit, the bytes of view and operator state
//! stay at the limit, and so does the process's resident memory beyond
//! what the base tables took. (Its own test binary: resident memory is the
//! whole process's.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::views::ViewOptions;
use aqueduct_sql::{Engine, Outcome, Session};
use aqueduct_values::Value;

const ARTICLES: u64 = 100_000;
const MEMORY_LIMIT: u64 = 2 << 20;
/// Reads at most, and for at most this long.
const READS: usize = 150_000;
const RUN_FOR: Duration = Duration::from_secs(15);
/// Allocator overhead and the keys filled since the last eviction round.
const STATE_SLACK: u64 = 256 << 10;

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kb * 1024
}

fn exec(s: &mut Session, sql: &str) -> Outcome {
    s.execute(sql)
        .pop()
        .unwrap()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Zipf over 1..=n with exponent `s`, by inverting its cumulative weights.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut total = 0.0;
        let cumulative = (1..=n)
            .map(|k| {
                total += (k as f64).powf(-s);
                total
            })
            .collect();
        Zipf { cumulative }
    }

    fn sample(&self, u: f64) -> u64 {
        let target = u * self.cumulative.last().unwrap();
        self.cumulative.partition_point(|&c| c < target) as u64 + 1
    }
}

#[test]
fn view_state_and_resident_memory_stay_under_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    let engine: Arc<Engine> = Engine::open_with(
        log,
        &mut |_| {},
        ViewOptions {
            partial: true,
            memory_limit: MEMORY_LIMIT,
        },
    )
    .unwrap();
    let mut s = engine.session();
    exec(
        &mut s,
        "CREATE TABLE article (id bigint PRIMARY KEY, title text)",
    );
    exec(
        &mut s,
        "CREATE TABLE vote (article_id bigint, voter bigint)",
    );
    exec(&mut s, "CREATE INDEX vote_article ON vote (article_id)");
    for chunk in (1..=ARTICLES).collect::<Vec<_>>().chunks(2000) {
        let articles: Vec<String> = chunk
            .iter()
            .map(|i| format!("({i}, 'article number {i}')"))
            .collect();
        exec(
            &mut s,
            &format!("INSERT INTO article VALUES {}", articles.join(", ")),
        );
        let votes: Vec<String> = chunk.iter().map(|i| format!("({i}, {})", i * 7)).collect();
        exec(
            &mut s,
            &format!("INSERT INTO vote VALUES {}", votes.join(", ")),
        );
    }
    exec(
        &mut s,
        "CREATE VIEW per_article AS SELECT article.id, title, count(vote.voter) AS votes \
         FROM article LEFT JOIN vote ON article.id = vote.article_id GROUP BY article.id, title",
    );
    let read = s
        .prepare("SELECT * FROM per_article WHERE id = $1", &[None])
        .unwrap();
    let baseline = resident_bytes();

    let zipf = Zipf::new(ARTICLES, 1.0);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let started = Instant::now();
    let (mut peak_state, mut peak_resident, mut reads) = (0, baseline, 0);
    while reads < READS && started.elapsed() < RUN_FOR {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let id = zipf.sample((rng >> 11) as f64 / (1u64 << 53) as f64);
        let Outcome::Rows { rows, .. } =
            s.execute_prepared(&read, &[Value::Int(id as i64)]).unwrap()
        else {
            panic!("rows");
        };
        assert_eq!(rows.len(), 1, "article {id}");
        assert_eq!(rows[0][0], Value::Int(id as i64));
        assert_eq!(rows[0][2], Value::Int(1), "article {id} has one vote");
        reads += 1;
        if reads.is_multiple_of(1000) {
            peak_state = peak_state.max(engine.views.progress().state_bytes);
            peak_resident = peak_resident.max(resident_bytes());
        }
    }
    let stats = engine.views.stats();
    let v = stats.iter().find(|v| v.name == "per_article").unwrap();
    let per_key = v.bytes / (v.keys.max(1) as u64);
    let touched = v.reads.fills;
    eprintln!(
        "{reads} reads in {:.1?}: {touched} keys filled, {} evicted, {} held ({per_key} bytes each); \
         state peaked at {peak_state} bytes; resident memory {baseline} bytes before, peaked at {peak_resident}",
        started.elapsed(),
        v.reads.evictions,
        v.keys
    );
    // The workload would need far more than the limit without eviction.
    assert!(
        touched * per_key > 4 * MEMORY_LIMIT,
        "the reads touched too few keys to test the limit"
    );
    assert!(
        peak_state <= MEMORY_LIMIT + STATE_SLACK,
        "view state reached {peak_state} bytes, over the limit of {MEMORY_LIMIT}"
    );
    // Resident memory beyond the tables: the state, allocator overhead,
    // freed memory not returned to the system. Far below what holding
    // every key touched would take.
    let grown = peak_resident.saturating_sub(baseline);
    assert!(
        grown <= 6 * MEMORY_LIMIT + (12 << 20),
        "resident memory grew by {grown} bytes under a limit of {MEMORY_LIMIT}"
    );
}
