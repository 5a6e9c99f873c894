//! jsonb and arrays checked against a real PostgreSQL 15: the same CREATE
//! TABLE, INSERT, UPDATE, CREATE VIEW and SELECT statements run on an
//! in-process engine and on a throwaway PostgreSQL cluster (initdb in a
//! temporary directory, a Unix socket only), and every result, in text
//! form, must be the same; statements that fail must fail with the same
//! SQLSTATE.
//!
//! PostgreSQL's server programs are found through `PG_BIN`, else
//! `pg_config --bindir`, else Debian's `/usr/lib/postgresql/15/bin`. Without
//! them the comparison is skipped with a message, unless
//! `AQUEDUCT_REQUIRE_POSTGRES` is set, which makes their absence a failure.
//! Run as root, PostgreSQL's programs run as the `postgres` user.

use crate::common;

use std::process::Command;

use aqueduct_sql::{Outcome, Session};
use aqueduct_values::{DataType, Value};
use common::postgres::Postgres;
use common::{engine, prepared_rows, run};

/// Separates fields in the rows both sides print.
const FIELD_SEPARATOR: &str = "\u{1f}";

const SETUP: &[&str] = &[
    "CREATE TABLE docs (id int PRIMARY KEY, doc jsonb, tags text[], nums int[], ids uuid[], big bigint[])",
    r#"INSERT INTO docs VALUES (1, '{"name": "ann", "age": 30, "tags": ["a", "b"], "addr": {"city": "Oslo"}}', '{a,b}', '{1,2,3}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}', '{9000000000}')"#,
    r#"INSERT INTO docs VALUES (2, '{"b":1,"a":[1,2],"a":"dup","name":"bob","n":1.50,"e":1e2,"long key":{"z":null,"y":[]}}', '{"c d",NULL,"","NULL","x\"y","a,b"}', '{}', '{}', NULL)"#,
    r#"INSERT INTO docs VALUES (3, '[1, "x", null, {"k": true}, "a"]', NULL, '{5,NULL}', NULL, '{}')"#,
    r#"INSERT INTO docs VALUES (4, '"str"', '{x}', '{2,4}', NULL, NULL)"#,
    "INSERT INTO docs VALUES (5, NULL, ARRAY['q', 'r'], ARRAY[7], NULL, ARRAY[1, 2])",
    r#"INSERT INTO docs VALUES (6, '{"name": "cy", "n": 1.5, "tags": []}', ARRAY[]::text[], '{1, 2, 3}', NULL, NULL)"#,
    "CREATE VIEW named AS SELECT id, doc->>'name' AS name, nums, doc->'tags' AS t FROM docs WHERE doc ? 'name'",
    "CREATE VIEW tag_counts AS SELECT cardinality(tags) AS n, count(*) AS c FROM docs GROUP BY cardinality(tags)",
];

const QUERIES: &[&str] = &[
    "SELECT id, doc FROM docs ORDER BY id",
    "SELECT id, tags, nums, ids, big FROM docs ORDER BY id",
    "SELECT id, doc->'name', doc->>'name', doc->'tags'->1, doc->'tags'->>0, doc->2, doc->>(-1) FROM docs ORDER BY id",
    "SELECT id, doc #> '{addr,city}', doc #>> '{tags,0}', doc #> '{3,k}', doc #>> '{}' FROM docs ORDER BY id",
    r#"SELECT id, doc @> '{"name": "ann"}', doc <@ '{"name": "ann", "age": 30, "tags": ["a", "b"], "addr": {"city": "Oslo"}, "x": 1}', doc @> '[1, "a"]', doc ? 'name', doc ? 'a', doc ?| ARRAY['a', 'zz'], doc ?& ARRAY['a', 'b'] FROM docs ORDER BY id"#,
    r#"SELECT id, doc || '{"z": 1, "name": "new"}', doc || '[9]' FROM docs WHERE jsonb_typeof(doc) IN ('object', 'array') ORDER BY id"#,
    "SELECT id, doc - 'name', doc - ARRAY['a', 'b', 'x'] FROM docs WHERE jsonb_typeof(doc) IN ('object', 'array') ORDER BY id",
    "SELECT id, doc - 1, doc - (-1) FROM docs WHERE jsonb_typeof(doc) = 'array'",
    "SELECT id, jsonb_typeof(doc), jsonb_typeof(doc->'name') FROM docs ORDER BY id",
    "SELECT jsonb_build_object('b', 1, 'a', 'x', 'c', NULL, 'aa', true, 'b', 2.50), jsonb_build_array(1, 'two', NULL, 2.50, false)",
    r#"SELECT id, jsonb_set(doc, '{addr,zip}', '"0150"'), jsonb_set(doc, '{tags,0}', '"z"', false), jsonb_set(doc, '{nope,x}', '1') FROM docs WHERE id = 1"#,
    "SELECT id, jsonb_array_length(doc) FROM docs WHERE id = 3",
    "SELECT id, to_jsonb(id), to_jsonb(tags), to_jsonb(nums), to_jsonb(doc->>'name') FROM docs ORDER BY id",
    "SELECT id FROM docs WHERE doc->>'name' = 'bob'",
    "SELECT id, doc FROM docs ORDER BY doc, id",
    "SELECT id, doc FROM docs WHERE doc = '{\"n\": 1.50, \"name\": \"cy\", \"tags\": []}'",
    r#"SELECT '{"b":1,"a":[1,2]}'::jsonb, '{"a": 1.0}'::jsonb = '{"a": 1}'::jsonb, '[1,2]'::jsonb < '[0,0,0]'::jsonb, '{"a":{"c":1,"bb":2}}'::jsonb"#,
    r#"SELECT '  {"x" : "\u00e9\n\t\"q\"", "y": -0.0, "z": 12345678901234567890123}  '::jsonb"#,
    "SELECT id, cardinality(nums), array_length(nums, 1), nums[1], nums[5], nums[0], tags[2] FROM docs ORDER BY id",
    "SELECT id FROM docs WHERE 2 = ANY(nums) ORDER BY id",
    "SELECT id, 5 <> ALL(nums), 5 = ANY(nums), 1 < ANY(nums) FROM docs ORDER BY id",
    "SELECT id, nums @> ARRAY[2], nums <@ ARRAY[1, 2, 3, 4], nums && ARRAY[4, 7], tags @> '{x}' FROM docs ORDER BY id",
    "SELECT id, nums || ARRAY[9], nums || 10, 0 || nums, tags || 'z'::text FROM docs ORDER BY id",
    r#"SELECT '{a,"b c",NULL,"NULL",""}'::text[], ARRAY[1, 2, 3], ARRAY[]::int[], '{1,2}'::int[] || '{3}'::int[], '{ 1 , 2 }'::bigint[]"#,
    "SELECT ARRAY['a b', NULL, 'c'], ARRAY[1.5, 2], ARRAY[true, false], '{1,2}'::int[] = ARRAY[1, 2], ARRAY[1, 2] < ARRAY[1, 3]",
    "SELECT array_agg(id) FROM docs",
    "SELECT jsonb_agg(doc->'name') FROM docs WHERE id <= 2",
    "SELECT array_agg(doc->>'name') FROM docs WHERE id IN (1, 2, 5)",
    "SELECT id, tags FROM docs ORDER BY tags, id",
    "SELECT * FROM named ORDER BY id",
    "SELECT * FROM tag_counts ORDER BY n",
    "SELECT n.id, n.name, d.tags FROM named n JOIN docs d ON d.id = n.id ORDER BY n.id",
    "UPDATE docs SET doc = doc || '{\"v\": 2}', nums = nums || 4 WHERE id = 1",
    "INSERT INTO docs VALUES (7, '{\"name\": \"dee\", \"tags\": [\"q\"]}', '{q}', '{7,8}', '{}', NULL)",
    "DELETE FROM docs WHERE id = 6",
    "SELECT id, doc, nums FROM docs ORDER BY id",
    "SELECT * FROM named ORDER BY id",
    "SELECT * FROM tag_counts ORDER BY n",
    "CREATE TABLE kinds (id int PRIMARY KEY, ts timestamp[], tz timestamptz[], d date[], n numeric[], b boolean[], f float8[], v varchar(5)[], j jsonb[], u uuid[])",
    r#"INSERT INTO kinds VALUES (1, '{"2024-01-02 03:04:05.5"}', '{"2024-01-02 03:04:05+00"}', '{2024-02-29,NULL}', '{1.50,-0,1e3}', '{t,false}', '{1.5,-2}', '{ab,"c d"}', ARRAY['{"b": 1, "a": 2}'::jsonb, '[]'], '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}')"#,
    "SELECT * FROM kinds",
    "SELECT to_jsonb(ts), to_jsonb(d), to_jsonb(n), to_jsonb(b), to_jsonb(f), to_jsonb(j), to_jsonb(u), to_jsonb(v) FROM kinds",
    r#"SELECT jsonb_build_object('t', ts[1], 'd', d[1], 'n', n[2], 'f', f[2], 'u', u[1], 'e', 'quote"back\slash', 'tz', tz[1]) FROM kinds"#,
    "SELECT v || 'e'::varchar, n @> ARRAY[1.5], d[2] IS NULL, cardinality(j), j[1]->'a' FROM kinds",
    "INSERT INTO kinds VALUES (2, '{}', NULL, ARRAY['2024-01-01'::date], '{0.1}', '{}', '{}', '{\"\"}', '{}', '{}')",
    "SELECT id, d, v, n FROM kinds ORDER BY d, id",
    "SELECT doc->'name', count(*) FROM docs GROUP BY doc->'name' ORDER BY doc->'name'",
    "SELECT DISTINCT nums FROM docs ORDER BY nums",
    "SELECT id FROM docs WHERE doc->'tags' @> '[\"a\"]' OR tags && '{q,x}' ORDER BY id",
    r#"SELECT '{"a": {"b": [1, {"c": "d"}]}}'::jsonb #> '{a,b,1,c}', '[1,2,3]'::jsonb -> -1, '[1,2,3]'::jsonb ->> 3, '{"a":1}'::jsonb -> 'b'"#,
    r#"SELECT '[1, [2, 3]]'::jsonb @> '[[3]]', '[1, 2]'::jsonb @> '1', '{"a": [1, 2]}'::jsonb @> '{"a": 1}', '"x"'::jsonb ? 'x', '[1, "1"]'::jsonb ? '1'"#,
    r#"SELECT '[]'::jsonb || '{}'::jsonb, '1'::jsonb || '2'::jsonb, '{"a":1}'::jsonb || '{"a":{"b":2}}'::jsonb"#,
    r#"SELECT jsonb_set('[1,2,3]', '{-1}', '9'), jsonb_set('[1,2,3]', '{7}', '9'), jsonb_set('[1,2,3]', '{-7}', '9'), jsonb_set('{"a":1}', '{}', '9')"#,
    "SELECT ARRAY['x'] = ARRAY['x', NULL], ARRAY[NULL]::int[] = ARRAY[NULL]::int[], ARRAY[1, NULL] < ARRAY[1, 2], NULL = ANY(ARRAY[1]), NULL = ANY('{}'::int[])",
    "SELECT '[1e30, 1.50e1, 100e-2, -0.0, 0.5E1, 123456789012345678901234567890.5, -2.5e-31]'::jsonb, to_jsonb(1e20::float8), to_jsonb(0.1::float8), to_jsonb('NaN'::float8)",
    "SELECT '1e30'::jsonb > '999999999999999999999999999999.9'::jsonb, '1.50'::jsonb = '1.5'::jsonb, '-0.001'::jsonb < '0'::jsonb",
    r#"CREATE TABLE jt (id int PRIMARY KEY, j json)"#,
    r#"INSERT INTO jt VALUES (1, ' {"a" : { "b" :[1, {"c":  "2.50" }] }, "d": "x\ty", "k": 1, "k" : [2], "n": null} ')"#,
    r#"SELECT j, j -> 'a', j ->> 'a', j -> 'a' -> 'b', j #> '{a,b,1}', j #>> '{a,b,1,c}', j -> 'd', j ->> 'd', j -> 'k', j ->> 'n', j -> 'a' -> 'zz' FROM jt"#,
    r#"SELECT '[1, [2,  3]]'::json -> 1, '[1, [2,  3]]'::json -> -1, '[1, [2,  3]]'::json ->> 0, '"s"'::json -> 0"#,
    "SELECT '1e200000'::jsonb",
    "SELECT '[\"\\u0000\", 1e200000, {\"b\":1,\"a\":2}]'::json",
    "SELECT '1e-20000'::jsonb",
    "SELECT length(('1e20000'::jsonb)::text)",
    // Errors: each must fail in both with the same SQLSTATE.
    "SELECT '{bad'::jsonb",
    "SELECT '{\"a\": 1,}'::jsonb",
    "SELECT '{a,b'::text[]",
    "SELECT 'a,b'::text[]",
    "SELECT '{1,x}'::int[]",
    "SELECT '1'::jsonb - 'a'",
    "SELECT '{}'::jsonb - 1",
    "SELECT jsonb_build_object('a')",
    "SELECT jsonb_array_length('{}'::jsonb)",
    "SELECT jsonb_array_length('1'::jsonb)",
    "SELECT 1 -> 'a'",
    "SELECT '\"\\u0000\"'::jsonb",
    "SELECT jsonb_set('1', '{a}', '2')",
    "SELECT jsonb_set('[1]', '{x}', '2')",
    "SELECT jsonb_build_object(NULL, 1)",
    "SELECT ARRAY[]",
    "SELECT 1 = ANY(1)",
    "SELECT (1)[1]",
    "SELECT 'x'::text -> 'a'",
    "SELECT id FROM docs WHERE tags ? 'a'",
    "SELECT ARRAY[1] @> '{\"a\": 1}'::jsonb",
    "SELECT 1 && ARRAY[1]",
    "SELECT '{\"a\": 1}'::jsonb && '{}'::jsonb",
];

/// What a statement gave: its rows as text (or the count of rows a write
/// touched), or the SQLSTATE it failed with.
#[derive(Debug, PartialEq)]
enum Answer {
    Rows(Vec<String>),
    Error(String),
}

fn aqueduct_answer(s: &mut Session, sql: &str) -> Answer {
    match run(s, sql) {
        Ok(Outcome::Rows { rows, .. }) => Answer::Rows(
            rows.iter()
                .map(|r| {
                    r.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(FIELD_SEPARATOR)
                })
                .collect(),
        ),
        Ok(_) => Answer::Rows(vec![]),
        Err(e) => Answer::Error(e.code.to_string()),
    }
}

fn postgres_answer(pg: &Postgres, sql: &str) -> Answer {
    let out = Command::new("psql")
        .args(["-X", "-q", "-A", "-t", "-U", "postgres", "-d", "postgres"])
        .arg("-h")
        .arg(pg.dir.path())
        .args(["-F", FIELD_SEPARATOR, "-P", "null=NULL"])
        .args(["-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=sqlstate"])
        .args(["-c", sql])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = stderr
            .trim()
            .strip_prefix("ERROR:")
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| panic!("psql failed without an error: {stderr}"));
        return Answer::Error(code);
    }
    let first = sql.split_whitespace().next().unwrap_or("").to_uppercase();
    if first != "SELECT" {
        return Answer::Rows(vec![]);
    }
    Answer::Rows(stdout.lines().map(str::to_string).collect())
}

#[test]
fn jsonb_and_arrays_match_postgres() {
    let Some(pg) = Postgres::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    let mut differences = Vec::new();
    for sql in SETUP.iter().chain(QUERIES) {
        let (ours, theirs) = (aqueduct_answer(&mut s, sql), postgres_answer(&pg, sql));
        if ours != theirs {
            differences.push(format!(
                "{sql}\n  aqueduct:   {ours:?}\n  postgresql: {theirs:?}"
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} statements differ from PostgreSQL:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

#[test]
fn array_parameters_bind_to_any() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    for sql in [
        "CREATE TABLE t (id bigint PRIMARY KEY, tags text[])",
        "INSERT INTO t VALUES (1, '{a}'), (2, '{b,c}'), (3, NULL)",
    ] {
        run(&mut s, sql).unwrap();
    }
    // A driver's `WHERE id = ANY($1)`: the parameter is a bigint[].
    let p = s
        .prepare("SELECT id FROM t WHERE id = ANY($1) ORDER BY id", &[])
        .unwrap();
    assert_eq!(p.params, vec![DataType::Array(Box::new(DataType::Int8))]);
    let ids = Value::Array(vec![Value::Int(3), Value::Int(1), Value::Null]);
    assert_eq!(
        prepared_rows(&mut s, &p, &[ids]),
        vec![vec!["1"], vec!["3"]]
    );
    let p = s
        .prepare("SELECT id FROM t WHERE tags && $1 ORDER BY id", &[])
        .unwrap();
    // A text-format parameter, read as the type it was described with.
    let text = Value::Text("{c,z}".into()).coerce(&p.params[0]).unwrap();
    assert_eq!(prepared_rows(&mut s, &p, &[text]), vec![vec!["2"]]);
    // Stored arrays and jsonb survive a restart (the row encoding).
    run(&mut s, "CREATE TABLE j (id int PRIMARY KEY, doc jsonb)").unwrap();
    run(
        &mut s,
        r#"INSERT INTO j VALUES (1, '{"b": 1, "a": [true]}')"#,
    )
    .unwrap();
    drop(s);
    drop(e);
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        common::rows(&mut s, "SELECT tags FROM t ORDER BY id"),
        vec![vec!["{a}"], vec!["{b,c}"], vec!["NULL"]]
    );
    assert_eq!(
        common::rows(&mut s, "SELECT doc, doc->'a'->0 FROM j"),
        vec![vec![r#"{"a": [true], "b": 1}"#, "true"]]
    );
}

#[test]
fn collecting_aggregates_are_maintained_in_views() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    let ok = |s: &mut Session, sql: &str| {
        run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    };
    ok(
        &mut s,
        "CREATE TABLE ev (id int PRIMARY KEY, g text, v int, doc jsonb)",
    );
    ok(
        &mut s,
        "CREATE VIEW per_g AS SELECT g, array_agg(v) AS vs, jsonb_agg(doc) AS docs, \
         count(*) AS n FROM ev GROUP BY g",
    );
    ok(
        &mut s,
        r#"INSERT INTO ev VALUES (1, 'a', 1, '{"k": 1}'), (2, 'a', NULL, NULL), (3, 'b', 3, '[]')"#,
    );
    ok(&mut s, r#"INSERT INTO ev VALUES (4, 'a', 1, '{"k": 2}')"#);
    ok(&mut s, "DELETE FROM ev WHERE id = 1");
    ok(&mut s, "UPDATE ev SET v = 5 WHERE id = 3");
    // Each group's values, retractions removed (in no particular order,
    // as in PostgreSQL without ORDER BY).
    assert_eq!(
        common::rows(
            &mut s,
            r#"SELECT g, cardinality(vs), vs @> ARRAY[1], 1 = ALL(vs), docs @> '[{"k": 2}, null]',
               jsonb_array_length(docs), n FROM per_g ORDER BY g"#
        ),
        vec![
            vec!["a", "2", "t", "NULL", "t", "2", "2"],
            vec!["b", "1", "f", "f", "f", "1", "1"],
        ]
    );
    assert_eq!(
        common::rows(&mut s, "SELECT vs, docs FROM per_g WHERE g = 'b'"),
        vec![vec!["{5}", "[[]]"]]
    );
    let mut elements = common::rows(&mut s, "SELECT vs FROM per_g WHERE g = 'a'")[0][0]
        .trim_matches(['{', '}'])
        .split(',')
        .map(str::to_string)
        .collect::<Vec<_>>();
    elements.sort();
    assert_eq!(elements, ["1", "NULL"]);
    ok(&mut s, "DELETE FROM ev WHERE g = 'b'");
    assert_eq!(
        common::rows(&mut s, "SELECT g, cardinality(vs) FROM per_g ORDER BY g"),
        vec![vec!["a", "2"]]
    );
    // FILTER would collect NULLs for the rows it leaves out.
    let e = run(&mut s, "SELECT array_agg(v) FILTER (WHERE v > 0) FROM ev").unwrap_err();
    assert_eq!(e.code, "0A000");
    // ORDER BY inside the call orders the elements (DESC puts NULLs
    // first, as in PostgreSQL).
    assert_eq!(
        common::rows(&mut s, "SELECT array_agg(v ORDER BY v DESC) FROM ev"),
        vec![vec!["{NULL,1}"]]
    );
}

#[test]
fn any_of_an_array_reads_by_primary_key() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    for sql in [
        "CREATE TABLE kv (a int, b bigint, v text, PRIMARY KEY (a, b))",
        "INSERT INTO kv VALUES (1, 1, 'x'), (1, 2, 'y'), (2, 1, 'z')",
    ] {
        run(&mut s, sql).unwrap();
    }
    let explain = |s: &mut Session, sql: &str| {
        common::rows(s, &format!("EXPLAIN {sql}"))
            .concat()
            .join("\n")
    };
    let q = "SELECT v FROM kv WHERE a = 1 AND b = ANY($1) ORDER BY v";
    let p = s.prepare(q, &[]).unwrap();
    assert_eq!(p.params, vec![DataType::Array(Box::new(DataType::Int8))]);
    let keys = Value::Array(vec![
        Value::Int(2),
        Value::Null,
        Value::Int(2),
        Value::Int(7),
        Value::Int(1),
    ]);
    assert_eq!(
        prepared_rows(&mut s, &p, &[keys]),
        vec![vec!["x"], vec!["y"]]
    );
    assert!(prepared_rows(&mut s, &p, &[Value::Null]).is_empty());
    assert!(prepared_rows(&mut s, &p, &[Value::Array(vec![])]).is_empty());
    let plan = explain(&mut s, "SELECT v FROM kv WHERE a = 1 AND b = ANY('{1,2}')");
    assert!(plan.contains("one per element of the ANY array"), "{plan}");
    // Not every key column pinned: a scan, with the same answer.
    let plan = explain(&mut s, "SELECT v FROM kv WHERE b = ANY('{1,2}')");
    assert!(plan.contains("scan"), "{plan}");
    assert_eq!(
        common::rows(&mut s, "SELECT v FROM kv WHERE b = ANY('{1}') ORDER BY v"),
        vec![vec!["x"], vec!["z"]]
    );
    // Inside a transaction its own writes are seen.
    run(&mut s, "BEGIN").unwrap();
    run(&mut s, "INSERT INTO kv VALUES (1, 3, 'w')").unwrap();
    run(&mut s, "DELETE FROM kv WHERE a = 1 AND b = 1").unwrap();
    assert_eq!(
        common::rows(
            &mut s,
            "SELECT v FROM kv WHERE a = 1 AND b = ANY(ARRAY[1, 2, 3]) ORDER BY v"
        ),
        vec![vec!["w"], vec!["y"]]
    );
    run(&mut s, "COMMIT").unwrap();
}
