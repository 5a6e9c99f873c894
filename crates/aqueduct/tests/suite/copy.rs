//! `COPY` over the wire against PostgreSQL 15: the same data loaded into
//! the built server and a throwaway PostgreSQL cluster (the helper of
//! `crates/sql/tests/common/postgres.rs`) through `COPY ... FROM STDIN` in
//! text, CSV with a header and binary (tokio-postgres' `copy_in` and
//! `binary_copy`, so over the extended protocol, in chunks that cut rows
//! apart), then `COPY ... TO STDOUT` in text, CSV and binary compared byte
//! for byte, and the rows compared with `SELECT`; bad rows fail with
//! PostgreSQL's SQLSTATE and leave the table as it was, a COPY inside
//! `BEGIN ... ROLLBACK` leaves nothing, a CopyFail writes nothing.
//!
//! Without PostgreSQL's server programs the test is skipped, unless
//! `AQUEDUCT_REQUIRE_POSTGRES` is set.

use crate::common;
#[path = "../../../sql/tests/common/postgres.rs"]
mod postgres_cluster;

use bytes::Bytes;
use futures::{pin_mut, SinkExt, TryStreamExt};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

use postgres_cluster::Postgres;

const SCHEMA: &str = "CREATE TABLE items (
    id serial PRIMARY KEY,
    n int NOT NULL UNIQUE,
    t text,
    b bytea,
    a text[],
    j jsonb,
    ts timestamp,
    amount numeric,
    flag boolean,
    note text DEFAULT 'none'
)";

/// The copied columns (`id` and `note` take their defaults).
const COLUMNS: &str = "n, t, b, a, j, ts, amount, flag";

/// Text-format rows: escapes, NULLs, empty strings, arrays, jsonb.
const TEXT_ROWS: &str = "1\tplain\t\\\\x00ff\t{a,\"b c\",NULL}\t{\"k\": [1, \"x\"]}\t2024-02-29 12:34:56.789\t-12345.6789\tt
2\t\t\\N\t{}\t\\N\t\\N\t0\tf
3\ttab\\there\\nnew\\\\line\\r\\b\\f\\v end\t\\\\x\t\\N\t\"s\"\t1999-12-31 23:59:59\t0.0000000001\t\\N
4\t\\\\.\t\\N\t{\"\\\\\\\\\"}\t[1, 2.50, null]\t\\N\t1e3\t\\N
";

/// CSV rows under a header: quotes, delimiters and newlines inside
/// values, empty string against NULL.
const CSV_ROWS: &str = "n,t,b,a,j,ts,amount,flag
10,\"x,y\",\\x41,\"{\"\"q,r\"\"}\",\"{\"\"a\"\": \"\"b,c\"\"}\",2000-01-01 00:00:00,1.50,true
11,\"\",,,,,,
12,\"two
lines\",,{},,,,false
13,\"say \"\"hi\"\"\",\\x,\"{NULL,\"\"\"\"}\",,,-0.5,
";

/// The statements whose output is compared byte for byte.
const OUTPUTS: &[&str] = &[
    "COPY items TO STDOUT",
    "COPY items TO STDOUT (FORMAT csv, HEADER, FORCE_QUOTE *)",
    "COPY items (id, t, note) TO STDOUT WITH CSV HEADER",
    "COPY (SELECT id, n, t, b FROM items WHERE n > 1 ORDER BY n DESC) TO STDOUT (FORMAT csv, FORCE_QUOTE (t), NULL 'nil')",
    "COPY items TO STDOUT (DELIMITER '|', NULL '', HEADER)",
    "COPY items TO STDOUT (FORMAT binary)",
];

/// Outputs compared once failed COPYs took sequence values: PostgreSQL
/// takes a row's default as it reads the row, Aqueduct once the data
/// ended, so their `id`s differ after a failure (a sequence promises no
/// values without gaps).
const OUTPUTS_WITHOUT_IDS: &[&str] = &[
    "COPY (SELECT n, t, b, a, j, ts, amount, flag, note FROM items ORDER BY n) TO STDOUT",
    "COPY (SELECT n, t, b, a, j, ts, amount, flag, note FROM items ORDER BY n) TO STDOUT (FORMAT csv, HEADER, FORCE_QUOTE *)",
    "COPY (SELECT n, t, b, a, j, ts, amount, flag, note FROM items ORDER BY n) TO STDOUT (FORMAT binary)",
];

/// Both servers' clients.
struct Both {
    aqueduct: Client,
    postgres: Client,
}

/// Loads `data` through `sql` (COPY ... FROM STDIN) in chunks of `chunk`
/// bytes; the number of rows, or the error.
async fn copy_in(client: &Client, sql: &str, data: &[u8], chunk: usize) -> Result<u64, String> {
    let load = async {
        let sink = client.copy_in(sql).await?;
        pin_mut!(sink);
        for part in data.chunks(chunk) {
            sink.send(Bytes::copy_from_slice(part)).await?;
        }
        sink.finish().await
    };
    load.await
        .map_err(|e: tokio_postgres::Error| match e.as_db_error() {
            Some(db) => {
                let context = db.where_().map(|w| format!(" / {w}")).unwrap_or_default();
                format!("{}: {}{context}", db.code().code(), db.message())
            }
            None => e.to_string(),
        })
}

/// The bytes `COPY ... TO STDOUT` sends.
async fn copy_out(client: &Client, sql: &str) -> Vec<u8> {
    let stream = client
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let chunks: Vec<Bytes> = stream.try_collect().await.unwrap();
    chunks.concat()
}

/// A query's rows in text form (the simple protocol).
async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// A row for the binary load: n, t, b, flag.
type BinaryRow<'a> = (i32, Option<&'a str>, Option<&'a [u8]>, bool);

/// Rows through tokio-postgres' binary COPY writer.
async fn binary_load(client: &Client, chunk_rows: &[BinaryRow<'_>]) {
    let sink = client
        .copy_in("COPY items (n, t, b, flag) FROM STDIN (FORMAT binary)")
        .await
        .unwrap();
    let writer = BinaryCopyInWriter::new(sink, &[Type::INT4, Type::TEXT, Type::BYTEA, Type::BOOL]);
    pin_mut!(writer);
    for (n, t, b, flag) in chunk_rows {
        let row: [&(dyn ToSql + Sync); 4] = [n, t, b, flag];
        writer.as_mut().write(&row).await.unwrap();
    }
    writer.finish().await.unwrap();
}

impl Both {
    /// Runs `sql` on both; both must succeed.
    async fn exec(&self, sql: &str) {
        self.aqueduct
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("aqueduct: {sql}: {e:?}"));
        self.postgres
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("postgres: {sql}: {e:?}"));
    }

    /// Loads `data` into both; both must give the same row count, or the
    /// same error: SQLSTATE, message and CONTEXT.
    async fn copy_in(
        &self,
        sql: &str,
        data: impl AsRef<[u8]>,
        chunk: usize,
    ) -> Result<u64, String> {
        let data = data.as_ref();
        let a = copy_in(&self.aqueduct, sql, data, chunk).await;
        let mut p = copy_in(&self.postgres, sql, data, chunk).await;
        // For a constraint a row breaks, PostgreSQL's CONTEXT also quotes
        // the line (`COPY t, line 3: "..."`); Aqueduct checks constraints
        // once the data ended and has only the line's number then.
        if let (Err(a), Err(p)) = (&a, &mut p) {
            if a.starts_with("23") && p.starts_with(a.as_str()) && p[a.len()..].starts_with(": \"")
            {
                p.truncate(a.len());
            }
        }
        assert_eq!(a, p, "{sql} (aqueduct, then postgres)");
        a
    }

    /// The same rows from both.
    async fn same_rows(&self, sql: &str) -> usize {
        let a = rows(&self.aqueduct, sql).await;
        let p = rows(&self.postgres, sql).await;
        assert_eq!(a, p, "{sql} (aqueduct, then postgres)");
        a.len()
    }

    /// The same COPY output from both, byte for byte.
    async fn same_copy_out(&self, sql: &str) {
        let a = copy_out(&self.aqueduct, sql).await;
        let p = copy_out(&self.postgres, sql).await;
        assert!(
            a == p,
            "{sql}\naqueduct: {:?}\npostgres: {:?}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&p)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_matches_postgres() {
    let Some(cluster) = Postgres::start_or_skip() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let server = common::serve(&data.path().join("data"), &[]);
    let mut config = tokio_postgres::Config::new();
    config
        .host_path(cluster.dir.path())
        .user("postgres")
        .dbname("postgres");
    let (postgres, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let both = Both {
        aqueduct: common::connect(server.pg).await,
        postgres,
    };
    both.exec("SET TIME ZONE 'UTC'").await;
    both.exec(SCHEMA).await;

    // Text, in pieces that cut rows and escapes apart.
    let copy_text = format!("COPY items ({COLUMNS}) FROM STDIN");
    assert_eq!(both.copy_in(&copy_text, TEXT_ROWS, 7).await, Ok(4));
    // CSV with a header, pre-9.0 syntax too.
    let csv = format!("COPY items ({COLUMNS}) FROM STDIN (FORMAT csv, HEADER true)");
    assert_eq!(both.copy_in(&csv, CSV_ROWS, 5).await, Ok(4));
    let old_csv = format!("COPY items ({COLUMNS}) FROM STDIN WITH CSV HEADER");
    let more = CSV_ROWS.replace("\n1", "\n2");
    assert_eq!(both.copy_in(&old_csv, &more, 1000).await, Ok(4));
    // Binary, through tokio-postgres' writer.
    let binary: &[BinaryRow<'_>] = &[
        (30, Some("bin\t\\"), Some(&[0, 1, 255]), true),
        (31, None, None, false),
        (32, Some(""), Some(&[]), true),
    ];
    binary_load(&both.aqueduct, binary).await;
    binary_load(&both.postgres, binary).await;

    let all = "SELECT * FROM items ORDER BY id";
    let without_ids = "SELECT n, t, b, a, j, ts, amount, flag, note FROM items ORDER BY n";
    assert_eq!(both.same_rows(all).await, 15);
    for sql in OUTPUTS {
        both.same_copy_out(sql).await;
    }

    // A bad third row of five fails the whole COPY as PostgreSQL fails it,
    // and nothing of it is written.
    let five = |third: &str| format!("100\ta\n101\tb\n{third}\n103\td\n104\te\n");
    let two = "COPY items (n, t) FROM STDIN";
    for (third, code) in [
        ("abc\tc", "22P02"),
        ("102", "22P04"),
        ("102\tc\textra", "22P04"),
        ("\\N\tc", "23502"),
        ("1\tc", "23505"),
        ("100\tc", "23505"),
        ("99999999999\tc", "22003"),
        ("102\tc\rd", "22P04"),
    ] {
        let e = both.copy_in(two, &five(third), 4).await.unwrap_err();
        assert!(e.starts_with(&format!("{code}: ")), "{third:?}: {e}");
        assert_eq!(
            both.same_rows(without_ids).await,
            15,
            "after a bad {third:?}"
        );
    }
    let e = both
        .aqueduct
        .copy_in::<_, Bytes>(two)
        .await
        .map(|_| ())
        .err();
    assert!(e.is_none(), "a COPY after failed ones starts: {e:?}");

    // Inside a transaction block the COPY is the block's.
    both.exec("BEGIN").await;
    assert_eq!(both.copy_in(two, "200\tx\n201\ty\n", 3).await, Ok(2));
    assert_eq!(both.same_rows(without_ids).await, 17);
    both.exec("ROLLBACK").await;
    assert_eq!(both.same_rows(without_ids).await, 15);
    both.exec("BEGIN").await;
    assert_eq!(both.copy_in(two, "200\tx\n", 3).await, Ok(1));
    both.exec("COMMIT").await;
    assert_eq!(both.same_rows(without_ids).await, 16);

    // A CopyFail (tokio-postgres sends one when the sink is dropped)
    // writes nothing, and the connection goes on.
    for client in [&both.aqueduct, &both.postgres] {
        let sink = client.copy_in::<_, Bytes>(two).await.unwrap();
        pin_mut!(sink);
        sink.send(Bytes::from_static(b"300\tgone\n")).await.unwrap();
    }
    assert_eq!(both.same_rows(without_ids).await, 16);

    for sql in OUTPUTS_WITHOUT_IDS {
        both.same_copy_out(sql).await;
    }

    // More kinds of value, each format both ways.
    both.exec(
        "CREATE TABLE kinds (id int PRIMARY KEY, f4 real, f8 double precision, d date, \
         iv interval, u uuid, vc varchar(5), js json, i2 smallint, i8 bigint, tz timestamptz, \
         ia int[])",
    )
    .await;
    let kinds = "1\t0.1\t-1.5e300\t2024-02-29\t1 year 2 mons 3 days 04:05:06.5\ta0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\tabc\t{\"x\": [1, 2]}\t-32768\t9223372036854775807\t2024-01-02 03:04:05.678+00\t{1,NULL,-3}
2\t\\N\tNaN\t1970-01-01\t-00:00:01\t\\N\t\t[]\t0\t-1\t1999-12-31 23:59:59+00\t{}
3\t-Infinity\t0\t0001-01-01\t0\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N
";
    assert_eq!(
        both.copy_in("COPY kinds FROM STDIN", kinds, 11).await,
        Ok(3)
    );
    for format in ["text", "csv", "binary"] {
        let out = format!("COPY kinds TO STDOUT (FORMAT {format})");
        both.same_copy_out(&out).await;
        let data = copy_out(&both.postgres, &out).await;
        both.exec("DELETE FROM kinds").await;
        // PostgreSQL's own output loads back into both.
        let load = format!("COPY kinds FROM STDIN (FORMAT {format})");
        assert_eq!(both.copy_in(&load, &data, 13).await, Ok(3));
        both.same_copy_out(&out).await;
    }
    both.same_rows("SELECT * FROM kinds ORDER BY id").await;

    // From or to a file is refused as PostgreSQL refuses a role without
    // pg_read_server_files (here Aqueduct's only: the cluster's user is a
    // superuser).
    let e = both
        .aqueduct
        .batch_execute("COPY items FROM '/etc/passwd'")
        .await
        .unwrap_err();
    assert_eq!(e.code().unwrap().code(), "42501");
}
