//! Queries through the wire protocol with tokio-postgres and a raw client:
//! simple and extended protocols, every type in text and binary, portals,
//! transactions, errors, LSN reports and abandoned transactions.

use crate::common;

use std::str::FromStr;

use aqueduct_pg::PgConfig;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use common::*;
use rust_decimal::Decimal;
use tokio::io::AsyncWriteExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

const ALL_TYPES: &str = "CREATE TABLE all_types (id bigint PRIMARY KEY, i2 smallint, i4 integer, \
     i8 bigint, f4 real, f8 double precision, n numeric, b boolean, t text, vc varchar(20), \
     by bytea, ts timestamp, tz timestamptz, d date, u uuid, j json, jb jsonb)";

fn rows_of(msgs: Vec<SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    msgs.into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_query_protocol() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        let msgs = client
            .simple_query(
                "CREATE TABLE t (id integer PRIMARY KEY, v text); \
                 INSERT INTO t VALUES (1, 'a'), (2, NULL); \
                 SELECT id, v FROM t ORDER BY id",
            )
            .await
            .unwrap();
        let completes: Vec<u64> = msgs
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(completes, vec![0, 2, 2]);
        assert_eq!(
            rows_of(msgs),
            vec![
                vec![Some("1".into()), Some("a".into())],
                vec![Some("2".into()), None]
            ]
        );

        // The raw view: descriptions, tags, and the empty query.
        let mut raw = Raw::connect(server.addr).await;
        let reply = raw.query("SELECT id FROM t WHERE id = 1").await;
        assert_eq!(tags(&reply), "TDCZ");
        assert_eq!(reply[1].columns(), vec![Some(b"1".to_vec())]);
        assert_eq!(reply[2].body, b"SELECT 1\0");
        assert_eq!(tags(&raw.query("").await), "IZ");
        assert_eq!(tags(&raw.query(" ; ").await), "IZ");
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_binary_through_tokio_postgres() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        client.batch_execute(ALL_TYPES).await.unwrap();
        let insert = client
            .prepare(
                "INSERT INTO all_types VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
            )
            .await
            .unwrap();
        let ts = NaiveDateTime::parse_from_str("1999-12-31 23:59:58.123456", "%Y-%m-%d %H:%M:%S%.f").unwrap();
        let tz: DateTime<Utc> = DateTime::parse_from_rfc3339("2024-02-29T12:34:56.5+02:00")
            .unwrap()
            .with_timezone(&Utc);
        let d = NaiveDate::from_ymd_opt(1969, 7, 20).unwrap();
        let u = uuid::Uuid::from_str("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11").unwrap();
        let j = serde_json::json!({"a": [1, 2, {"b": null}]});
        let n = Decimal::from_str("-12345.678900").unwrap();
        let bytes = vec![0u8, 1, 2, 255];
        let inserted = client
            .execute(
                &insert,
                &[
                    &1i64, &-32768i16, &2147483647i32, &i64::MIN, &0.1f32, &-1.5e300f64, &n, &true,
                    &"héllo", &"varchar", &bytes, &ts, &tz, &d, &u, &j, &j,
                ],
            )
            .await
            .unwrap();
        assert_eq!(inserted, 1);
        // All NULLs.
        client
            .execute(
                &insert,
                &[
                    &2i64,
                    &None::<i16>,
                    &None::<i32>,
                    &None::<i64>,
                    &None::<f32>,
                    &None::<f64>,
                    &None::<Decimal>,
                    &None::<bool>,
                    &None::<String>,
                    &None::<String>,
                    &None::<Vec<u8>>,
                    &None::<NaiveDateTime>,
                    &None::<DateTime<Utc>>,
                    &None::<NaiveDate>,
                    &None::<uuid::Uuid>,
                    &None::<serde_json::Value>,
                    &None::<serde_json::Value>,
                ],
            )
            .await
            .unwrap();

        let select = client
            .prepare("SELECT i2, i4, i8, f4, f8, n, b, t, vc, by, ts, tz, d, u, j, jb FROM all_types WHERE id = $1")
            .await
            .unwrap();
        let row = client.query_one(&select, &[&1i64]).await.unwrap();
        assert_eq!(row.get::<_, i16>(0), -32768);
        assert_eq!(row.get::<_, i32>(1), 2147483647);
        assert_eq!(row.get::<_, i64>(2), i64::MIN);
        assert_eq!(row.get::<_, f32>(3), 0.1f32);
        assert_eq!(row.get::<_, f64>(4), -1.5e300);
        assert_eq!(row.get::<_, Decimal>(5), n);
        assert_eq!(row.get::<_, Decimal>(5).scale(), 6);
        assert!(row.get::<_, bool>(6));
        assert_eq!(row.get::<_, String>(7), "héllo");
        assert_eq!(row.get::<_, String>(8), "varchar");
        assert_eq!(row.get::<_, Vec<u8>>(9), bytes);
        assert_eq!(row.get::<_, NaiveDateTime>(10), ts);
        assert_eq!(row.get::<_, DateTime<Utc>>(11), tz);
        assert_eq!(row.get::<_, NaiveDate>(12), d);
        assert_eq!(row.get::<_, uuid::Uuid>(13), u);
        assert_eq!(row.get::<_, serde_json::Value>(14), j);
        assert_eq!(row.get::<_, serde_json::Value>(15), j);

        let row = client.query_one(&select, &[&2i64]).await.unwrap();
        for i in 0..row.len() {
            let v: Option<String> = match row.columns()[i].type_() {
                t if *t == tokio_postgres::types::Type::TEXT
                    || *t == tokio_postgres::types::Type::VARCHAR =>
                {
                    row.get(i)
                }
                _ => continue,
            };
            assert_eq!(v, None);
        }
        assert_eq!(row.get::<_, Option<i64>>(2), None);
        assert_eq!(row.get::<_, Option<uuid::Uuid>>(13), None);

        // The same row in text, as the simple protocol sends it.
        let text = rows_of(
            client
                .simple_query("SELECT i2, i4, f4, n, b, by, ts, tz, d, u FROM all_types WHERE id = 1")
                .await
                .unwrap(),
        );
        assert_eq!(
            text[0],
            [
                "-32768",
                "2147483647",
                "0.1",
                "-12345.678900",
                "t",
                "\\x000102ff",
                "1999-12-31 23:59:58.123456",
                "2024-02-29 10:34:56.5+00",
                "1969-07-20",
                "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
            ]
            .map(|s| Some(s.to_string()))
        );

        // Numerics across magnitudes and scales survive the binary round trip.
        client
            .batch_execute("CREATE TABLE nums (id integer PRIMARY KEY, n numeric)")
            .await
            .unwrap();
        let values = [
            "0", "0.00", "1", "-1", "10000", "9999.9999", "0.0001", "0.00001", "123456789012345678.1234567891",
            "-79228162514264337593543950335", "7922816251426433759354395033.5", "1e-28",
        ];
        let ins = client.prepare("INSERT INTO nums VALUES ($1, $2)").await.unwrap();
        for (i, v) in values.iter().enumerate() {
            let d = Decimal::from_str(v).or_else(|_| Decimal::from_scientific(v)).unwrap();
            client.execute(&ins, &[&(i as i32), &d]).await.unwrap();
            let back: Decimal = client
                .query_one("SELECT n FROM nums WHERE id = $1", &[&(i as i32)])
                .await
                .unwrap()
                .get(0);
            assert_eq!(back, d, "{v}");
            // tokio-postgres (rust_decimal) sends every zero with scale 0.
            if !d.is_zero() {
                assert_eq!(back.to_string(), d.to_string(), "{v}");
            }
        }
    })
    .await;
    server.stop().await.unwrap();
}

/// Text-format parameters and results in the extended protocol, and a
/// binary column among text ones, spoken byte by byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_text_in_extended_protocol() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let mut raw = Raw::connect(server.addr).await;
        assert_eq!(ready_status(&raw.query(ALL_TYPES).await), b'I');
        let values = [
            "10",
            "-7",
            "42",
            "9000000000",
            "1.5",
            "-0.25",
            "3.14159",
            "true",
            "text 'quoted'",
            "short",
            "\\xdeadbeef",
            "2024-01-02 03:04:05.25",
            "2024-01-02 03:04:05+02",
            "2024-02-29",
            "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
            "{\"k\": [1, 2]}",
            "[true, null]",
        ];
        let mut parse = cstr("ins");
        parse.extend(cstr(
            "INSERT INTO all_types VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        ));
        parse.extend(0u16.to_be_bytes());
        let mut bind = cstr("");
        bind.extend(cstr("ins"));
        bind.extend(0u16.to_be_bytes()); // all parameters in text
        bind.extend((values.len() as u16).to_be_bytes());
        for v in values {
            bind.extend((v.len() as i32).to_be_bytes());
            bind.extend(v.as_bytes());
        }
        bind.extend(0u16.to_be_bytes());
        let mut batch = msg(b'P', &parse);
        batch.extend(msg(b'B', &bind));
        batch.extend(msg(b'E', &[cstr(""), 0i32.to_be_bytes().to_vec()].concat()));
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(tags(&reply), "12CSZ", "{reply:?}");
        assert_eq!(reply[2].body, b"INSERT 0 1\0");

        // Read back: text results, except i4 (third column) in binary.
        let mut parse = cstr("sel");
        parse.extend(cstr(
            "SELECT i2, i4, i8, f4, f8, n, b, t, vc, by, ts, tz, d, u, j, jb FROM all_types WHERE id = $1",
        ));
        parse.extend(1u16.to_be_bytes());
        parse.extend(20u32.to_be_bytes()); // declared int8
        let mut bind = cstr("p1");
        bind.extend(cstr("sel"));
        bind.extend(0u16.to_be_bytes());
        bind.extend(1u16.to_be_bytes());
        bind.extend(2i32.to_be_bytes());
        bind.extend(b"10");
        bind.extend(16u16.to_be_bytes());
        for i in 0..16 {
            bind.extend(i16::from(i == 1).to_be_bytes());
        }
        let mut describe = vec![b'P'];
        describe.extend(cstr("p1"));
        let mut batch = msg(b'P', &parse);
        batch.extend(msg(b'B', &bind));
        batch.extend(msg(b'D', &describe));
        batch.extend(msg(b'E', &[cstr("p1"), 0i32.to_be_bytes().to_vec()].concat()));
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(tags(&reply), "12TDCZ", "{reply:?}");
        let cols = reply[3].columns();
        let text = |i: usize| String::from_utf8(cols[i].clone().unwrap()).unwrap();
        assert_eq!(text(0), "-7");
        assert_eq!(cols[1].as_deref(), Some(&42i32.to_be_bytes()[..]));
        assert_eq!(text(2), "9000000000");
        assert_eq!(text(3), "1.5");
        assert_eq!(text(4), "-0.25");
        assert_eq!(text(5), "3.14159");
        assert_eq!(text(6), "t");
        assert_eq!(text(7), "text 'quoted'");
        assert_eq!(text(8), "short");
        assert_eq!(text(9), "\\xdeadbeef");
        assert_eq!(text(10), "2024-01-02 03:04:05.25");
        assert_eq!(text(11), "2024-01-02 01:04:05+00");
        assert_eq!(text(12), "2024-02-29");
        assert_eq!(text(13), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
        let json = |i: usize| serde_json::from_str::<serde_json::Value>(&text(i)).unwrap();
        assert_eq!(json(14), serde_json::json!({"k": [1, 2]}));
        assert_eq!(json(15), serde_json::json!([true, null]));
        // The description reports types, the binary column and varchar's modifier.
        let desc = &reply[2].body;
        assert_eq!(u16::from_be_bytes([desc[0], desc[1]]), 16);

        // A malformed text parameter is an error at Bind, and the
        // connection carries on after Sync.
        let mut bind = cstr("");
        bind.extend(cstr("sel"));
        bind.extend(0u16.to_be_bytes());
        bind.extend(1u16.to_be_bytes());
        bind.extend(3i32.to_be_bytes());
        bind.extend(b"ten");
        bind.extend(0u16.to_be_bytes());
        let mut batch = msg(b'B', &bind);
        batch.extend(msg(b'E', &[cstr(""), 0i32.to_be_bytes().to_vec()].concat()));
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(tags(&reply), "EZ");
        assert_eq!(reply[0].sqlstate().as_deref(), Some("22P02"));
        assert_eq!(tags(&raw.query("SELECT 1").await), "TDCZ");
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_and_ready_status() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let mut client = server.connect().await;
        let other = server.connect().await;
        client
            .batch_execute("CREATE TABLE acct (id integer PRIMARY KEY, n bigint)")
            .await
            .unwrap();
        {
            let tx = client.transaction().await.unwrap();
            tx.execute("INSERT INTO acct VALUES (1, 10)", &[])
                .await
                .unwrap();
            tx.execute("INSERT INTO acct VALUES ($1, $2)", &[&2i32, &20i64])
                .await
                .unwrap();
            assert_eq!(
                count(&other, "acct").await,
                0,
                "uncommitted rows are invisible"
            );
            tx.commit().await.unwrap();
        }
        assert_eq!(count(&other, "acct").await, 2);
        {
            let tx = client.transaction().await.unwrap();
            tx.execute("DELETE FROM acct", &[]).await.unwrap();
            tx.rollback().await.unwrap();
        }
        assert_eq!(count(&other, "acct").await, 2);

        // ReadyForQuery follows the session: idle, in a block, failed.
        let mut raw = Raw::connect(server.addr).await;
        assert_eq!(ready_status(&raw.query("BEGIN").await), b'T');
        assert_eq!(
            ready_status(&raw.query("INSERT INTO acct VALUES (3, 30)").await),
            b'T'
        );
        let failed = raw.query("SELECT * FROM nope").await;
        assert_eq!(failed[0].sqlstate().as_deref(), Some("42P01"));
        assert_eq!(ready_status(&failed), b'E');
        let aborted = raw.query("SELECT 1").await;
        assert_eq!(aborted[0].sqlstate().as_deref(), Some("25P02"));
        assert_eq!(ready_status(&aborted), b'E');
        let end = raw.query("COMMIT").await;
        assert_eq!(end[0].body, b"ROLLBACK\0");
        assert_eq!(ready_status(&end), b'I');
        assert_eq!(count(&other, "acct").await, 2);
        // A whole transaction in one simple query.
        let reply = raw
            .query("BEGIN; INSERT INTO acct VALUES (4, 40); COMMIT")
            .await;
        assert_eq!(tags(&reply), "CCCSZ", "{reply:?}");
        assert_eq!(count(&other, "acct").await, 3);

        // Portals fetched a few rows at a time inside a transaction.
        let tx = client.transaction().await.unwrap();
        let stmt = tx.prepare("SELECT id FROM acct ORDER BY id").await.unwrap();
        let portal = tx.bind(&stmt, &[]).await.unwrap();
        let mut ids = Vec::new();
        loop {
            let batch = tx.query_portal(&portal, 2).await.unwrap();
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= 2);
            ids.extend(batch.iter().map(|r| r.get::<_, i32>(0)));
        }
        assert_eq!(ids, vec![1, 2, 4]);
        tx.commit().await.unwrap();

        // Pipelined queries on one connection.
        let (a, b, c) = tokio::join!(
            client.query_one("SELECT count(*) FROM acct", &[]),
            client.query_one("SELECT n FROM acct WHERE id = $1", &[&2i32]),
            client.query_one("SELECT $1::text", &[&"echo"]),
        );
        assert_eq!(a.unwrap().get::<_, i64>(0), 3);
        assert_eq!(b.unwrap().get::<_, i64>(0), 20);
        let _ = c; // casts of parameters depend on the engine
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_sqlstate_and_leave_the_connection_usable() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        let code = |e: tokio_postgres::Error| e.code().cloned().expect("a database error");
        assert_eq!(
            code(client.simple_query("SELECT * FROM nope").await.unwrap_err()),
            SqlState::UNDEFINED_TABLE
        );
        assert_eq!(
            code(client.simple_query("SELEC 1").await.unwrap_err()),
            SqlState::SYNTAX_ERROR
        );
        assert_eq!(
            code(client.prepare("SELECT * FROM nope").await.unwrap_err()),
            SqlState::UNDEFINED_TABLE
        );
        assert_eq!(
            code(client.query("SELECT 1/0", &[]).await.unwrap_err()),
            SqlState::DIVISION_BY_ZERO
        );
        client
            .batch_execute("CREATE TABLE u (id integer PRIMARY KEY, name varchar(3))")
            .await
            .unwrap();
        client
            .execute("INSERT INTO u VALUES (1, 'a')", &[])
            .await
            .unwrap();
        let dup = client
            .execute("INSERT INTO u VALUES ($1, $2)", &[&1i32, &"b"])
            .await
            .unwrap_err();
        assert_eq!(code(dup), SqlState::UNIQUE_VIOLATION);
        let long = client
            .execute("INSERT INTO u VALUES ($1, $2)", &[&2i32, &"toolong"])
            .await
            .unwrap_err();
        assert_eq!(code(long), SqlState::STRING_DATA_RIGHT_TRUNCATION);
        // Still usable.
        let row = client.query_one("SELECT 1 + 1", &[]).await.unwrap();
        assert_eq!(int(&row, 0), 2);

        // An error mid-pipeline skips to Sync, then all is well again.
        let mut raw = Raw::connect(server.addr).await;
        let mut bad_parse = cstr("");
        bad_parse.extend(cstr("SELEC 1"));
        bad_parse.extend(0u16.to_be_bytes());
        let mut bind = cstr("");
        bind.extend(cstr(""));
        bind.extend([0, 0, 0, 0, 0, 0]);
        let mut batch = msg(b'P', &bad_parse);
        batch.extend(msg(b'B', &bind));
        batch.extend(msg(b'E', &[cstr(""), 0i32.to_be_bytes().to_vec()].concat()));
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(tags(&reply), "EZ");
        assert_eq!(reply[0].sqlstate().as_deref(), Some("42601"));
        assert_eq!(reply[0].field(b'S').as_deref(), Some("ERROR"));
        // Unknown statements and portals.
        let mut describe = vec![b'S'];
        describe.extend(cstr("missing"));
        let mut batch = msg(b'D', &describe);
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(reply[0].sqlstate().as_deref(), Some("26000"));
        assert_eq!(tags(&raw.query("SELECT 2").await), "TDCZ");
    })
    .await;
    server.stop().await.unwrap();
}

/// After a write the server reports `aqueduct.last_lsn`, matching SHOW.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_lsn_is_reported_after_writes() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let mut raw = Raw::open(server.addr).await;
        raw.send(&startup_message("lsn")).await;
        let startup = raw.until_ready().await;
        let params: Vec<(String, String)> = startup.iter().filter_map(Backend::parameter).collect();
        assert!(
            params.contains(&("aqueduct.last_lsn".into(), "0".into())),
            "{params:?}"
        );
        assert!(params.iter().any(|(k, _)| k == "server_version"));
        assert!(startup.iter().any(|m| m.tag == b'K'), "BackendKeyData");

        let reply = raw.query("CREATE TABLE l (id integer PRIMARY KEY)").await;
        let first = lsn_in(&reply).expect("an LSN after DDL");
        let reply = raw.query("INSERT INTO l VALUES (1)").await;
        let second = lsn_in(&reply).expect("an LSN after INSERT");
        assert!(second > first);
        // Reads change nothing, so nothing is reported.
        let reply = raw.query("SELECT * FROM l").await;
        assert_eq!(lsn_in(&reply), None);
        let shown = raw.query("SHOW aqueduct.last_lsn").await;
        assert_eq!(
            shown[1].columns()[0].as_deref(),
            Some(second.to_string().as_bytes())
        );
        // And in the extended protocol, right after the write's CommandComplete.
        let mut parse = cstr("");
        parse.extend(cstr("INSERT INTO l VALUES (2)"));
        parse.extend(0u16.to_be_bytes());
        let mut bind = cstr("");
        bind.extend(cstr(""));
        bind.extend([0, 0, 0, 0, 0, 0]);
        let mut batch = msg(b'P', &parse);
        batch.extend(msg(b'B', &bind));
        batch.extend(msg(b'E', &[cstr(""), 0i32.to_be_bytes().to_vec()].concat()));
        batch.extend(msg(b'S', &[]));
        raw.send(&batch).await;
        let reply = raw.until_ready().await;
        assert_eq!(tags(&reply), "12CSZ", "{reply:?}");
        assert!(lsn_in(&reply).unwrap() > second);
    })
    .await;
    server.stop().await.unwrap();
}

fn lsn_in(msgs: &[Backend]) -> Option<u64> {
    msgs.iter()
        .filter_map(Backend::parameter)
        .find(|(k, _)| k == "aqueduct.last_lsn")
        .map(|(_, v)| v.parse().unwrap())
}

/// A client that vanishes inside a transaction leaves nothing committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_client_commits_nothing() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let observer = server.connect().await;
        observer
            .batch_execute("CREATE TABLE v (id integer PRIMARY KEY)")
            .await
            .unwrap();
        for how in ["drop", "terminate", "half"] {
            let mut raw = Raw::connect(server.addr).await;
            assert_eq!(ready_status(&raw.query("BEGIN").await), b'T');
            assert_eq!(
                ready_status(&raw.query("INSERT INTO v VALUES (1)").await),
                b'T'
            );
            match how {
                // Gone without a word, with a COMMIT half sent.
                "drop" => {
                    let commit = msg(b'Q', &cstr("COMMIT"));
                    raw.send(&commit[..commit.len() - 3]).await;
                    drop(raw);
                }
                "terminate" => {
                    raw.send(&msg(b'X', &[])).await;
                    raw.until_closed(READ_TIMEOUT).await.unwrap();
                }
                _ => {
                    raw.stream.shutdown().await.unwrap();
                    raw.until_closed(READ_TIMEOUT).await.unwrap();
                }
            }
            let n: i64 = observer
                .query_one("SELECT count(*) FROM v", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, 0, "after {how}");
        }
        // The key is free for a committed write.
        observer
            .execute("INSERT INTO v VALUES (1)", &[])
            .await
            .unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_requests_are_accepted() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        client
            .cancel_token()
            .cancel_query(tokio_postgres::NoTls)
            .await
            .unwrap();
        assert_eq!(int(&client.query_one("SELECT 1", &[]).await.unwrap(), 0), 1);
    })
    .await;
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_connections() {
    let server = Server::start(PgConfig::default()).await;
    let client = server.connect().await;
    client.simple_query("SELECT 1").await.unwrap();
    bounded(server.stop()).await.unwrap();
    let err = client.simple_query("SELECT 1").await.unwrap_err();
    assert!(
        err.is_closed() || err.code() == Some(&SqlState::ADMIN_SHUTDOWN),
        "{err}"
    );
}

async fn count(c: &tokio_postgres::Client, table: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// An integer column of whatever width the engine chose.
fn int(row: &tokio_postgres::Row, i: usize) -> i64 {
    use tokio_postgres::types::Type;
    match row.columns()[i].type_() {
        t if *t == Type::INT2 => row.get::<_, i16>(i).into(),
        t if *t == Type::INT4 => row.get::<_, i32>(i).into(),
        _ => row.get(i),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrays_and_jsonb_in_binary_through_a_driver() {
    use tokio_postgres::types::Type;
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        client
            .batch_execute(
                "CREATE TABLE arr (id bigint PRIMARY KEY, tags text[], ids uuid[], doc jsonb)",
            )
            .await
            .unwrap();
        let insert = client
            .prepare("INSERT INTO arr VALUES ($1, $2, $3, $4)")
            .await
            .unwrap();
        assert_eq!(
            insert.params(),
            &[Type::INT8, Type::TEXT_ARRAY, Type::UUID_ARRAY, Type::JSONB]
        );
        let u = uuid::Uuid::from_u128(7);
        for id in 1i64..=3 {
            let tags = vec![format!("t{id}"), "a b".to_string()];
            let doc = serde_json::json!({ "z": id, "a": [true, null] });
            client
                .execute(&insert, &[&id, &tags, &vec![u], &doc])
                .await
                .unwrap();
        }
        // `= ANY($1)`: the parameter is a bigint[], sent in binary.
        let any = client
            .prepare("SELECT id, tags, ids, doc, doc->'a' FROM arr WHERE id = ANY($1) ORDER BY id")
            .await
            .unwrap();
        assert_eq!(any.params(), &[Type::INT8_ARRAY]);
        assert_eq!(any.columns()[1].type_(), &Type::TEXT_ARRAY);
        assert_eq!(any.columns()[2].type_(), &Type::UUID_ARRAY);
        assert_eq!(any.columns()[3].type_(), &Type::JSONB);
        let rows = client.query(&any, &[&vec![3i64, 1]]).await.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].get::<_, i64>(0), 3);
        assert_eq!(
            rows[1].get::<_, Vec<Option<String>>>(1),
            vec![Some("t3".to_string()), Some("a b".to_string())]
        );
        assert_eq!(rows[1].get::<_, Vec<uuid::Uuid>>(2), vec![u]);
        assert_eq!(
            rows[1].get::<_, serde_json::Value>(3),
            serde_json::json!({ "a": [true, null], "z": 3 })
        );
        assert_eq!(
            rows[1].get::<_, serde_json::Value>(4),
            serde_json::json!([true, null])
        );
        // The text forms, as psql shows them.
        let msgs = client
            .simple_query("SELECT tags, doc FROM arr WHERE id = 2")
            .await
            .unwrap();
        assert_eq!(
            rows_of(msgs),
            vec![vec![
                Some("{t2,\"a b\"}".into()),
                Some(r#"{"a": [true, null], "z": 2}"#.into())
            ]]
        );
        // A malformed array literal is PostgreSQL's 22P02.
        let e = client
            .simple_query("SELECT '{a'::text[]")
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(&SqlState::INVALID_TEXT_REPRESENTATION));
    })
    .await;
}

/// An interval as a driver holds it: PostgreSQL's binary fields
/// (tokio-postgres has no interval type of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PgInterval {
    micros: i64,
    days: i32,
    months: i32,
}

impl tokio_postgres::types::ToSql for PgInterval {
    fn to_sql(
        &self,
        _: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        out.put_i64(self.micros);
        out.put_i32(self.days);
        out.put_i32(self.months);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        *ty == tokio_postgres::types::Type::INTERVAL
    }

    tokio_postgres::types::to_sql_checked!();
}

impl<'a> tokio_postgres::types::FromSql<'a> for PgInterval {
    fn from_sql(
        _: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<PgInterval, Box<dyn std::error::Error + Sync + Send>> {
        let raw: [u8; 16] = raw.try_into()?;
        let (micros, rest) = raw.split_at(8);
        let (days, months) = rest.split_at(4);
        Ok(PgInterval {
            micros: i64::from_be_bytes(micros.try_into()?),
            days: i32::from_be_bytes(days.try_into()?),
            months: i32::from_be_bytes(months.try_into()?),
        })
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        *ty == tokio_postgres::types::Type::INTERVAL
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_in_binary_through_a_driver() {
    use tokio_postgres::types::Type;
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let client = server.connect().await;
        client
            .batch_execute(
                "CREATE TABLE leases (id bigint PRIMARY KEY, ttl interval, granted timestamptz, \
                 steps interval[])",
            )
            .await
            .unwrap();
        let insert = client
            .prepare("INSERT INTO leases VALUES ($1, $2, $3, ARRAY[$2, $2 * 2])")
            .await
            .unwrap();
        assert_eq!(
            insert.params(),
            &[Type::INT8, Type::INTERVAL, Type::TIMESTAMPTZ]
        );
        let granted: DateTime<Utc> = "2024-01-31T10:00:00Z".parse().unwrap();
        let month = PgInterval {
            micros: 0,
            days: 0,
            months: 1,
        };
        let odd = PgInterval {
            micros: -1_500_000,
            days: 3,
            months: -14,
        };
        for (id, ttl) in [(1i64, month), (2, odd)] {
            client
                .execute(&insert, &[&id, &ttl, &granted])
                .await
                .unwrap();
        }
        // Results and a parameter in binary: the fields come back as sent,
        // and `timestamptz + interval` moves by the calendar.
        let select = client
            .prepare(
                "SELECT id, ttl, granted + ttl, steps FROM leases \
                 WHERE ttl >= $1 AND granted > now() - $2::interval ORDER BY id",
            )
            .await
            .unwrap();
        assert_eq!(select.params(), &[Type::INTERVAL, Type::INTERVAL]);
        assert_eq!(select.columns()[1].type_(), &Type::INTERVAL);
        assert_eq!(select.columns()[2].type_(), &Type::TIMESTAMPTZ);
        assert_eq!(select.columns()[3].type_(), &Type::INTERVAL_ARRAY);
        let thirty_days = PgInterval {
            micros: 0,
            days: 30,
            months: 0,
        };
        let century = PgInterval {
            micros: 0,
            days: 0,
            months: 1200,
        };
        let rows = client
            .query(&select, &[&thirty_days, &century])
            .await
            .unwrap();
        // '1 mon' >= '30 days' (a month counts 30 days); '-14 mons' is less.
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get::<_, PgInterval>(1), month);
        let end: DateTime<Utc> = "2024-02-29T10:00:00Z".parse().unwrap();
        assert_eq!(rows[0].get::<_, DateTime<Utc>>(2), end);
        let doubled = PgInterval {
            months: 2,
            ..month
        };
        assert_eq!(rows[0].get::<_, Vec<PgInterval>>(3), vec![month, doubled]);
        // The text form, as psql shows it.
        let msgs = client
            .simple_query("SELECT ttl, steps FROM leases WHERE id = 2")
            .await
            .unwrap();
        assert_eq!(
            rows_of(msgs),
            vec![vec![
                Some("-1 years -2 mons +3 days -00:00:01.5".into()),
                Some("{\"-1 years -2 mons +3 days -00:00:01.5\",\"-2 years -4 mons +6 days -00:00:03\"}".into())
            ]]
        );
        // Bad interval text is PostgreSQL's 22007.
        let e = client
            .simple_query("SELECT 'soon'::interval")
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(&SqlState::INVALID_DATETIME_FORMAT));
    })
    .await;
}

/// `pg_stat_activity` lists each connected backend under the process id
/// `pg_backend_pid()` gives it (the one cancel requests name), with its
/// state; `txid_current()` is one number through a transaction block;
/// `pg_terminate_backend` ends another backend's connection (57P01 there)
/// and answers false for no such backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_are_listed_and_can_be_terminated() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let a = server.connect().await;
        let b = server.connect().await;
        let pid_a: i32 = a
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        a.batch_execute("BEGIN").await.unwrap();
        let x1: i64 = a.query_one("SELECT txid_current()", &[]).await.unwrap().get(0);
        let x2: i64 = a.query_one("SELECT txid_current()", &[]).await.unwrap().get(0);
        assert_eq!(x1, x2);
        let rows = b
            .query(
                "SELECT pid, state, query, pid = pg_backend_pid() FROM pg_stat_activity ORDER BY pid",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
        let of_a = rows.iter().find(|r| r.get::<_, i32>(0) == pid_a).unwrap();
        assert_eq!(of_a.get::<_, String>(1), "idle in transaction");
        assert_eq!(of_a.get::<_, String>(2), "SELECT txid_current()");
        assert!(!of_a.get::<_, bool>(3));
        let ended: bool = b
            .query_one("SELECT pg_terminate_backend($1::int4)", &[&pid_a])
            .await
            .unwrap()
            .get(0);
        assert!(ended);
        let err = a.simple_query("SELECT 1").await.unwrap_err();
        assert!(
            err.is_closed() || err.code() == Some(&SqlState::ADMIN_SHUTDOWN),
            "{err}"
        );
        let none: bool = b
            .query_one("SELECT pg_cancel_backend(1)", &[])
            .await
            .unwrap()
            .get(0);
        assert!(!none);
        // The ended backend left the list.
        let n: i64 = b
            .query_one("SELECT count(*) FROM pg_stat_activity", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1);
    })
    .await;
    server.stop().await.unwrap();
}

/// Settings in the startup `options` parameter (libpq's PGOPTIONS, as
/// pgbench passes them) apply to the session: `-c name=value` with a
/// backslash before a space, `-cname=value` and `--name=value`; a
/// parameter sent on its own wins over the same one in `options`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_options_set_session_settings() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let mut config = server.config("test");
        config.options(
            "-c default_transaction_isolation=read\\ committed -cextra_float_digits=2 \
             --application-name=from_options -X",
        );
        config.application_name("from_parameter");
        let client = connect(config).await.unwrap();
        let show = |name: &'static str| {
            let client = &client;
            async move {
                let rows = rows_of(client.simple_query(&format!("SHOW {name}")).await.unwrap());
                rows[0][0].clone().unwrap()
            }
        };
        assert_eq!(
            show("default_transaction_isolation").await,
            "read committed"
        );
        assert_eq!(show("extra_float_digits").await, "2");
        assert_eq!(show("application_name").await, "from_parameter");
    })
    .await;
    server.stop().await.unwrap();
}

/// `SELECT pg_sleep(n)` holds no lock (others write meanwhile), ends at
/// `statement_timeout` or when `pg_cancel_backend` names its backend, and
/// is refused (0A000) where it would hold a read of a table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_sleep_blocks_nobody_and_can_be_cancelled() {
    let server = Server::start(PgConfig::default()).await;
    bounded(async {
        let a = std::sync::Arc::new(server.connect().await);
        let b = server.connect().await;
        b.batch_execute("CREATE TABLE t (a int)").await.unwrap();
        let pid_a: i32 = a
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let sleeper = {
            let a = a.clone();
            tokio::spawn(async move { a.simple_query("SELECT pg_sleep(30)").await })
        };
        // It shows as active (each poll is a round trip to the server,
        // bounded by a deadline), and writes go on meanwhile.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "the sleeping backend never showed as active"
            );
            let state: String = b
                .query_one(
                    "SELECT state FROM pg_stat_activity WHERE pid = $1::int4",
                    &[&pid_a],
                )
                .await
                .unwrap()
                .get(0);
            if state == "active" {
                break;
            }
        }
        b.batch_execute("INSERT INTO t VALUES (1)").await.unwrap();
        let cancelled: bool = b
            .query_one("SELECT pg_cancel_backend($1::int4)", &[&pid_a])
            .await
            .unwrap()
            .get(0);
        assert!(cancelled);
        let err = sleeper.await.unwrap().unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
        a.batch_execute("SET statement_timeout = '50ms'")
            .await
            .unwrap();
        let err = a.simple_query("SELECT pg_sleep(5)").await.unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
        let err = b
            .simple_query("SELECT pg_sleep(1) FROM t")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    })
    .await;
    server.stop().await.unwrap();
}
