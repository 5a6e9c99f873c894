//! A prepared keyed read of a view that needs no wait and no check runs
//! without the statement frame (`Session::execute_prepared_each` and
//! `Session::execute_prepared`). What it answers must be what the view's
//! query computes from the tables, through both APIs, while another
//! session and the reader itself write, and after the view is made anew.

use crate::common;

use aqueduct_sql::views::ViewOptions;
use aqueduct_sql::{Prepared, Session};
use aqueduct_values::Value;
use common::{create_t, engine_with, ok, prepared_rows, rows};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The rows `execute_prepared_each` hands out, as text; its count must
/// equal them.
fn each_rows(s: &mut Session, p: &Prepared, params: &[Value]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let n = s
        .execute_prepared_each(p, params, |r| {
            out.push(r.iter().map(|v| v.to_string()).collect())
        })
        .unwrap_or_else(|e| panic!("{}: {e}", p.sql));
    assert_eq!(n as usize, out.len(), "{}: the count", p.sql);
    out
}

const COUNTS: &str = "SELECT article.id, title, votes FROM article LEFT JOIN \
     (SELECT article_id, count(*) AS votes FROM vote GROUP BY article_id) AS vc \
     ON article.id = vc.article_id";

#[test]
fn quick_view_reads_answer_what_the_query_computes_from_the_tables() {
    for partial in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine_with(
            dir.path(),
            ViewOptions {
                partial,
                memory_limit: 0,
            },
        );
        let mut w = e.session();
        ok(
            &mut w,
            "CREATE TABLE article (id bigint PRIMARY KEY, title text)",
        );
        ok(&mut w, "CREATE TABLE vote (article_id bigint, u bigint)");
        ok(&mut w, "CREATE INDEX vote_article ON vote (article_id)");
        ok(&mut w, &format!("CREATE VIEW counts AS {COUNTS}"));
        ok(&mut w, "INSERT INTO article VALUES (1, 'one'), (2, 'two')");
        let mut r = e.session();
        // Every acknowledged write, the other session's too, must show.
        ok(&mut r, "SET aqueduct.consistency = 'linearizable'");
        let in_order = r
            .prepare("SELECT id, title, votes FROM counts WHERE id = $1", &[])
            .unwrap();
        let reordered = r
            .prepare("SELECT votes, id FROM counts WHERE id = $1", &[])
            .unwrap();
        let literal = r
            .prepare("SELECT title, votes FROM counts WHERE id = 2", &[])
            .unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let mut next_article = 3;
        for step in 0..600 {
            let writer = if rng.gen_bool(0.7) { &mut w } else { &mut r };
            let last_written = match rng.gen_range(0..5) {
                0 => {
                    let a = next_article;
                    next_article += 1;
                    ok(
                        writer,
                        &format!("INSERT INTO article VALUES ({a}, 'a{step}')"),
                    );
                    a
                }
                1 | 2 => {
                    let a = rng.gen_range(0..next_article + 2);
                    ok(writer, &format!("INSERT INTO vote VALUES ({a}, {step})"));
                    a
                }
                3 => {
                    let a = rng.gen_range(0..next_article);
                    ok(
                        writer,
                        &format!("DELETE FROM vote WHERE article_id = {a} AND u % 3 = 0"),
                    );
                    a
                }
                _ => {
                    let a = rng.gen_range(0..next_article);
                    ok(
                        writer,
                        &format!("UPDATE article SET title = 't{step}' WHERE id = {a}"),
                    );
                    a
                }
            };
            // The article just written is read first, at once, before the
            // views' worker had time to apply the write; then random ones.
            // Every view read comes before the query over the tables that
            // checks it: a read that did not wait for the views shows the
            // state before the write.
            let mut keys = vec![last_written];
            keys.extend((0..2).map(|_| rng.gen_range(0..next_article + 2)));
            for k in keys {
                let key = [Value::Int(k)];
                let got = each_rows(&mut r, &in_order, &key);
                let collected = prepared_rows(&mut r, &in_order, &key);
                let reordered_got = each_rows(&mut r, &reordered, &key);
                let want = rows(
                    &mut r,
                    &format!("SELECT * FROM ({COUNTS}) AS q WHERE id = {k}"),
                );
                let at = format!("article {k}, step {step}, partial {partial}");
                assert_eq!(got, want, "{at}");
                assert_eq!(collected, want, "{at}");
                let swapped: Vec<Vec<String>> = want
                    .iter()
                    .map(|row| vec![row[2].clone(), row[0].clone()])
                    .collect();
                assert_eq!(reordered_got, swapped, "{at}");
            }
            let want = rows(
                &mut r,
                &format!("SELECT title, votes FROM ({COUNTS}) AS q WHERE id = 2"),
            );
            assert_eq!(each_rows(&mut r, &literal, &[]), want);
            // `id = NULL` holds for no row.
            assert!(each_rows(&mut r, &in_order, &[Value::Null]).is_empty());
        }
    }
}

#[test]
fn a_quick_view_read_follows_the_view_made_anew_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), ViewOptions::default());
    let mut s = e.session();
    create_t(&mut s);
    ok(&mut s, "CREATE VIEW v AS SELECT id, a, b FROM t");
    let p = s.prepare("SELECT * FROM v WHERE id = $1", &[]).unwrap();
    let key = [Value::Int(2)];
    assert_eq!(each_rows(&mut s, &p, &key), vec![vec!["2", "two", "20"]]);
    assert_eq!(each_rows(&mut s, &p, &key), vec![vec!["2", "two", "20"]]);
    // Another session makes the view again with its columns in another
    // order: a read planned for the old one must not hand out its rows.
    let mut other = e.session();
    ok(&mut other, "DROP VIEW v");
    ok(&mut other, "CREATE VIEW v AS SELECT id, b, a FROM t");
    assert_eq!(each_rows(&mut s, &p, &key), vec![vec!["2", "20", "two"]]);
    assert_eq!(
        prepared_rows(&mut s, &p, &key),
        vec![vec!["2", "20", "two"]]
    );
}

#[test]
fn a_quick_view_read_refuses_a_session_token_from_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), ViewOptions::default());
    let mut s = e.session();
    create_t(&mut s);
    ok(&mut s, "CREATE VIEW v AS SELECT id, a, b FROM t");
    ok(&mut s, "SET aqueduct.consistency = 'session'");
    let p = s.prepare("SELECT * FROM v WHERE id = $1", &[]).unwrap();
    let key = [Value::Int(1)];
    assert_eq!(each_rows(&mut s, &p, &key), vec![vec!["1", "one", "10"]]);
    // A token past this server's last write: PostgreSQL's 22023, saying
    // why, on the quick path as on the framed one.
    ok(&mut s, "SET aqueduct.after_lsn = '999999999'");
    let e = s.execute_prepared_each(&p, &key, |_| {}).unwrap_err();
    assert_eq!(e.code, "22023", "{e}");
    assert!(e.message.contains("last write"), "{e}");
    ok(&mut s, "SET aqueduct.after_lsn = '0'");
    assert_eq!(each_rows(&mut s, &p, &key), vec![vec!["1", "one", "10"]]);
}
