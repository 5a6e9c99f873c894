//! The SQL front end answers any input with a result or an error, never a
//! panic: random token soups and mutated valid statements against a live
//! session, which must stay usable afterwards.

use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::{Engine, Outcome};
use aqueduct_values::{DataType, Value};
use proptest::prelude::*;

const TOKENS: &[&str] = &[
    "SELECT",
    "INSERT",
    "INTO",
    "VALUES",
    "UPDATE",
    "SET",
    "DELETE",
    "FROM",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "NULL",
    "IS",
    "IN",
    "BETWEEN",
    "LIKE",
    "ORDER",
    "BY",
    "GROUP",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "DESC",
    "CREATE",
    "TABLE",
    "DROP",
    "INDEX",
    "ON",
    "PRIMARY",
    "KEY",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "RETURNING",
    "CONFLICT",
    "DO",
    "NOTHING",
    "CAST",
    "AS",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "count(*)",
    "sum(",
    "max(",
    "lower(",
    "coalesce(",
    "t",
    "u",
    "id",
    "v",
    "x",
    "*",
    ",",
    "(",
    ")",
    ";",
    "=",
    "<",
    ">",
    "<>",
    "+",
    "-",
    "/",
    "%",
    "||",
    "0",
    "1",
    "-1",
    "2147483648",
    "9223372036854775807",
    "1e308",
    "0.5",
    "'a'",
    "''",
    "'2024-01-01'",
    "'{\"k\":1}'",
    "$1",
    "$2",
    "$0",
    "$99999",
    "::int",
    "::text",
    "::date",
    "integer",
    "bigint",
    "text",
    "numeric",
    "jsonb",
    "bytea",
    "true",
    "false",
    "DEFAULT",
    "information_schema.tables",
    "pg_catalog.pg_class",
    "SHOW",
    "aqueduct.last_lsn",
];

fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..24).prop_map(|t| t.join(" "))
}

fn mutated() -> impl Strategy<Value = String> {
    let base = prop::sample::select(
        &[
            "SELECT id, v FROM t WHERE id = 1 ORDER BY v DESC LIMIT 3",
            "INSERT INTO t VALUES (5, 'five') ON CONFLICT (id) DO UPDATE SET v = excluded.v",
            "UPDATE t SET v = v || 'x' WHERE id BETWEEN 1 AND 3 RETURNING *",
            "SELECT count(*), max(v) FROM t GROUP BY v HAVING count(*) > 0",
            "DELETE FROM t WHERE v LIKE 'o%'",
        ][..],
    );
    (base, any::<u64>(), 0usize..6).prop_map(|(s, seed, edits)| {
        let mut b: Vec<char> = s.chars().collect();
        let mut x = seed;
        for _ in 0..edits {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (x >> 33) as usize % (b.len() + 1);
            match x % 3 {
                0 if i < b.len() => {
                    b.remove(i);
                }
                1 => b.insert(
                    i,
                    ['(', ')', '\'', ';', '$', '9', ' ', ','][(x >> 20) as usize % 8],
                ),
                _ if i < b.len() => b[i] = char::from(b'!' + (x >> 40) as u8 % 90),
                _ => {}
            }
        }
        b.into_iter().collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_input_gets_an_answer(inputs in prop::collection::vec(prop_oneof![soup(), mutated()], 1..6)) {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = Log::open(dir.path(), Options { sync: SyncPolicy::Never, ..Default::default() }).unwrap();
        let engine = Engine::open(log, &mut |_| {}).unwrap();
        let mut s = engine.session();
        s.execute("CREATE TABLE t (id integer PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'one'), (2, 'two')");
        for sql in &inputs {
            let _ = s.execute(sql);
            if let Ok(p) = s.prepare(sql, &[]) {
                let params: Vec<Value> = p.params.iter().map(|t| match t {
                    DataType::Int2 | DataType::Int4 | DataType::Int8 => Value::Int(1),
                    _ => Value::Null,
                }).collect();
                let _ = s.execute_prepared(&p, &params);
            }
        }
        // Whatever happened, the session still works after a ROLLBACK.
        s.execute("ROLLBACK");
        let r = s.execute("SELECT 1").pop().unwrap().unwrap();
        let is_rows = matches!(r, Outcome::Rows { .. });
        prop_assert!(is_rows, "SELECT 1 answered {:?}", r);
    }
}
