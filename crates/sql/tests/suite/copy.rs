//! `COPY ... FROM STDIN` through the session's API, as the front end drives
//! it: data in pieces, CopyDone or CopyFail, inside and outside a
//! transaction block. (Byte-for-byte comparisons with PostgreSQL are in
//! `crates/aqueduct/tests/copy.rs`.)

use crate::common;

use aqueduct_sql::{Outcome, TxnStatus};
use common::{engine, ok, rows, run};

#[test]
fn copy_in_is_all_or_nothing_and_copy_fail_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE t (id serial PRIMARY KEY, a int NOT NULL, b text DEFAULT 'd')",
    );

    // Data in pieces that cut a row apart; listed columns only.
    assert!(matches!(
        ok(&mut s, "COPY t (a) FROM STDIN"),
        Outcome::CopyIn {
            binary: false,
            columns: 1
        }
    ));
    assert!(s.copy_in_active());
    s.copy_in_data(b"1\n2").unwrap();
    s.copy_in_data(b"0\n3\n").unwrap();
    assert_eq!(
        s.copy_in_done().unwrap(),
        Outcome::Command {
            tag: "COPY 3".into()
        }
    );
    assert!(!s.copy_in_active());
    assert_eq!(
        rows(&mut s, "SELECT id, a, b FROM t ORDER BY id"),
        [["1", "1", "d"], ["2", "20", "d"], ["3", "3", "d"]]
    );

    // CopyFail: 57014 with the client's message, nothing written.
    ok(&mut s, "COPY t (a) FROM STDIN");
    s.copy_in_data(b"4\n").unwrap();
    let err = s.copy_in_fail("client gave up");
    assert_eq!(err.code, "57014");
    assert_eq!(err.message, "COPY from stdin failed: client gave up");
    assert_eq!(rows(&mut s, "SELECT count(*) FROM t"), [["3"]]);

    // Inside a block the COPY is the block's: a bad row fails the block,
    // and its earlier rows go with it.
    ok(&mut s, "BEGIN");
    ok(&mut s, "COPY t (a) FROM STDIN");
    s.copy_in_data(b"5\n").unwrap();
    assert_eq!(
        s.copy_in_done().unwrap(),
        Outcome::Command {
            tag: "COPY 1".into()
        }
    );
    ok(&mut s, "COPY t (a, b) FROM STDIN (FORMAT csv)");
    let e = s.copy_in_data(b"6,x\nseven,y\n").unwrap_err();
    assert_eq!(e.code, "22P02");
    assert_eq!(
        e.context.as_deref(),
        Some("COPY t, line 2, column a: \"seven\"")
    );
    assert!(!s.copy_in_active());
    assert_eq!(s.status(), TxnStatus::Failed);
    assert_eq!(run(&mut s, "SELECT 1").unwrap_err().code, "25P02");
    ok(&mut s, "ROLLBACK");
    assert_eq!(rows(&mut s, "SELECT count(*) FROM t"), [["3"]]);

    // A constraint a row breaks names its line; nothing is written.
    ok(&mut s, "COPY t (a) FROM STDIN");
    s.copy_in_data(b"8\n\\N\n9\n").unwrap();
    let e = s.copy_in_done().unwrap_err();
    assert_eq!(e.code, "23502");
    assert_eq!(e.context.as_deref(), Some("COPY t, line 2"));
    assert_eq!(rows(&mut s, "SELECT count(*) FROM t"), [["3"]]);

    // COPY ... TO STDOUT gives the data.
    let out = ok(
        &mut s,
        "COPY (SELECT a, b FROM t ORDER BY a) TO STDOUT (FORMAT csv, HEADER)",
    );
    let Outcome::CopyOut { chunks, tag, .. } = out else {
        panic!("{out:?}");
    };
    assert_eq!(tag, "COPY 3");
    assert_eq!(chunks.concat(), b"a,b\n1,d\n3,d\n20,d\n");
    // A COPY FROM STDIN may end a query string, not come before more.
    let results = s.execute("SELECT 1; COPY t (a) FROM STDIN;");
    assert!(
        matches!(results[..], [Ok(_), Ok(Outcome::CopyIn { .. })]),
        "{results:?}"
    );
    assert_eq!(s.copy_in_fail("never mind").code, "57014");
    let results = s.execute("COPY t (a) FROM STDIN; SELECT 1");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].as_ref().unwrap_err().code, "0A000");
    assert!(!s.copy_in_active());
}

/// Rows for `COPY ... FROM STDIN` of `(id, v)`, ids `from..to`.
fn copy_lines(from: usize, to: usize) -> Vec<u8> {
    (from..to)
        .map(|i| format!("{i}\t{}\n", i * 2))
        .collect::<String>()
        .into_bytes()
}

/// A COPY longer than a chunk is written a chunk at a time as its data
/// arrives, yet stays one transaction: nobody sees its rows before its
/// end, a bad row in a later chunk writes none of them, and a conflicting
/// commit made meanwhile fails it.
#[test]
fn a_long_copy_streams_into_one_transaction() {
    use aqueduct_plan::limits::COPY_CHUNK_ROWS;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    let mut other = e.session();
    ok(
        &mut s,
        "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)",
    );
    let n = COPY_CHUNK_ROWS * 5 / 2;

    // Two and a half chunks, in messages of a few hundred rows: the
    // first two chunks are written before the data ends, and no one
    // sees them until CopyDone.
    ok(&mut s, "COPY t FROM STDIN");
    let data = copy_lines(0, n);
    let (head, tail) = data.split_at(data.len() - 10);
    for piece in head.chunks(4096) {
        s.copy_in_data(piece).unwrap();
    }
    assert_eq!(rows(&mut other, "SELECT count(*) FROM t"), [["0"]]);
    s.copy_in_data(tail).unwrap();
    assert_eq!(
        s.copy_in_done().unwrap(),
        Outcome::Command {
            tag: format!("COPY {n}")
        }
    );
    assert_eq!(
        rows(&mut other, "SELECT count(*), sum(v) FROM t"),
        [[n.to_string(), (n * (n - 1)).to_string()]]
    );

    // A bad row in the third chunk: the two chunks written before it go
    // too, and its line is named.
    ok(&mut s, "COPY t FROM STDIN");
    let mut data = copy_lines(n, n + 2 * COPY_CHUNK_ROWS + 5);
    data.extend_from_slice(b"oops\t1\n");
    let e = data
        .chunks(8192)
        .find_map(|piece| s.copy_in_data(piece).err())
        .or_else(|| s.copy_in_done().err())
        .expect("the bad row fails the COPY");
    assert_eq!(e.code, "22P02");
    let line = 2 * COPY_CHUNK_ROWS + 6;
    assert_eq!(
        e.context.as_deref(),
        Some(format!("COPY t, line {line}, column id: \"oops\"").as_str())
    );
    assert!(!s.copy_in_active());
    assert_eq!(s.status(), TxnStatus::Idle);
    assert_eq!(
        rows(&mut other, "SELECT count(*) FROM t"),
        [[n.to_string()]]
    );

    // A duplicate in a later chunk of what an earlier chunk wrote.
    ok(&mut s, "COPY t FROM STDIN");
    let mut data = copy_lines(n, n + COPY_CHUNK_ROWS + 1);
    data.extend_from_slice(format!("{n}\t0\n").as_bytes());
    s.copy_in_data(&data).unwrap_err();
    assert!(!s.copy_in_active());
    assert_eq!(
        rows(&mut other, "SELECT count(*) FROM t"),
        [[n.to_string()]]
    );

    // Another session commits a row the COPY wrote while the COPY runs:
    // the COPY fails at its end (serialization failure) and writes none.
    ok(&mut s, "COPY t FROM STDIN");
    s.copy_in_data(&copy_lines(n, n + COPY_CHUNK_ROWS + 3))
        .unwrap();
    ok(&mut other, &format!("INSERT INTO t VALUES ({n}, -1)"));
    let e = s.copy_in_done().unwrap_err();
    assert_eq!(e.code, "40001");
    assert_eq!(
        rows(&mut other, "SELECT count(*) FROM t"),
        [[(n + 1).to_string()]]
    );

    // Inside a block the chunks go into the block's transaction:
    // ROLLBACK takes them back.
    ok(&mut s, "BEGIN");
    ok(&mut s, "COPY t FROM STDIN");
    s.copy_in_data(&copy_lines(n + 1, n + 1 + COPY_CHUNK_ROWS * 2))
        .unwrap();
    s.copy_in_done().unwrap();
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM t"),
        [[(n + 1 + COPY_CHUNK_ROWS * 2).to_string()]]
    );
    ok(&mut s, "ROLLBACK");
    assert_eq!(
        rows(&mut other, "SELECT count(*) FROM t"),
        [[(n + 1).to_string()]]
    );
}

/// A transaction whose writes would take more log than one commit may
/// append is refused (54000) by the statement that makes it so, not at
/// its commit; the block's earlier writes are not committed.
#[test]
fn a_transaction_too_large_to_commit_is_refused_as_it_grows() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE big (id int PRIMARY KEY, body text)");
    let insert = s
        .prepare("INSERT INTO big VALUES ($1, $2)", &[None, None])
        .unwrap();
    let body = aqueduct_values::Value::Text("x".repeat(1_000_000));
    ok(&mut s, "BEGIN");
    let limit = aqueduct_tables::MAX_BATCH_BYTES;
    let mut refused = None;
    for id in 0..(limit / 1_000_000 + 2) as i64 {
        let params = [aqueduct_values::Value::Int(id), body.clone()];
        if let Err(e) = s.execute_prepared(&insert, &params) {
            refused = Some((id, e));
            break;
        }
    }
    let (id, e) = refused.expect("the transaction grows past the limit");
    assert_eq!(e.code, "54000");
    assert!(e.message.contains("MAX_BATCH_BYTES"), "{}", e.message);
    // Refused at the row that passes the limit: each takes a little over
    // its 1,000,000 bytes of text.
    let id = id as usize;
    assert!(
        id * 1_000_000 <= limit && limit < (id + 1) * 1_000_100,
        "refused at row {id}"
    );
    assert_eq!(s.status(), TxnStatus::Failed);
    ok(&mut s, "ROLLBACK");
    assert_eq!(rows(&mut s, "SELECT count(*) FROM big"), [["0"]]);
}
