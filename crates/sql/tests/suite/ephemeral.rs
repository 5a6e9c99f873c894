//! Ephemeral tables (`CREATE TABLE ... WITH (ephemeral = true)`): their
//! inserts reach the change feed and durable consumers, the tables keep
//! none of them, and compaction drops them from the log once every
//! consumer acknowledged them, and not before.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aqueduct_feed::{Change, Op};
use aqueduct_log::{Log, Lsn, Options, RecordKind, SyncPolicy};
use aqueduct_sql::{Engine, Session};
use aqueduct_tables::{decode_record, decode_row_key, TableId, Write};
use aqueduct_values::Value;
use common::{ok, run};

/// Small segments, so a few thousand rows fill many and compaction has
/// sealed segments to work on.
const SEGMENT_BYTES: u64 = 16 << 10;
/// Rows per round of inserts.
const ROWS: usize = 1_500;
/// Rows per INSERT statement.
const ROWS_PER_INSERT: usize = 50;
/// How long a test waits for the feed to deliver what was committed.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(30);
/// What the log may still hold of an ephemeral table once every row is
/// acknowledged, the active segment sealed and the log compacted: the one
/// row kept for its highest row id.
const RETAINED_ROWS_MAX: usize = 1;
/// Bytes of log (every segment) left then: the schema records and that
/// row, within one segment; each round writes several times more.
const RETAINED_BYTES_MAX: u64 = SEGMENT_BYTES;

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let (log, _) = Log::open(
        dir,
        Options {
            sync: SyncPolicy::Never,
            segment_bytes: SEGMENT_BYTES,
            ..Default::default()
        },
    )
    .unwrap();
    Engine::open(log, &mut |_| {}).unwrap()
}

fn table_id(e: &Engine, name: &str) -> TableId {
    e.database().read().table(name).unwrap().schema.id
}

/// Inserts `ROWS` rows into `events`, numbered from `from`.
fn insert_round(s: &mut Session, from: usize) {
    for chunk in (from..from + ROWS)
        .collect::<Vec<_>>()
        .chunks(ROWS_PER_INSERT)
    {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| format!("({i}, 'event number {i} with some payload')"))
            .collect();
        ok(
            s,
            &format!("INSERT INTO events (n, body) VALUES {}", values.join(", ")),
        );
    }
}

/// The rows of table `id` the log holds: (hidden row id, `n`).
fn logged_rows(log: &Log, id: TableId) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    log.replay(0, |r| {
        if r.kind == RecordKind::Put && r.key.first() == Some(&b'r') {
            let (table, key) = decode_row_key(r.key).unwrap();
            if table == id {
                let entry = decode_record(&r).unwrap().unwrap();
                let Write::Put { row, .. } = entry.write else {
                    unreachable!("a put record decodes to a put")
                };
                let (Value::Int(rowid), Value::Int(n)) = (&key[0], &row[0]) else {
                    panic!("unexpected row {key:?} {row:?}")
                };
                out.push((*rowid, *n));
            }
        }
        Ok(())
    })
    .unwrap();
    out
}

/// Bytes of every segment of the log, sealed and active.
fn log_bytes(log: &Log) -> u64 {
    log.segments().iter().map(|s| s.bytes).sum()
}

/// Reads consumer `name`'s messages until it has `count` inserts into
/// table `id` (their `n` values and LSNs), within the deadline.
fn receive(e: &Arc<Engine>, name: &str, id: TableId, count: usize) -> Vec<(i64, Lsn)> {
    let mut sub = e.feed().subscribe_as(name, None).unwrap();
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    let mut out = Vec::new();
    while out.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "only {} of {count} inserts arrived",
            out.len()
        );
        let Some(m) = sub.recv(left).unwrap() else {
            continue;
        };
        for c in &m.changes {
            if let Change::Row {
                table,
                op,
                new,
                old,
                prev_lsn,
                ..
            } = c
            {
                if table.id != id {
                    continue;
                }
                assert_eq!(*op, Op::Insert, "an ephemeral row is only ever inserted");
                assert!(old.is_none() && prev_lsn.is_none());
                let Value::Int(n) = new.as_ref().unwrap()[0] else {
                    panic!("n is an integer")
                };
                out.push((n, m.lsn));
            }
        }
    }
    out
}

#[test]
fn inserts_reach_the_feed_and_the_table_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE events (n bigint NOT NULL, body text) WITH (ephemeral = true)",
    );
    ok(
        &mut s,
        "CREATE TABLE clicks (id bigint PRIMARY KEY, at text) WITH (ephemeral = 'on')",
    );
    e.feed().register("reader", None).unwrap();
    let events = table_id(&e, "events");
    let clicks = table_id(&e, "clicks");
    insert_round(&mut s, 0);
    // A primary key names each row; an ephemeral table cannot check it,
    // so a key sent twice is two inserts.
    ok(&mut s, "INSERT INTO clicks VALUES (1, 'a'), (2, 'b')");
    ok(&mut s, "INSERT INTO clicks VALUES (1, 'again')");
    // COPY FROM loads rows like INSERT.
    assert!(matches!(
        ok(&mut s, "COPY clicks (id, at) FROM STDIN"),
        aqueduct_sql::Outcome::CopyIn { .. }
    ));
    s.copy_in_data(b"10\tcopied\n11\tcopied\n").unwrap();
    s.copy_in_done().unwrap();
    // RETURNING returns what was written.
    let Ok(aqueduct_sql::Outcome::Rows { rows, .. }) = run(
        &mut s,
        "INSERT INTO clicks VALUES (3, 'c') RETURNING id, at",
    ) else {
        panic!("RETURNING returns rows")
    };
    assert_eq!(rows, vec![vec![Value::Int(3), Value::Text("c".into())]]);

    {
        let catalog = e.database().read();
        for name in ["events", "clicks"] {
            let t = catalog.table(name).unwrap();
            assert!(t.schema.ephemeral);
            assert_eq!((t.len(), t.bytes), (0, 0), "{name} keeps no rows");
        }
    }
    let got = receive(&e, "reader", events, ROWS);
    let ns: Vec<i64> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        ns,
        (0..ROWS as i64).collect::<Vec<_>>(),
        "every insert, in order"
    );
    let got = receive(&e, "reader", clicks, 6);
    let ns: Vec<i64> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(ns, vec![1, 2, 1, 10, 11, 3]);

    // Reading, changing or indexing the rows is refused, naming the table.
    for sql in [
        "SELECT * FROM events",
        "SELECT count(*) FROM clicks",
        "SELECT * FROM clicks WHERE id = 1 FOR UPDATE",
        "UPDATE clicks SET at = 'x' WHERE id = 1",
        "DELETE FROM events",
        "INSERT INTO clicks VALUES (1, 'x') ON CONFLICT DO NOTHING",
        "INSERT INTO clicks SELECT n, body FROM events",
        "CREATE VIEW v AS SELECT n FROM events",
        "CREATE INDEX ON events (n)",
        "CREATE TABLE child (id bigint REFERENCES clicks (id))",
        "EXPLAIN SELECT * FROM events",
        "WITH x AS (SELECT * FROM events) SELECT * FROM x",
    ] {
        let err = run(&mut s, sql).expect_err(sql);
        assert_eq!(err.code, "0A000", "{sql}: {err}");
        assert!(
            err.message.contains("ephemeral table"),
            "{sql}: {}",
            err.message
        );
    }
    // A table made ephemeral in the open transaction is one already.
    ok(&mut s, "BEGIN");
    ok(
        &mut s,
        "CREATE TABLE pending (n int) WITH (ephemeral = true)",
    );
    let err = run(&mut s, "SELECT * FROM pending").expect_err("a read of it");
    assert_eq!(err.code, "0A000", "{err}");
    ok(&mut s, "ROLLBACK");
    // A CTE of the same name is not the table.
    ok(
        &mut s,
        "WITH events AS (SELECT 1 AS n) SELECT n FROM events",
    );
    // Nothing to truncate; schema changes work.
    ok(&mut s, "TRUNCATE events");
    ok(&mut s, "ALTER TABLE events ADD COLUMN source text");
    ok(&mut s, "ALTER TABLE events RENAME COLUMN body TO payload");
    ok(
        &mut s,
        "INSERT INTO events (n, payload, source) VALUES (-1, 'p', 's')",
    );
    let t = e.database().read().table("events").unwrap().clone();
    assert!(t.schema.ephemeral, "ALTER TABLE keeps the table ephemeral");
    assert_eq!(t.len(), 0);
    assert_eq!(receive(&e, "reader", events, ROWS + 1)[ROWS].0, -1);
}

#[test]
fn compaction_drops_acknowledged_rows_and_keeps_the_rest_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE events (n bigint NOT NULL, body text) WITH (ephemeral = true)",
    );
    let id = table_id(&e, "events");
    e.feed().register("sub", None).unwrap();

    // Round one, nothing acknowledged: compaction keeps every row.
    insert_round(&mut s, 0);
    e.database().log().seal_active().unwrap();
    e.database().log().compact().unwrap();
    assert_eq!(logged_rows(e.database().log(), id).len(), ROWS);

    // The consumer acknowledges the first half; a second round goes in.
    let got = receive(&e, "sub", id, ROWS);
    let (_, half_lsn) = got[ROWS / 2 - 1];
    e.feed().ack("sub", half_lsn).unwrap();
    insert_round(&mut s, ROWS);
    e.database().log().seal_active().unwrap();
    e.database().log().compact().unwrap();
    let logged = logged_rows(e.database().log(), id);
    let kept: Vec<i64> = logged.iter().map(|(_, n)| *n).collect();
    assert!(
        (ROWS as i64 / 2..2 * ROWS as i64).all(|n| kept.contains(&n)),
        "every row not acknowledged stays"
    );
    assert!(
        logged.len() < 2 * ROWS,
        "acknowledged rows are dropped ({} of {} kept)",
        logged.len(),
        2 * ROWS
    );
    let highest_rowid = logged.iter().map(|(r, _)| *r).max().unwrap();

    // After a restart and another compaction, the consumer gets exactly
    // what it had not acknowledged, in order.
    // An altered table stays ephemeral through replay (its alter_table
    // record carries the whole definition).
    ok(&mut s, "ALTER TABLE events ADD COLUMN source text");
    drop(s);
    drop(e);
    let e = open(dir.path());
    e.database().log().compact().unwrap();
    let t = e.database().read().table("events").unwrap().clone();
    assert!(t.schema.ephemeral, "still ephemeral after ALTER and replay");
    assert_eq!(t.schema.columns.len(), 3);
    assert_eq!((t.len(), t.bytes), (0, 0), "replay keeps no ephemeral row");
    let got = receive(&e, "sub", id, ROWS + ROWS / 2);
    let ns: Vec<i64> = got.iter().map(|(n, _)| *n).collect();
    assert_eq!(ns, (ROWS as i64 / 2..2 * ROWS as i64).collect::<Vec<_>>());

    // Every round acknowledged and compacted: the log does not grow with
    // the rows written.
    let mut s = e.session();
    let mut next = 2 * ROWS;
    for _ in 0..3 {
        insert_round(&mut s, next);
        next += ROWS;
        assert!(
            log_bytes(e.database().log()) > 4 * RETAINED_BYTES_MAX,
            "a round fills several segments"
        );
        let head = e.database().applied_lsn();
        e.feed().ack("sub", head).unwrap();
        e.database().log().seal_active().unwrap();
        e.database().log().compact().unwrap();
        let bytes = log_bytes(e.database().log());
        assert!(
            bytes <= RETAINED_BYTES_MAX,
            "{bytes} bytes of log retained after everything was acknowledged"
        );
        let logged = logged_rows(e.database().log(), id);
        assert!(
            logged.len() <= RETAINED_ROWS_MAX,
            "{} rows retained after everything was acknowledged",
            logged.len()
        );
        // The highest row id stays, so no id is handed out twice.
        let max_now = logged.iter().map(|(r, _)| *r).max();
        assert!(
            max_now.is_some_and(|m| m > highest_rowid),
            "the row with the highest row id was dropped (log keeps {max_now:?}, \
             highest before {highest_rowid})"
        );
    }
    // Restarted after all that, new rows take new row ids.
    drop(s);
    drop(e);
    let e = open(dir.path());
    let mut s = e.session();
    let before = logged_rows(e.database().log(), id);
    let highest = before
        .iter()
        .map(|(r, _)| *r)
        .max()
        .expect("the row with the highest row id stays");
    ok(
        &mut s,
        "INSERT INTO events (n, body) VALUES (-7, 'after restart')",
    );
    let after = logged_rows(e.database().log(), id);
    let (rowid, _) = after.iter().find(|(_, n)| *n == -7).unwrap();
    assert!(
        *rowid > highest,
        "row id {rowid} handed out again (highest so far {highest})"
    );
}
