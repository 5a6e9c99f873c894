//! The schema records added for migrations survive kill -9: an enum type
//! and a label added later, an index on an expression, a primary key
//! added to a table with rows, a sequence altered, a table renamed under
//! a view, a deferrable foreign key. After the restart every one still
//! acts: the oracle is PostgreSQL's behaviour, written out below.

use crate::common;

use common::{connect, serve};

/// The text of each row of `sql`'s result, columns joined by spaces.
async fn rows(c: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("NULL").to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        })
        .collect()
}

async fn fails_with(c: &tokio_postgres::Client, sql: &str, code: &str) {
    let e = c
        .simple_query(sql)
        .await
        .expect_err(&format!("{sql} should fail"));
    assert_eq!(e.code().map(|s| s.code()), Some(code), "{sql}: {e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_schema_records_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = serve(dir.path(), &[]);
        let c = connect(server.pg).await;
        c.batch_execute(
            "CREATE TYPE mood AS ENUM ('sad', 'happy'); \
             CREATE TABLE people (id int PRIMARY KEY, email text, feeling mood); \
             INSERT INTO people VALUES (1, 'Ann@x.org', 'happy'), (2, 'bob@x.org', 'sad'); \
             ALTER TYPE mood ADD VALUE 'ok' BEFORE 'happy'; \
             INSERT INTO people VALUES (3, 'cy@x.org', 'ok'); \
             CREATE UNIQUE INDEX people_email ON people (lower(email)); \
             CREATE TABLE loaded (id int, v text); \
             INSERT INTO loaded VALUES (1, 'a'), (2, 'b'); \
             ALTER TABLE loaded ADD PRIMARY KEY (id); \
             CREATE SEQUENCE tickets; \
             SELECT nextval('tickets'); \
             ALTER SEQUENCE tickets RESTART WITH 500 INCREMENT BY 5; \
             CREATE TABLE orders (id int PRIMARY KEY, total int); \
             CREATE VIEW big AS SELECT orders.id FROM orders WHERE orders.total > 10; \
             ALTER TABLE orders RENAME TO purchases; \
             INSERT INTO purchases VALUES (1, 20), (2, 5); \
             CREATE TABLE kids (id int PRIMARY KEY, parent int REFERENCES loaded DEFERRABLE INITIALLY DEFERRED)",
        )
        .await
        .unwrap();
        server.process.kill9();
    }
    let server = serve(dir.path(), &[]);
    let c = connect(server.pg).await;
    assert_eq!(
        rows(&c, "SELECT id FROM people ORDER BY feeling").await,
        ["2", "3", "1"]
    );
    fails_with(
        &c,
        "INSERT INTO people VALUES (4, 'ANN@X.ORG', 'ok')",
        "23505",
    )
    .await;
    fails_with(
        &c,
        "INSERT INTO people VALUES (4, 'd@x.org', 'glad')",
        "22P02",
    )
    .await;
    fails_with(&c, "INSERT INTO loaded VALUES (2, 'again')", "23505").await;
    assert_eq!(
        rows(&c, "SELECT id, v FROM loaded WHERE id = 2").await,
        ["2 b"]
    );
    assert_eq!(
        rows(&c, "SELECT nextval('tickets'), nextval('tickets')").await,
        ["500 505"]
    );
    assert_eq!(rows(&c, "SELECT id FROM big").await, ["1"]);
    c.batch_execute("INSERT INTO purchases VALUES (3, 30)")
        .await
        .unwrap();
    let mut big = rows(&c, "SELECT id FROM big").await;
    big.sort();
    assert_eq!(big, ["1", "3"]);
    c.batch_execute(
        "BEGIN; INSERT INTO kids VALUES (1, 9); INSERT INTO loaded VALUES (9, 'late'); COMMIT",
    )
    .await
    .unwrap();
    fails_with(&c, "INSERT INTO kids VALUES (2, 10)", "23503").await;
}
