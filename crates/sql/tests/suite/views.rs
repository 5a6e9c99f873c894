//! Maintained views end to end: created in SQL, kept up to date by every
//! commit, rebuilt at restart, explained, refused where they cannot be kept.

use crate::common;

use aqueduct_sql::Session;
use common::{engine, run};

fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    common::sorted_rows(s, sql)
}

fn ok(s: &mut Session, sql: &str) {
    common::ok(s, sql);
}

const SCHEMA: &str = "CREATE TABLE article (id bigint PRIMARY KEY, title text, author bigint); \
     CREATE TABLE vote (article_id bigint, \"user\" bigint)";

/// Noria's StoryWithVotes, and Karma over it (Figure 1 of the paper).
const VOTES: &str = "CREATE VIEW article_votes AS \
     SELECT a.id, a.title, a.author, v.votes FROM article a \
     LEFT JOIN (SELECT article_id, count(*) AS votes FROM vote GROUP BY article_id) v \
     ON a.id = v.article_id";
const KARMA: &str = "CREATE VIEW karma AS \
     SELECT a.author, count(*) AS votes FROM article a JOIN vote v ON a.id = v.article_id \
     GROUP BY a.author";

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn votes_and_karma_stay_current() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'space elevator', 10), (2, 'rust', 20), (3, 'noria', 10)",
    );
    ok(
        &mut se,
        "INSERT INTO vote VALUES (1, 100), (1, 101), (2, 100)",
    );
    ok(&mut se, VOTES);
    ok(&mut se, KARMA);
    assert_eq!(
        rows(&mut se, "SELECT * FROM article_votes"),
        vec![
            s(&["1", "space elevator", "10", "2"]),
            s(&["2", "rust", "20", "1"]),
            s(&["3", "noria", "10", "NULL"]),
        ]
    );
    assert_eq!(
        rows(&mut se, "SELECT * FROM karma"),
        vec![s(&["10", "2"]), s(&["20", "1"])]
    );

    // Writes flow through: a vote, a deleted vote, a retitled article.
    ok(&mut se, "INSERT INTO vote VALUES (3, 102), (3, 103)");
    ok(&mut se, "DELETE FROM vote WHERE article_id = 2");
    ok(
        &mut se,
        "UPDATE article SET title = 'dataflow' WHERE id = 3",
    );
    assert_eq!(
        rows(
            &mut se,
            "SELECT id, title, votes FROM article_votes WHERE id = 3"
        ),
        vec![s(&["3", "dataflow", "2"])]
    );
    assert_eq!(
        rows(&mut se, "SELECT votes FROM article_votes WHERE id = 2"),
        vec![s(&["NULL"])]
    );
    assert_eq!(rows(&mut se, "SELECT * FROM karma"), vec![s(&["10", "4"])]);

    let views = rows(&mut se, "SHOW VIEWS");
    assert_eq!(views.len(), 2);
    assert!(views.iter().all(|v| v[5] == "maintained"), "{views:?}");
    assert!(
        views.iter().all(|v| v[4].parse::<u64>().unwrap() > 0),
        "{views:?}"
    );
    let plan = rows(&mut se, "EXPLAIN SELECT * FROM karma");
    assert!(plan.iter().any(|l| l[0].contains("join")), "{plan:?}");

    // The views come back after a restart, equal to before.
    let before = rows(&mut se, "SELECT * FROM article_votes");
    drop(se);
    drop(e);
    let e = engine(dir.path());
    let mut se = e.session();
    assert_eq!(rows(&mut se, "SELECT * FROM article_votes"), before);
    assert_eq!(rows(&mut se, "SELECT * FROM karma"), vec![s(&["10", "4"])]);
}

#[test]
fn views_cover_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(
        &mut se,
        "CREATE TABLE t (id integer PRIMARY KEY, g integer, x integer, name text)",
    );
    ok(&mut se, "INSERT INTO t VALUES (1, 1, 10, 'a'), (2, 1, 30, 'b'), (3, 2, 20, NULL), (4, 2, NULL, 'd')");
    ok(
        &mut se,
        "CREATE VIEW f AS SELECT id, x * 2 AS dbl FROM t WHERE x > 15 OR name IS NULL",
    );
    ok(&mut se, "CREATE VIEW agg AS SELECT g, count(*) AS n, count(x) AS nx, sum(x) AS s, min(x) AS lo, max(x) AS hi FROM t GROUP BY g HAVING count(*) > 0");
    ok(
        &mut se,
        "CREATE VIEW top2 AS SELECT id, x FROM t ORDER BY x DESC NULLS LAST, id LIMIT 2",
    );
    ok(&mut se, "CREATE VIEW d AS SELECT DISTINCT g FROM t");
    ok(
        &mut se,
        "CREATE VIEW u AS SELECT g FROM t WHERE x > 15 UNION ALL SELECT g FROM t WHERE x < 15",
    );
    ok(&mut se, "CREATE VIEW w AS WITH big AS (SELECT id, g FROM t WHERE x >= 20) SELECT g, count(*) AS n FROM big GROUP BY g");
    let check = |se: &mut Session| {
        for (view, query) in [
            ("f", "SELECT id, x * 2 AS dbl FROM t WHERE x > 15 OR name IS NULL"),
            ("agg", "SELECT g, count(*) AS n, count(x) AS nx, sum(x) AS s, min(x) AS lo, max(x) AS hi FROM t GROUP BY g HAVING count(*) > 0"),
            ("top2", "SELECT id, x FROM t ORDER BY x DESC NULLS LAST, id LIMIT 2"),
            ("d", "SELECT DISTINCT g FROM t"),
        ] {
            assert_eq!(
                rows(se, &format!("SELECT * FROM {view}")),
                rows(se, query),
                "view {view}"
            );
        }
    };
    check(&mut se);
    // Deleting the current max and the rows in the top-k window.
    ok(&mut se, "DELETE FROM t WHERE id = 2");
    ok(&mut se, "UPDATE t SET x = 5 WHERE id = 3");
    ok(
        &mut se,
        "INSERT INTO t VALUES (5, 3, 99, 'e'), (6, 1, 1, NULL)",
    );
    check(&mut se);
    assert_eq!(
        rows(&mut se, "SELECT * FROM u"),
        vec![s(&["1"]), s(&["1"]), s(&["2"]), s(&["3"])]
    );
    assert_eq!(rows(&mut se, "SELECT * FROM w"), vec![s(&["3", "1"])]);
}

#[test]
fn bad_views_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    let err = run(&mut se, "CREATE VIEW cross AS SELECT * FROM article, vote").unwrap_err();
    assert_eq!(err.code, "0A000");
    assert!(err.message.contains("unbounded"), "{err}");
    let err = run(&mut se, "CREATE VIEW nope AS SELECT * FROM missing").unwrap_err();
    assert_eq!(err.code, "42P01");
    ok(&mut se, VOTES);
    let err = run(&mut se, "DROP TABLE vote").unwrap_err();
    assert_eq!(err.code, "2BP01");
    assert_eq!(
        run(&mut se, "INSERT INTO article_votes VALUES (1)")
            .unwrap_err()
            .code,
        "42809"
    );
    ok(&mut se, "DROP VIEW article_votes");
    ok(&mut se, "DROP TABLE vote");
    assert!(rows(&mut se, "SHOW VIEWS").is_empty());
}

#[test]
fn keyed_lookups_and_prepared_reads_of_views() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20)",
    );
    ok(
        &mut se,
        "INSERT INTO vote VALUES (1, 100), (1, 101), (2, 100)",
    );
    ok(&mut se, VOTES);
    let p = se
        .prepare("SELECT title, votes FROM article_votes WHERE id = $1", &[])
        .unwrap();
    assert_eq!(p.params, vec![aqueduct_values::DataType::Int8]);
    let read = |se: &mut Session, id: i64| {
        common::prepared_rows(se, &p, &[aqueduct_values::Value::Int(id)])
    };
    assert_eq!(read(&mut se, 1), vec![s(&["a", "2"])]);
    assert_eq!(read(&mut se, 3), Vec::<Vec<String>>::new());
    // The keyed reader follows later writes too.
    ok(&mut se, "INSERT INTO vote VALUES (1, 102)");
    ok(&mut se, "INSERT INTO article VALUES (3, 'c', 10)");
    assert_eq!(read(&mut se, 1), vec![s(&["a", "3"])]);
    assert_eq!(read(&mut se, 3), vec![s(&["c", "NULL"])]);
    assert_eq!(
        rows(
            &mut se,
            "SELECT votes FROM article_votes WHERE id = 2 AND title = 'b'"
        ),
        vec![s(&["1"])]
    );
    ok(&mut se, "DROP VIEW article_votes");
    assert_eq!(
        run(&mut se, "SELECT * FROM article_votes")
            .unwrap_err()
            .code,
        "42P01"
    );
}

#[test]
fn prepared_joins_become_automatic_views() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20)",
    );
    ok(
        &mut se,
        "INSERT INTO vote VALUES (1, 100), (1, 101), (2, 100)",
    );
    // The application's query, with a join and a count: direct evaluation
    // cannot answer it, so it becomes a view keyed on its parameter.
    let q = "SELECT a.title, count(*) AS votes FROM article a JOIN vote v ON a.id = v.article_id \
             WHERE a.id = $1 GROUP BY a.id, a.title";
    let p = se.prepare(q, &[]).unwrap();
    assert_eq!(p.params, vec![aqueduct_values::DataType::Int8]);
    assert_eq!(p.columns.len(), 2);
    let read = |se: &mut Session, id: i64| {
        common::prepared_rows(se, &p, &[aqueduct_values::Value::Int(id)])
    };
    assert_eq!(read(&mut se, 1), vec![s(&["a", "2"])]);
    ok(&mut se, "INSERT INTO vote VALUES (2, 101), (2, 102)");
    assert_eq!(read(&mut se, 2), vec![s(&["b", "3"])]);
    assert!(read(&mut se, 9).is_empty());
    // Once the views reflect every write, a front end may run it inline.
    e.views.await_lsn(se.last_lsn()).unwrap();
    assert!(se.runs_without_waiting(&p));
    assert!(rows(&mut se, "SHOW VIEWS")
        .iter()
        .any(|v| v[0].starts_with("auto_")));
    // A parameter type the client declares stands (drivers send small
    // integers as int2).
    let declared = se
        .prepare(q, &[Some(aqueduct_values::DataType::Int2)])
        .unwrap();
    assert_eq!(declared.params, vec![aqueduct_values::DataType::Int2]);
    let got = common::prepared_rows(&mut se, &declared, &[aqueduct_values::Value::Int(2)]);
    assert_eq!(got[0][1], "3");
    // Mixed case and a column named like a table are still view reads.
    ok(
        &mut se,
        "CREATE VIEW TitleVotes AS SELECT title AS vote FROM article",
    );
    assert_eq!(
        rows(&mut se, "SELECT vote FROM TitleVotes WHERE vote = 'a'"),
        vec![s(&["a"])]
    );
    // Turned off, the same query is evaluated once per execution, with the
    // same answers, and no view is made.
    let views = rows(&mut se, "SHOW VIEWS").len();
    let mut plain = e.session();
    ok(&mut plain, "SET aqueduct.auto_views = off");
    let p = plain.prepare(q, &[]).unwrap();
    assert_eq!(p.params, vec![aqueduct_values::DataType::Int8]);
    let got = common::prepared_rows(&mut plain, &p, &[aqueduct_values::Value::Int(2)]);
    assert_eq!(got[0][1], "3");
    assert_eq!(rows(&mut se, "SHOW VIEWS").len(), views);
}

#[test]
fn literal_queries_share_automatic_views_and_the_rest_is_evaluated_once() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 10)",
    );
    ok(
        &mut se,
        "INSERT INTO vote VALUES (1, 100), (1, 101), (2, 100)",
    );
    let count = |se: &mut Session, id: i64| {
        rows(
            se,
            &format!(
                "SELECT a.title, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
                 WHERE a.id = {id} GROUP BY a.title"
            ),
        )
    };
    assert_eq!(count(&mut se, 1), vec![s(&["a", "2"])]);
    assert_eq!(count(&mut se, 2), vec![s(&["b", "1"])]);
    assert!(count(&mut se, 3).is_empty());
    let autos = |se: &mut Session| {
        rows(se, "SHOW VIEWS")
            .into_iter()
            .filter(|v| v[0].starts_with("auto_"))
            .count()
    };
    assert_eq!(autos(&mut se), 1, "WHERE a.id = 1 and = 2 share one view");
    let plan = common::rows(
        &mut se,
        "EXPLAIN SELECT a.title, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.id = 7 GROUP BY a.title",
    );
    assert!(
        plan[0][0].starts_with("read from automatic view"),
        "{plan:?}"
    );

    // A count without GROUP BY still answers 0 for a key with no rows
    // (evaluated once, and counted once as a SELECT).
    let selects = || e.metrics.select.load(std::sync::atomic::Ordering::Relaxed);
    let before = selects();
    assert_eq!(
        rows(
            &mut se,
            "SELECT count(*) FROM article a JOIN vote v ON a.id = v.article_id WHERE a.id = 3"
        ),
        vec![s(&["0"])]
    );
    assert_eq!(selects() - before, 1);
    // No column pinned, ORDER BY and LIMIT: evaluated once, in order.
    assert_eq!(
        common::rows(
            &mut se,
            "SELECT a.id, count(v.article_id) AS n FROM article a \
             LEFT JOIN vote v ON a.id = v.article_id GROUP BY a.id ORDER BY n DESC, a.id LIMIT 2"
        ),
        vec![s(&["1", "2"]), s(&["2", "1"])]
    );
    let plan = common::rows(
        &mut se,
        "EXPLAIN SELECT a.id FROM article a, vote v WHERE a.id = v.article_id ORDER BY a.id",
    );
    assert!(
        plan[0][0].starts_with("evaluated once through a temporary dataflow"),
        "{plan:?}"
    );
    assert!(plan.iter().any(|l| l[0].contains("join")), "{plan:?}");
    let dot = rows(
        &mut se,
        "EXPLAIN (FORMAT DOT) SELECT a.id FROM article a JOIN vote v ON a.id = v.article_id",
    );
    assert_eq!(dot.len(), 1);
    assert!(dot[0][0].starts_with("digraph"), "{dot:?}");
    let direct = common::rows(&mut se, "EXPLAIN SELECT * FROM article WHERE id = 1");
    assert!(direct[0][0].contains("primary-key lookup"), "{direct:?}");

    // Inside a transaction block the same query sees the block's own writes.
    ok(&mut se, "BEGIN");
    ok(&mut se, "INSERT INTO vote VALUES (3, 7)");
    assert_eq!(count(&mut se, 3), vec![s(&["c", "1"])]);
    ok(&mut se, "ROLLBACK");
    assert!(count(&mut se, 3).is_empty());

    // Dropping a table the automatic view reads drops the view with it.
    ok(&mut se, "DROP TABLE vote");
    assert_eq!(autos(&mut se), 0);
    ok(
        &mut se,
        "CREATE TABLE vote (article_id bigint, \"user\" bigint)",
    );
    ok(&mut se, "INSERT INTO vote VALUES (2, 5)");
    assert!(count(&mut se, 1).is_empty());
    assert_eq!(count(&mut se, 2), vec![s(&["b", "1"])]);
}

#[test]
fn views_over_views_and_dropping_what_views_depend_on() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 10)",
    );
    ok(
        &mut se,
        "CREATE VIEW per_author AS SELECT author, count(*) AS n FROM article GROUP BY author",
    );
    ok(
        &mut se,
        "CREATE VIEW histogram AS SELECT n, count(*) AS authors FROM per_author GROUP BY n",
    );
    assert_eq!(
        rows(&mut se, "SELECT * FROM histogram"),
        vec![s(&["1", "1"]), s(&["2", "1"])]
    );
    ok(&mut se, "INSERT INTO article VALUES (4, 'd', 20)");
    assert_eq!(
        rows(&mut se, "SELECT * FROM histogram"),
        vec![s(&["2", "2"])]
    );
    // A view joined with a table.
    assert_eq!(
        rows(
            &mut se,
            "SELECT a.id, p.n FROM article a JOIN per_author p ON a.author = p.author WHERE a.id = 4"
        ),
        vec![s(&["4", "2"])]
    );
    // Views are always current: REFRESH has nothing to do.
    ok(&mut se, "REFRESH MATERIALIZED VIEW histogram");
    ok(
        &mut se,
        "refresh materialized view concurrently Histogram with data;",
    );
    assert_eq!(
        run(&mut se, "REFRESH MATERIALIZED VIEW nothing")
            .unwrap_err()
            .code,
        "42P01"
    );
    let err = run(&mut se, "DROP VIEW per_author").unwrap_err();
    assert_eq!(err.code, "2BP01", "{err}");
    let err = run(&mut se, "DROP TABLE article").unwrap_err();
    assert_eq!(err.code, "2BP01", "{err}");
    ok(&mut se, "DROP TABLE article CASCADE");
    assert!(rows(&mut se, "SHOW VIEWS")
        .iter()
        .all(|v| v[0] != "per_author" && v[0] != "histogram"));
    // And after a restart nothing comes back.
    drop(se);
    drop(e);
    let e = engine(dir.path());
    let mut se = e.session();
    assert!(rows(&mut se, "SHOW VIEWS").is_empty());
    assert_eq!(
        run(&mut se, "SELECT * FROM histogram").unwrap_err().code,
        "42P01"
    );
}

#[test]
fn lookups_on_expressions_over_aggregates() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(
        &mut se,
        "CREATE TABLE tb (id bigint PRIMARY KEY, a integer, b boolean)",
    );
    ok(
        &mut se,
        "CREATE VIEW v0 AS SELECT COALESCE(count(*), 1) AS o0 FROM tb",
    );
    assert_eq!(rows(&mut se, "SELECT * FROM v0"), vec![s(&["0"])]);
    assert_eq!(
        rows(&mut se, "SELECT * FROM v0 WHERE o0 = 0"),
        vec![s(&["0"])]
    );
    ok(&mut se, "INSERT INTO tb VALUES (1, 7, true)");
    assert_eq!(
        rows(&mut se, "SELECT * FROM v0 WHERE o0 = 1"),
        vec![s(&["1"])]
    );
}

/// Commits hand their changes to the dataflow worker and return; a read must
/// still see every write committed before it. Each thread votes on its own
/// article and reads its count back at once, through a view and through an
/// automatic view, while the others write.
#[test]
fn reads_see_every_earlier_write_while_others_write() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(&mut se, VOTES);
    const THREADS: i64 = 4;
    const VOTES_EACH: i64 = 150;
    for t in 0..THREADS {
        ok(
            &mut se,
            &format!("INSERT INTO article VALUES ({t}, 'a{t}', {t})"),
        );
    }
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let e = e.clone();
            scope.spawn(move || {
                let mut se = e.session();
                let auto = se
                    .prepare(
                        "SELECT a.id, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
                         WHERE a.id = $1 GROUP BY a.id",
                        &[],
                    )
                    .unwrap();
                for n in 1..=VOTES_EACH {
                    ok(&mut se, &format!("INSERT INTO vote VALUES ({t}, {n})"));
                    let got = rows(
                        &mut se,
                        &format!("SELECT votes FROM article_votes WHERE id = {t}"),
                    );
                    assert_eq!(got, vec![vec![n.to_string()]], "thread {t}, vote {n}");
                    if n % 10 == 0 {
                        let got = common::prepared_rows(
                            &mut se,
                            &auto,
                            &[aqueduct_values::Value::Int(t)],
                        );
                        assert_eq!(got[0][1], n.to_string(), "thread {t}");
                    }
                }
            });
        }
    });
    let all = rows(&mut se, "SELECT id, votes FROM article_votes");
    assert_eq!(all.len(), THREADS as usize);
    assert!(
        all.iter().all(|r| r[1] == VOTES_EACH.to_string()),
        "{all:?}"
    );
}

/// `IN` lists and `ORDER BY ... LIMIT` in automatic views: a top-k per key,
/// merged for the keys a read asks for, equal to evaluating the query once
/// (automatic views off) after every write.
#[test]
fn automatic_views_with_in_lists_and_a_top_k_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    let mut plain = e.session();
    ok(&mut plain, "SET aqueduct.auto_views = off");
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 10), (4, 'd', 30)",
    );
    let queries = [
        "SELECT v.\"user\", a.title FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.author = 10 ORDER BY v.\"user\" DESC, a.title LIMIT 3",
        "SELECT v.\"user\", a.title FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.author IN (10, 30) ORDER BY v.\"user\", a.title LIMIT 2 OFFSET 1",
        "SELECT DISTINCT v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.id IN (1, 3, 3, 4) ORDER BY v.\"user\"",
        "SELECT a.id, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.id IN (1, 2) GROUP BY a.id",
    ];
    for step in 0..12i64 {
        ok(
            &mut se,
            &format!(
                "INSERT INTO vote VALUES ({}, {}), ({}, {})",
                step % 4 + 1,
                100 - step,
                (step * 7) % 4 + 1,
                step
            ),
        );
        if step % 3 == 2 {
            ok(
                &mut se,
                &format!("DELETE FROM vote WHERE \"user\" = {}", 100 - step),
            );
        }
        for q in queries {
            let got = common::rows(&mut se, q);
            let want = common::rows(&mut plain, q);
            if q.contains("ORDER BY") {
                assert_eq!(got, want, "step {step}: {q}");
            } else {
                let (mut g, mut w) = (got, want);
                g.sort();
                w.sort();
                assert_eq!(g, w, "step {step}: {q}");
            }
        }
    }
    let plan = common::rows(&mut se, &format!("EXPLAIN {}", queries[1]));
    assert!(
        plan[0][0].contains("one of") && plan[0][0].contains("top-k"),
        "{plan:?}"
    );
    // The IN lists of three and four values share the view.
    let autos = rows(&mut se, "SHOW VIEWS")
        .into_iter()
        .filter(|v| v[0].starts_with("auto_"))
        .count();
    assert!(autos <= 4, "{autos} automatic views");
}

/// Ranges (`>`, `<=`, `BETWEEN`, two comparisons on one column) key an
/// automatic view read in key order; NULL keys never match. Every answer
/// equals evaluating the query once (automatic views off).
#[test]
fn automatic_views_read_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    let mut plain = e.session();
    ok(&mut plain, "SET aqueduct.auto_views = off");
    let queries = [
        "SELECT a.id, v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id WHERE a.id > 2",
        "SELECT a.id, v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.author = 10 AND v.\"user\" BETWEEN 3 AND 6",
        "SELECT a.id, v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE v.\"user\" >= 2 AND v.\"user\" < 5 ORDER BY v.\"user\" DESC, a.id LIMIT 2",
        "SELECT v.\"user\", count(*) FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE v.\"user\" <= 4 GROUP BY v.\"user\"",
        "SELECT DISTINCT a.author FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.author > -1",
        // Equal rows under different keys of one range: DISTINCT across keys.
        "SELECT DISTINCT v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.id >= 0",
    ];
    for step in 0..10i64 {
        ok(
            &mut se,
            &format!(
                "INSERT INTO article VALUES ({step}, 't{step}', {})",
                if step % 4 == 3 {
                    "NULL".to_string()
                } else {
                    (step % 2 * 10).to_string()
                }
            ),
        );
        ok(
            &mut se,
            &format!(
                "INSERT INTO vote VALUES ({}, {}), ({}, NULL)",
                step / 2,
                step % 7,
                step
            ),
        );
        if step % 3 == 2 {
            ok(
                &mut se,
                &format!("DELETE FROM vote WHERE article_id = {}", step - 2),
            );
        }
        for q in queries {
            let (mut got, mut want) = (common::rows(&mut se, q), common::rows(&mut plain, q));
            if !q.contains("ORDER BY") {
                got.sort();
                want.sort();
            }
            assert_eq!(got, want, "step {step}: {q}");
        }
    }
    for q in &queries[..3] {
        let plan = common::rows(&mut se, &format!("EXPLAIN {q}"));
        assert!(plan[0][0].contains("a range"), "{plan:?}");
    }
    // A prepared range with a NULL bound matches nothing.
    let p = se
        .prepare(
            "SELECT a.id FROM article a JOIN vote v ON a.id = v.article_id WHERE a.id > $1",
            &[],
        )
        .unwrap();
    assert!(common::prepared_rows(&mut se, &p, &[aqueduct_values::Value::Null]).is_empty());
}

/// The embedded read API: rows found in place, equal to the copying lookup.
#[test]
fn embedded_lookups_read_rows_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(&mut se, VOTES);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20)",
    );
    ok(&mut se, "INSERT INTO vote VALUES (1, 7), (1, 8)");
    // Embedded reads take what the dataflow has published: wait for the
    // session's last write first to read it.
    e.views.await_lsn(se.last_lsn()).unwrap();
    let entry = e.views.get("article_votes").unwrap();
    let id = |i: i64| [aqueduct_values::Value::Int(i)];
    let mut seen = Vec::new();
    let lsn = e
        .views
        .lookup_with(
            &entry,
            &[0],
            &id(1),
            aqueduct_views::views::DEFAULT_UPQUERY_TIMEOUT,
            |r| seen.push(r.clone()),
        )
        .unwrap();
    let (copied, lsn2) = e.views.lookup(&entry, &[0], &id(1)).unwrap();
    assert_eq!(seen, copied);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0][3].to_string(), "2");
    assert!(lsn > 0 && lsn == lsn2);
}

/// `a = $1 OR b = $2` keys one automatic view read by each side, each row
/// once even when it matches both sides; equal to evaluating it once.
#[test]
fn automatic_views_read_either_side_of_an_or() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    let mut plain = e.session();
    ok(&mut plain, "SET aqueduct.auto_views = off");
    let queries = [
        "SELECT a.id, v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.author = 10 OR v.\"user\" = 3",
        "SELECT a.title, v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE (a.id = 2 OR v.\"user\" = 4) AND a.author IN (10, 20) ORDER BY v.\"user\", a.title LIMIT 3",
        "SELECT DISTINCT a.author FROM article a JOIN vote v ON a.id = v.article_id \
         WHERE a.id = 1 OR a.author = 20 OR v.\"user\" = 5",
    ];
    for step in 0..10i64 {
        ok(
            &mut se,
            &format!(
                "INSERT INTO article VALUES ({step}, 't{step}', {})",
                if step % 5 == 4 {
                    "NULL".to_string()
                } else {
                    (step % 3 * 10).to_string()
                }
            ),
        );
        ok(
            &mut se,
            &format!(
                "INSERT INTO vote VALUES ({}, {}), ({}, {}), ({step}, NULL)",
                step / 2,
                step % 6,
                (step + 1) % 4,
                (step * 5) % 7
            ),
        );
        for q in queries {
            let (mut got, mut want) = (common::rows(&mut se, q), common::rows(&mut plain, q));
            if !q.contains("ORDER BY") {
                got.sort();
                want.sort();
            }
            assert_eq!(got, want, "step {step}: {q}");
        }
    }
    for q in queries {
        let plan = common::rows(&mut se, &format!("EXPLAIN {q}"));
        assert!(plan[0][0].contains("or $"), "{plan:?}");
    }
}

/// `IN` lists on a maintained view are keyed lookups of each value; NULLs
/// in the list match nothing; the rest of the WHERE still applies.
#[test]
fn in_lists_on_views_look_up_each_value() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(&mut se, VOTES);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 10)",
    );
    ok(&mut se, "INSERT INTO vote VALUES (1, 7), (1, 8), (3, 9)");
    assert_eq!(
        rows(
            &mut se,
            "SELECT id, votes FROM article_votes WHERE id IN (1, 3, 3, NULL, 9)"
        ),
        vec![s(&["1", "2"]), s(&["3", "1"])]
    );
    assert_eq!(
        rows(
            &mut se,
            "SELECT id FROM article_votes WHERE id IN (1, 2, 3) AND author IN (10) AND votes > 1"
        ),
        vec![s(&["1"])]
    );
    let p = se
        .prepare("SELECT title FROM article_votes WHERE id IN ($1, $2)", &[])
        .unwrap();
    let got = common::prepared_rows(
        &mut se,
        &p,
        &[
            aqueduct_values::Value::Int(2),
            aqueduct_values::Value::Int(3),
        ],
    );
    let mut got = got;
    got.sort();
    assert_eq!(got, vec![s(&["b"]), s(&["c"])]);
}

/// Writers, readers that keep making automatic views, and a session that
/// creates and drops views, all at once until the writer has done a fixed
/// number of writes: nothing deadlocks (a watchdog fails the test), no
/// unexpected error, and at the end every view still equals its query
/// evaluated once.
#[test]
fn views_made_and_dropped_under_concurrent_reads_and_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(&mut se, VOTES);
    for a in 0..20 {
        ok(
            &mut se,
            &format!("INSERT INTO article VALUES ({a}, 't{a}', {})", a % 4),
        );
    }
    let stop = AtomicBool::new(false);
    // The writer's work bounds the test: the others run until it is done.
    const WRITES: i64 = 5000;
    // The watchdog: a deadlock would hang the threads below, so after 60 s
    // without the all-clear the whole test process is stopped, loudly.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_secs(60))
        {
            eprintln!("views under concurrent load: no progress in 60 s (deadlock?)");
            std::process::abort();
        }
    });
    std::thread::scope(|scope| {
        let (e, stop) = (&e, &stop);
        scope.spawn(move || {
            let mut s = e.session();
            for n in 0..WRITES {
                ok(
                    &mut s,
                    &format!("INSERT INTO vote VALUES ({}, {n})", n % 20),
                );
                if n % 7 == 0 {
                    ok(
                        &mut s,
                        &format!("DELETE FROM vote WHERE \"user\" = {}", n - 3),
                    );
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        scope.spawn(move || {
            let mut s = e.session();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                // New shapes keep making automatic views while others read.
                let q = match i % 4 {
                    0 => format!(
                        "SELECT a.id, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
                         WHERE a.id = {} GROUP BY a.id",
                        i % 20
                    ),
                    1 => format!(
                        "SELECT v.\"user\" FROM article a JOIN vote v ON a.id = v.article_id \
                         WHERE a.author IN ({}, {}) AND v.\"user\" > {}",
                        i % 4,
                        (i + 1) % 4,
                        i % 50
                    ),
                    2 => format!("SELECT * FROM article_votes WHERE id = {}", i % 20),
                    _ => format!(
                        "SELECT a.title FROM article a JOIN vote v ON a.id = v.article_id \
                         WHERE a.id = {} OR v.\"user\" = {} ORDER BY a.title LIMIT {}",
                        i % 20,
                        i,
                        1 + i % 3
                    ),
                };
                common::rows(&mut s, &q);
                i += 1;
            }
        });
        scope.spawn(move || {
            let mut s = e.session();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                ok(
                    &mut s,
                    &format!(
                        "CREATE VIEW churn{i} AS SELECT author, count(*) AS n FROM article a \
                         JOIN vote v ON a.id = v.article_id GROUP BY author"
                    ),
                );
                common::rows(&mut s, &format!("SELECT * FROM churn{i} WHERE author = 1"));
                ok(&mut s, &format!("DROP VIEW churn{i}"));
                i += 1;
            }
        });
    });
    done_tx.send(()).unwrap();
    // Every view equals its query evaluated once.
    let mut plain = e.session();
    ok(&mut plain, "SET aqueduct.auto_views = off");
    let direct = "SELECT a.id, a.title, a.author, v.votes FROM article a \
         LEFT JOIN (SELECT article_id, count(*) AS votes FROM vote GROUP BY article_id) v \
         ON a.id = v.article_id";
    assert_eq!(
        rows(&mut se, "SELECT * FROM article_votes"),
        rows(&mut plain, direct)
    );
    let q = "SELECT a.id, count(*) FROM article a JOIN vote v ON a.id = v.article_id \
             WHERE a.id = 3 GROUP BY a.id";
    assert_eq!(rows(&mut se, q), rows(&mut plain, q));
}

/// Prepared keyed reads of a view (planned once, then one lookup per run)
/// answer what the general path answers over the view, and what the view's
/// query answers over the base tables, while votes come and go.
#[test]
fn prepared_keyed_view_reads_equal_the_query_over_the_tables() {
    use aqueduct_values::Value;
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(&mut se, VOTES);
    let mut oracle = e.session();
    ok(&mut oracle, "SET aqueduct.auto_views = off");
    // (prepared text, the same read with `{id}` and `{author}` spelled out).
    let shapes = [
        (
            "SELECT title, votes FROM article_votes WHERE id = $1",
            "SELECT title, votes FROM article_votes WHERE id = {id}",
        ),
        (
            "SELECT * FROM article_votes WHERE id = $1",
            "SELECT * FROM article_votes WHERE id = {id}",
        ),
        (
            "SELECT v.votes AS n, v.title FROM article_votes v WHERE $1 = v.id",
            "SELECT votes, title FROM article_votes WHERE id = {id}",
        ),
        (
            "SELECT title FROM article_votes WHERE id = $1 AND author = $2",
            "SELECT title FROM article_votes WHERE id = {id} AND author = {author}",
        ),
        (
            "SELECT votes FROM article_votes WHERE author = 10 AND id = $1",
            "SELECT votes FROM article_votes WHERE author = 10 AND id = {id}",
        ),
    ];
    let prepared: Vec<_> = shapes
        .iter()
        .map(|(sql, _)| {
            let p = se.prepare(sql, &[]).unwrap();
            assert!(p.quick, "{sql}: planned as a keyed view read");
            p
        })
        .collect();
    assert_eq!(prepared[2].columns[0].name, "n");
    assert_eq!(prepared[3].params.len(), 2);
    let definition = "SELECT a.id, a.title, a.author, v.votes FROM article a \
         LEFT JOIN (SELECT article_id, count(*) AS votes FROM vote GROUP BY article_id) v \
         ON a.id = v.article_id";
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut user = 0;
    for step in 0..300 {
        let id: i64 = rng.gen_range(0..12);
        match rng.gen_range(0..10) {
            0 => {
                let author = rng.gen_range(10..12);
                let _ = run(
                    &mut se,
                    &format!("INSERT INTO article VALUES ({id}, 't{step}', {author})"),
                );
            }
            1 => ok(
                &mut se,
                &format!("DELETE FROM vote WHERE article_id = {id}"),
            ),
            2 => ok(&mut se, &format!("DELETE FROM article WHERE id = {id}")),
            3..=6 => {
                user += 1;
                ok(&mut se, &format!("INSERT INTO vote VALUES ({id}, {user})"));
            }
            _ => {}
        }
        let author: i64 = rng.gen_range(10..12);
        for (p, (_, spelled)) in prepared.iter().zip(&shapes) {
            let params: Vec<Value> =
                [Value::Int(id), Value::Int(author)][..p.params.len()].to_vec();
            let mut got = common::prepared_rows(&mut se, p, &params);
            got.sort();
            let general = spelled
                .replace("{id}", &id.to_string())
                .replace("{author}", &author.to_string());
            assert_eq!(got, rows(&mut se, &general), "{}", p.sql);
            let over_tables = general.replace("article_votes", &format!("({definition}) q"));
            assert_eq!(got, rows(&mut oracle, &over_tables), "{}", p.sql);
        }
    }
    // `id = NULL` holds for no row.
    assert!(common::prepared_rows(&mut se, &prepared[0], &[Value::Null]).is_empty());
    // A view made again under the same name with other columns: the plan is
    // stale and the statement is answered the general way.
    ok(&mut se, "DROP VIEW article_votes");
    ok(
        &mut se,
        "CREATE VIEW article_votes AS SELECT id, author AS title, title AS votes FROM article",
    );
    ok(&mut se, "INSERT INTO article VALUES (100, 'hundred', 11)");
    assert_eq!(
        common::prepared_rows(&mut se, &prepared[0], &[Value::Int(100)]),
        vec![s(&["11", "hundred"])]
    );
}

/// A prepared query that aggregates without GROUP BY answers one row even
/// for a key with no rows (counts of zero, sums of NULL): the same row the
/// query gives when evaluated once over the tables, for keys with and
/// without rows, while rows for them come and go.
#[test]
fn global_aggregates_answer_keys_without_rows() {
    use aqueduct_values::Value;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut se = e.session();
    ok(&mut se, SCHEMA);
    ok(
        &mut se,
        "INSERT INTO article VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 30)",
    );
    ok(
        &mut se,
        "INSERT INTO vote VALUES (1, 100), (1, 101), (2, 100)",
    );
    let mut oracle = e.session();
    ok(&mut oracle, "SET aqueduct.auto_views = off");
    let queries = [
        "SELECT count(*) FROM article a JOIN vote v ON a.id = v.article_id WHERE a.author = $1",
        "SELECT count(*) + 1, sum(v.\"user\"), max(a.title) FROM article a JOIN vote v ON a.id = v.article_id WHERE a.author = $1",
        "SELECT coalesce(sum(v.\"user\"), 0) AS total FROM vote v WHERE v.article_id = $1",
        "SELECT count(*) FROM vote WHERE article_id = $1 HAVING count(*) < 2",
    ];
    let prepared: Vec<_> = queries
        .iter()
        .map(|q| se.prepare(q, &[]).unwrap())
        .collect();
    let check = |se: &mut Session, oracle: &mut Session| {
        for (q, p) in queries.iter().zip(&prepared) {
            for key in [1i64, 2, 3, 10, 20, 30, 99] {
                let got = common::prepared_rows(se, p, &[Value::Int(key)]);
                let want = rows(oracle, &q.replace("$1", &key.to_string()));
                assert_eq!(got, want, "{q} with $1 = {key}");
            }
        }
    };
    check(&mut se, &mut oracle);
    ok(
        &mut se,
        "INSERT INTO vote VALUES (3, 102), (3, 103), (3, 104)",
    );
    ok(&mut se, "DELETE FROM vote WHERE article_id = 1");
    check(&mut se, &mut oracle);
    ok(&mut se, "DELETE FROM vote");
    check(&mut se, &mut oracle);
}
