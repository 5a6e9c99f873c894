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
