//! Answers where Aqueduct once differed from PostgreSQL 15: each expected
//! value or SQLSTATE here is what PostgreSQL returns for the same SQL.
//! Direct evaluation and maintained views are both checked where both can
//! answer.

use crate::common;

use aqueduct_sql::{Outcome, Session};
use aqueduct_values::{DataType, Value};
use common::{engine, ok, rows, run, sorted_rows};

fn error(s: &mut Session, sql: &str) -> (&'static str, String) {
    match run(s, sql) {
        Err(e) => (e.code, e.message),
        Ok(o) => panic!("{sql}: expected an error, got {o:?}"),
    }
}

fn code(s: &mut Session, sql: &str) -> &'static str {
    error(s, sql).0
}

fn one_row(s: &mut Session, sql: &str) -> Vec<String> {
    let mut r = rows(s, sql);
    assert_eq!(r.len(), 1, "{sql}");
    r.pop().unwrap()
}

fn column_types(s: &mut Session, sql: &str) -> Vec<DataType> {
    match ok(s, sql) {
        Outcome::Rows { columns, .. } => columns.into_iter().map(|c| c.ty).collect(),
        other => panic!("{sql}: expected rows, got {other:?}"),
    }
}

fn setup(s: &mut Session) {
    ok(s, "CREATE TABLE fl (id int PRIMARY KEY, a int, g text)");
    ok(
        s,
        "INSERT INTO fl VALUES (1, 1, 'x'), (2, 2, 'x'), (3, 3, 'y'), (4, NULL, 'y')",
    );
}

#[test]
fn aggregate_filter_counts_only_matching_rows() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    // PostgreSQL: 2 | 5 (not 4 | 6 as if FILTER were ignored).
    assert_eq!(
        one_row(
            &mut s,
            "SELECT count(*) FILTER (WHERE a > 1), sum(a) FILTER (WHERE a > 1) FROM fl"
        ),
        vec!["2", "5"]
    );
    assert_eq!(
        one_row(
            &mut s,
            "SELECT count(a) FILTER (WHERE g = 'y'), avg(a) FILTER (WHERE a < 3), \
             min(a) FILTER (WHERE a > 1), max(a) FILTER (WHERE a < 3), \
             count(DISTINCT g) FILTER (WHERE a >= 2) FROM fl"
        ),
        vec!["1", "1.5000000000000000", "2", "2", "2"]
    );
    assert_eq!(
        sorted_rows(
            &mut s,
            "SELECT g, count(*) FILTER (WHERE a IS NULL), sum(a) FILTER (WHERE false) \
             FROM fl GROUP BY g HAVING count(*) FILTER (WHERE a > 1) > 0"
        ),
        vec![vec!["x", "0", "NULL"], vec!["y", "1", "NULL"]]
    );
    // A view is maintained with the filter too.
    ok(
        &mut s,
        "CREATE VIEW big AS SELECT g, count(*) FILTER (WHERE a > 1) AS n, \
         sum(a) FILTER (WHERE a > 1) AS total FROM fl GROUP BY g",
    );
    assert_eq!(
        sorted_rows(&mut s, "SELECT * FROM big"),
        vec![vec!["x", "1", "2"], vec!["y", "1", "3"]]
    );
    ok(&mut s, "INSERT INTO fl VALUES (5, 10, 'x'), (6, 0, 'z')");
    ok(&mut s, "DELETE FROM fl WHERE id = 3");
    assert_eq!(
        sorted_rows(&mut s, "SELECT * FROM big"),
        vec![
            vec!["x", "2", "12"],
            vec!["y", "0", "NULL"],
            vec!["z", "0", "NULL"]
        ]
    );
    // The filter must be boolean; only aggregates take one.
    assert_eq!(
        error(&mut s, "SELECT count(*) FILTER (WHERE a) FROM fl"),
        (
            "42804",
            "argument of FILTER must be type boolean, not type integer".into()
        )
    );
    assert_eq!(
        code(&mut s, "SELECT lower(g) FILTER (WHERE a > 1) FROM fl"),
        "42809"
    );
    assert_eq!(
        code(&mut s, "SELECT count(*) FILTER (WHERE sum(a) > 1) FROM fl"),
        "42803"
    );
}

#[test]
fn integer_arithmetic_overflows_in_its_own_type() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    ok(&mut s, "CREATE TABLE sm (id int PRIMARY KEY, s smallint)");
    ok(&mut s, "INSERT INTO sm VALUES (1, -32768)");
    for (sql, message) in [
        ("SELECT 2147483647 + 1", "integer out of range"),
        ("SELECT -2147483648 / -1", "integer out of range"),
        ("SELECT 46341 * 46341", "integer out of range"),
        ("SELECT abs(-2147483648)", "integer out of range"),
        ("SELECT a * 2147483647 FROM fl", "integer out of range"),
        ("SELECT 32767::int2 + 1::int2", "smallint out of range"),
        ("SELECT -s FROM sm", "smallint out of range"),
        ("SELECT s * 2::int2 FROM sm", "smallint out of range"),
        ("SELECT 9223372036854775807 + 1", "bigint out of range"),
        ("SELECT abs(-9223372036854775808)", "bigint out of range"),
        (
            "SELECT 3e38::real * 10::real",
            "value out of range: overflow",
        ),
    ] {
        assert_eq!(error(&mut s, sql), ("22003", message.into()), "{sql}");
    }
    // A view's rows are checked the same way.
    ok(
        &mut s,
        "CREATE VIEW doubled AS SELECT id, a * 2147483647 AS big FROM fl",
    );
    assert_eq!(code(&mut s, "SELECT * FROM doubled"), "22003");
    ok(&mut s, "DROP VIEW doubled");
    // Wider types do not overflow: int4 + int8 is int8, -(-2147483648) an
    // int8 constant, int2 + int4 an int4, real * int a double.
    assert_eq!(
        one_row(
            &mut s,
            "SELECT 2147483647 + 1::bigint, -(-2147483648), 32767::int2 + 1, \
             -9223372036854775808 % -1, 3e38::real * 10"
        ),
        vec![
            "2147483648",
            "2147483648",
            "32768",
            "0",
            "3.000000005497756e+39"
        ]
    );
    // Out-of-range floats.
    assert_eq!(code(&mut s, "SELECT 1e400::float8"), "22003");
    assert_eq!(code(&mut s, "SELECT '1e400'::float8"), "22003");
    assert_eq!(code(&mut s, "SELECT '-1e400'::float8"), "22003");
}

#[test]
fn round_is_half_away_for_numeric_and_half_even_for_floats() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        one_row(
            &mut s,
            "SELECT round(2.5), round(-2.5), round(12.345, 2), round(0.5), round(1234.5, -2), \
             round(12.3456, 6), round(5, 2)"
        ),
        vec!["3", "-3", "12.35", "1", "1200", "12.345600", "5.00"]
    );
    assert_eq!(
        one_row(
            &mut s,
            "SELECT round(2.5::float8), round(3.5::float8), round(-0.5::float8), round(7)"
        ),
        vec!["2", "4", "-0", "7"]
    );
    // round(int) is round(double precision), round(int, s) round(numeric, s).
    assert_eq!(
        column_types(&mut s, "SELECT round(7), round(7, 1), round(2.5)"),
        vec![DataType::Float8, DataType::Numeric, DataType::Numeric]
    );
    assert_eq!(code(&mut s, "SELECT round(2.567::float8, 2)"), "42883");
}

#[test]
fn numeric_results_have_postgres_scales() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        one_row(&mut s, "SELECT 1.50/3, 7::numeric/2, 10.0/3, 3/2.0"),
        vec![
            "0.50000000000000000000",
            "3.5000000000000000",
            "3.3333333333333333",
            "1.5000000000000000"
        ]
    );
    assert_eq!(
        one_row(
            &mut s,
            "SELECT 0.00 + 1, 0.0 * 5, 2.00 * 0, 0.10 * 0.10, 2.5 - 2.50"
        ),
        vec!["1.00", "0.0", "0.00", "0.0100", "0.00"]
    );
    // Exponent literals are numerics, as in PostgreSQL.
    assert_eq!(
        one_row(&mut s, "SELECT 1e5, 1.5e-3, 1.50e1, 1e-10"),
        vec!["100000", "0.0015", "15.0", "0.0000000001"]
    );
    // PostgreSQL prints 32 places for 1/3000000000000.0; a Decimal holds
    // 28, so Aqueduct refuses rather than rounds.
    assert_eq!(code(&mut s, "SELECT 1/3000000000000.0"), "22003");
}

#[test]
fn booleans_become_true_and_false_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        one_row(
            &mut s,
            "SELECT true::text, 'a' || true, false::varchar, concat(true, 1), true"
        ),
        vec!["true", "atrue", "false", "t1", "t"]
    );
    ok(&mut s, "CREATE TABLE bt (id int PRIMARY KEY, t text)");
    ok(&mut s, "INSERT INTO bt VALUES (1, true::text)");
    assert_eq!(rows(&mut s, "SELECT t FROM bt"), vec![vec!["true"]]);
}

#[test]
fn reals_print_their_own_digits() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    // The wire prints a real column with format_float4 (crates/pg); as
    // text, a real keeps its own digits too.
    assert_eq!(
        one_row(
            &mut s,
            "SELECT 0.1::real::text, 'x' || 0.1::real, concat(0.1::real), 123456789::real::text"
        ),
        vec!["0.1", "x0.1", "0.1", "1.2345679e+08"]
    );
    // As a numeric, a real keeps its 6 significant digits.
    assert_eq!(
        one_row(
            &mut s,
            "SELECT 0.1::real::numeric, 123456.7::real::numeric, 1.5::real::numeric(5,2)"
        ),
        vec!["0.1", "123457", "1.50"]
    );
    match ok(&mut s, "SELECT 0.1::real + 0.2::real, 0.1::real * 3") {
        Outcome::Rows { columns, rows, .. } => {
            assert_eq!(columns[0].ty, DataType::Float4);
            assert_eq!(columns[1].ty, DataType::Float8);
            // real + real is computed as a real (0.3), real * int as a double.
            assert_eq!(rows[0][0], Value::Float(0.3f32 as f64));
            assert_eq!(rows[0][1].to_string(), "0.30000000447034836");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn numeric_columns_with_precision_and_scale() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(
        &mut s,
        "CREATE TABLE money (id int PRIMARY KEY, amount numeric(10,2), small numeric(6,2), \
         whole numeric(3))",
    );
    ok(
        &mut s,
        "INSERT INTO money (id, amount) VALUES (1, 1.234), (2, 1), (3, 1.235), (4, -1.235)",
    );
    assert_eq!(
        rows(&mut s, "SELECT amount FROM money ORDER BY id"),
        vec![vec!["1.23"], vec!["1.00"], vec!["1.24"], vec!["-1.24"]]
    );
    let e2 = run(
        &mut s,
        "INSERT INTO money (id, small) VALUES (10, 123456.78)",
    )
    .unwrap_err();
    assert_eq!(e2.code, "22003");
    assert!(
        e2.message.starts_with("numeric field overflow"),
        "{}",
        e2.message
    );
    assert_eq!(
        e2.detail.as_deref(),
        Some("A field with precision 6, scale 2 must round to an absolute value less than 10^4.")
    );
    assert_eq!(
        code(&mut s, "INSERT INTO money (id, whole) VALUES (10, 999.5)"),
        "22003"
    );
    ok(&mut s, "UPDATE money SET amount = amount / 3 WHERE id = 2");
    assert_eq!(
        rows(&mut s, "SELECT amount FROM money WHERE id = 2"),
        vec![vec!["0.33"]]
    );
    // A prepared insert rounds its parameter the same way.
    let p = s
        .prepare("INSERT INTO money (id, amount) VALUES ($1, $2)", &[])
        .unwrap();
    assert_eq!(p.params[1], DataType::Numeric);
    s.execute_prepared(
        &p,
        &[
            Value::Int(5),
            Value::Numeric(aqueduct_values::parse_numeric("2.005").unwrap()),
        ],
    )
    .unwrap();
    assert_eq!(
        rows(&mut s, "SELECT amount FROM money WHERE id = 5"),
        vec![vec!["2.01"]]
    );
    // The stored 1.23 is not 1.234; arithmetic on the column is numeric.
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM money WHERE amount = 1.234"),
        vec![vec!["0"]]
    );
    // The column keeps its modifier (RowDescription reports it, as
    // PostgreSQL does); arithmetic on it is plain numeric.
    assert_eq!(
        column_types(&mut s, "SELECT amount, amount * 2 FROM money"),
        vec![
            DataType::NumericTypmod {
                precision: 10,
                scale: 2
            },
            DataType::Numeric
        ]
    );
    // information_schema gives the type without its modifiers.
    assert_eq!(
        rows(
            &mut s,
            "SELECT data_type FROM information_schema.columns \
             WHERE table_name = 'money' AND column_name = 'amount'"
        ),
        vec![vec!["numeric"]]
    );
    assert_eq!(
        one_row(&mut s, "SELECT 1.234::numeric(10,2), 5::numeric(3,1)"),
        vec!["1.23", "5.0"]
    );
    assert_eq!(code(&mut s, "CREATE TABLE bad (n numeric(0))"), "22023");
    assert_eq!(
        code(&mut s, "CREATE TABLE bad (n numeric(10, 30))"),
        "0A000"
    );
    // The precision and scale survive a restart (they are in the schema record).
    drop(s);
    drop(e);
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        code(
            &mut s,
            "INSERT INTO money (id, small) VALUES (11, 123456.78)"
        ),
        "22003"
    );
    ok(&mut s, "INSERT INTO money (id, amount) VALUES (12, 0.005)");
    assert_eq!(
        rows(&mut s, "SELECT amount FROM money WHERE id = 12"),
        vec![vec!["0.01"]]
    );
}

#[test]
fn conditions_must_be_boolean() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    for (sql, message) in [
        (
            "SELECT * FROM fl WHERE a",
            "argument of WHERE must be type boolean, not type integer",
        ),
        (
            "SELECT NOT a FROM fl",
            "argument of NOT must be type boolean, not type integer",
        ),
        (
            "SELECT true AND 1",
            "argument of AND must be type boolean, not type integer",
        ),
        (
            "SELECT 1 OR true",
            "argument of OR must be type boolean, not type integer",
        ),
        (
            "SELECT * FROM fl WHERE g",
            "argument of WHERE must be type boolean, not type text",
        ),
        (
            "SELECT g FROM fl GROUP BY g HAVING count(*)",
            "argument of HAVING must be type boolean, not type bigint",
        ),
        (
            "SELECT CASE WHEN 1 THEN 1 END",
            "argument of CASE/WHEN must be type boolean, not type integer",
        ),
        (
            "UPDATE fl SET a = 1 WHERE a + 1",
            "argument of WHERE must be type boolean, not type integer",
        ),
    ] {
        assert_eq!(error(&mut s, sql), ("42804", message.into()), "{sql}");
    }
    // NULL, quoted booleans and boolean expressions are fine.
    assert_eq!(
        rows(&mut s, "SELECT id FROM fl WHERE NULL"),
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM fl WHERE 'true' AND a > 1"),
        vec![vec!["2"]]
    );
    assert_eq!(code(&mut s, "SELECT * FROM fl WHERE 'maybe'"), "22P02");
}

#[test]
fn case_and_coalesce_need_a_common_type() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    assert_eq!(
        error(&mut s, "SELECT CASE WHEN true THEN 1 ELSE 'x' || 'y' END"),
        (
            "42804",
            "CASE types text and integer cannot be matched".into()
        )
    );
    assert_eq!(
        error(&mut s, "SELECT COALESCE(g, a) FROM fl"),
        (
            "42804",
            "COALESCE types text and integer cannot be matched".into()
        )
    );
    assert_eq!(
        code(&mut s, "SELECT CASE WHEN true THEN 1 ELSE true END"),
        "42804"
    );
    // An untyped literal takes the others' type, or fails as that type.
    assert_eq!(
        code(&mut s, "SELECT CASE WHEN true THEN 1 ELSE 'x' END"),
        "22P02"
    );
    assert_eq!(
        one_row(&mut s, "SELECT CASE WHEN true THEN 1 ELSE '7' END, COALESCE(NULL, '2024-01-01'::date, '2024-02-01')"),
        vec!["1", "2024-01-01"]
    );
    // Numbers resolve to the widest type.
    match ok(
        &mut s,
        "SELECT CASE WHEN true THEN 1 ELSE 2.5 END, CASE WHEN false THEN 1 ELSE 2.5 END, \
         COALESCE(a, 0.5), CASE WHEN true THEN 10000000000000000 ELSE 1.5::float8 END \
         FROM fl WHERE id = 1",
    ) {
        Outcome::Rows { columns, rows, .. } => {
            let types: Vec<DataType> = columns.into_iter().map(|c| c.ty).collect();
            assert_eq!(
                types,
                vec![
                    DataType::Numeric,
                    DataType::Numeric,
                    DataType::Numeric,
                    DataType::Float8
                ]
            );
            let text: Vec<String> = rows[0].iter().map(|v| v.to_string()).collect();
            assert_eq!(text, vec!["1", "2.5", "1", "1e+16"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sqlstates_of_postgres_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    setup(&mut s);
    assert_eq!(code(&mut s, "SELECT '2024-02-30'::date"), "22008");
    assert_eq!(code(&mut s, "SELECT 'soon'::date"), "22007");
    assert_eq!(code(&mut s, "SELECT a FROM fl OFFSET -1"), "2201X");
    assert_eq!(code(&mut s, "SELECT a FROM fl LIMIT -1"), "2201W");
    assert_eq!(
        error(&mut s, "SELECT * FROM fl WHERE g = 1"),
        ("42883", "operator does not exist: text = integer".into())
    );
    assert_eq!(code(&mut s, "SELECT * FROM fl WHERE g IN (1, 2)"), "42883");
    assert_eq!(code(&mut s, "SELECT * FROM fl WHERE a = 'one'"), "22P02");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM fl WHERE a = '2' OR '3' = a"),
        vec![vec!["2"]]
    );
    assert_eq!(
        error(&mut s, "SELECT DISTINCT a FROM fl ORDER BY g"),
        (
            "42P10",
            "for SELECT DISTINCT, ORDER BY expressions must appear in select list".into()
        )
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT DISTINCT a + 1 FROM fl WHERE a IS NOT NULL ORDER BY a + 1 DESC"
        ),
        vec![vec!["4"], vec!["3"], vec!["2"]]
    );
}

#[test]
fn upper_maps_each_character_alone() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    assert_eq!(
        one_row(&mut s, "SELECT upper('straße'), lower('ABC')"),
        vec!["STRAßE", "abc"]
    );
}
