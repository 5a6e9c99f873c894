//! Keys equal in SQL but written differently (`'1 mon'` and `'30 days'`,
//! `1.0` and `1.00`) are one row, also in the log: a row whose key is
//! rewritten in another form and then deleted stays deleted after the log
//! is compacted and the engine starts again.

use crate::common;

use aqueduct_log::{Log, Options, SyncPolicy};
use common::*;

#[test]
fn a_key_rewritten_in_another_form_stays_deleted_after_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE by_span (span interval PRIMARY KEY, note text)",
    );
    ok(
        &mut s,
        "CREATE TABLE by_amount (amount numeric PRIMARY KEY, note text)",
    );
    ok(
        &mut s,
        "INSERT INTO by_span VALUES ('1 mon', 'a'), ('1 day', 'kept')",
    );
    ok(
        &mut s,
        "INSERT INTO by_amount VALUES (1.0, 'a'), (2, 'kept')",
    );
    // The same key, in another form: the row takes it.
    ok(
        &mut s,
        "UPDATE by_span SET span = '30 days', note = 'b' WHERE span = '1 mon'",
    );
    ok(
        &mut s,
        "UPDATE by_amount SET amount = 1.00, note = 'b' WHERE amount = 1",
    );
    assert_eq!(
        rows(&mut s, "SELECT span, note FROM by_span ORDER BY span"),
        vec![vec!["1 day", "kept"], vec!["30 days", "b"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT amount, note FROM by_amount ORDER BY amount"),
        vec![vec!["1.00", "b"], vec!["2", "kept"]]
    );
    ok(&mut s, "DELETE FROM by_span WHERE span = '720 hours'");
    ok(&mut s, "DELETE FROM by_amount WHERE amount = 1");
    // An upsert found by a key written otherwise, then a delete.
    ok(&mut s, "INSERT INTO by_span VALUES ('2 days', 'c')");
    ok(
        &mut s,
        "INSERT INTO by_span VALUES ('48 hours', 'd') \
         ON CONFLICT (span) DO UPDATE SET note = excluded.note",
    );
    assert_eq!(
        rows(&mut s, "SELECT span, note FROM by_span WHERE note = 'd'"),
        vec![vec!["2 days", "d"]]
    );
    ok(&mut s, "DELETE FROM by_span WHERE span = '2 days'");
    // Rekeyed and deleted (found by a scan) in one transaction.
    ok(&mut s, "INSERT INTO by_span VALUES ('3 days', 'e')");
    ok(&mut s, "BEGIN");
    ok(
        &mut s,
        "UPDATE by_span SET span = '72 hours' WHERE span = '3 days'",
    );
    ok(&mut s, "DELETE FROM by_span WHERE note = 'e'");
    ok(&mut s, "COMMIT");
    drop(s);
    drop(e);

    // Compaction keeps the newest record of each log key.
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    log.seal_active().unwrap();
    log.compact().unwrap();
    drop(log);

    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        rows(&mut s, "SELECT span, note FROM by_span"),
        vec![vec!["1 day", "kept"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT amount, note FROM by_amount"),
        vec![vec!["2", "kept"]]
    );
}
