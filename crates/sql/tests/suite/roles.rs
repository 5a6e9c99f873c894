//! Roles and privileges: CREATE/ALTER/DROP ROLE and USER, GRANT/REVOKE,
//! owners, views read with their owner's rights on every read path, and
//! all of it replayed from the log after a restart.

use crate::common;

use aqueduct_sql::{Outcome, Principal, Session};
use aqueduct_values::Value;
use common::{engine, ok, rows, run};

fn denied(s: &mut Session, sql: &str) -> String {
    match run(s, sql) {
        Err(e) => {
            assert_eq!(e.code, "42501", "{sql}: {e}");
            e.message
        }
        Ok(o) => panic!("{sql}: expected 42501, got {o:?}"),
    }
}

fn code(s: &mut Session, sql: &str) -> &'static str {
    match run(s, sql) {
        Err(e) => e.code,
        Ok(o) => panic!("{sql}: expected an error, got {o:?}"),
    }
}

fn tag(s: &mut Session, sql: &str) -> String {
    match ok(s, sql) {
        Outcome::Command { tag } | Outcome::Rows { tag, .. } | Outcome::CopyOut { tag, .. } => tag,
        Outcome::Empty | Outcome::CopyIn { .. } => String::new(),
    }
}

#[test]
fn roles_are_created_altered_and_dropped_with_postgresql_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    assert_eq!(
        tag(&mut admin, "CREATE ROLE reader WITH NOLOGIN"),
        "CREATE ROLE"
    );
    assert_eq!(
        tag(&mut admin, "CREATE USER alice WITH PASSWORD 'wonderland'"),
        "CREATE ROLE"
    );
    ok(&mut admin, "CREATE ROLE boss LOGIN SUPERUSER PASSWORD 'x'");
    assert_eq!(code(&mut admin, "CREATE ROLE alice"), "42710");
    assert_eq!(code(&mut admin, "CREATE USER reader"), "42710");
    ok(&mut admin, "CREATE ROLE IF NOT EXISTS alice");
    assert_eq!(code(&mut admin, "DROP ROLE nobody"), "42704");
    assert_eq!(code(&mut admin, "ALTER ROLE nobody LOGIN"), "42704");
    assert_eq!(
        code(&mut admin, "GRANT SELECT ON nothing TO alice"),
        "42P01"
    );
    ok(&mut admin, "DROP ROLE IF EXISTS nobody");
    assert_eq!(code(&mut admin, "CREATE ROLE public"), "42939");
    // Options Aqueduct does not implement are refused, not ignored.
    for sql in [
        "CREATE ROLE r VALID UNTIL '2030-01-01'",
        "CREATE ROLE r CONNECTION LIMIT 3",
        "CREATE ROLE r IN ROLE reader",
        "CREATE ROLE r CREATEDB",
        "ALTER ROLE reader VALID UNTIL '2030-01-01'",
        "GRANT SELECT (id) ON t TO reader",
        "GRANT TRUNCATE ON t TO reader",
    ] {
        assert_eq!(code(&mut admin, sql), "0A000", "{sql}");
    }
    // Role membership does not even parse.
    assert!(run(&mut admin, "GRANT reader TO boss").is_err());

    {
        let catalog = e.database().read();
        let alice = catalog.role("alice").unwrap();
        assert!(alice.login, "CREATE USER logs in");
        assert!(!alice.superuser);
        let verifier = alice.password.as_ref().unwrap();
        assert!(verifier.verify("wonderland"));
        // Only the verifier is kept.
        assert!(!verifier.to_string().contains("wonderland"));
        assert!(!catalog.role("reader").unwrap().login);
        assert!(catalog.role("boss").unwrap().superuser);
    }
    // Nothing in the log holds the password itself.
    let mut log_bytes = Vec::new();
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() {
            log_bytes.extend(std::fs::read(p).unwrap());
        }
    }
    assert!(!log_bytes.windows(10).any(|w| w == b"wonderland"));

    ok(
        &mut admin,
        "ALTER ROLE alice WITH NOLOGIN PASSWORD 'changed'",
    );
    ok(&mut admin, "ALTER USER reader LOGIN");
    {
        let catalog = e.database().read();
        let alice = catalog.role("alice").unwrap();
        assert!(!alice.login);
        assert!(alice.password.as_ref().unwrap().verify("changed"));
        assert!(catalog.role("reader").unwrap().login);
    }
    assert_eq!(e.login_verifier("alice"), None, "NOLOGIN cannot log in");
    assert!(e.login_verifier("boss").unwrap().verify("x"));
    ok(&mut admin, "ALTER ROLE alice PASSWORD NULL");
    assert!(e
        .database()
        .read()
        .role("alice")
        .unwrap()
        .password
        .is_none());
    assert_eq!(tag(&mut admin, "DROP USER alice, reader"), "DROP ROLE");
    assert!(e.database().read().role("alice").is_none());

    // Inside a transaction block: refused, as other schema changes.
    ok(&mut admin, "BEGIN");
    assert_eq!(code(&mut admin, "CREATE ROLE later"), "25001");
    ok(&mut admin, "ROLLBACK");
}

#[test]
fn only_superusers_and_createrole_manage_roles() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(&mut admin, "CREATE USER plain PASSWORD 'p'");
    ok(&mut admin, "CREATE USER manager CREATEROLE PASSWORD 'p'");
    ok(&mut admin, "CREATE USER chief SUPERUSER PASSWORD 'p'");

    let mut plain = e.session_as(Principal::role("plain"));
    assert!(denied(&mut plain, "CREATE ROLE x").contains("permission denied to create role"));
    denied(&mut plain, "DROP ROLE manager");
    denied(&mut plain, "ALTER ROLE manager NOLOGIN");
    // A role may change its own password, and nothing else about itself.
    ok(&mut plain, "ALTER ROLE plain PASSWORD 'mine'");
    assert!(e.login_verifier("plain").unwrap().verify("mine"));
    denied(&mut plain, "ALTER ROLE plain SUPERUSER");

    let mut manager = e.session_as(Principal::role("manager"));
    ok(&mut manager, "CREATE ROLE helper LOGIN");
    // The trusted session above owns nothing yet; once it does, a role
    // taking its name would inherit the objects: only superusers may.
    ok(&mut admin, "CREATE TABLE admins (id bigint PRIMARY KEY)");
    assert!(denied(&mut manager, "CREATE ROLE aqueduct LOGIN PASSWORD 'x'").contains("admins"));
    denied(&mut manager, "CREATE ROLE root SUPERUSER");
    denied(&mut manager, "DROP ROLE chief");
    ok(&mut manager, "DROP ROLE helper");

    // A superuser role of the catalog is a superuser.
    let mut chief = e.session_as(Principal::role("chief"));
    assert_eq!(rows(&mut chief, "SHOW is_superuser"), vec![vec!["on"]]);
    ok(&mut chief, "CREATE ROLE root SUPERUSER");
    assert_eq!(rows(&mut plain, "SHOW is_superuser"), vec![vec!["off"]]);
    denied(&mut plain, "CREATE TIME MAP m ON t (x) EVERY '5s'");
}

#[test]
fn current_user_reports_the_role() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut trusted = e.session();
    assert_eq!(
        rows(&mut trusted, "SELECT current_user, session_user"),
        vec![vec!["aqueduct", "aqueduct"]]
    );
    assert_eq!(rows(&mut trusted, "SHOW is_superuser"), vec![vec!["on"]]);
    ok(&mut trusted, "CREATE USER alice PASSWORD 'p'");
    let mut alice = e.session_as(Principal::role("alice"));
    assert_eq!(
        rows(
            &mut alice,
            "SELECT current_user, session_user, current_role, user"
        ),
        vec![vec!["alice", "alice", "alice", "alice"]]
    );
    let p = alice.prepare("SELECT current_user", &[]).unwrap();
    assert_eq!(
        common::prepared_rows(&mut alice, &p, &[]),
        vec![vec!["alice"]]
    );
    assert_eq!(rows(&mut alice, "SHOW is_superuser"), vec![vec!["off"]]);
    assert_eq!(
        rows(&mut alice, "SHOW session_authorization"),
        vec![vec!["alice"]]
    );
    let mut admin = e.session_as(Principal::superuser("admin"));
    assert_eq!(rows(&mut admin, "SELECT current_user"), vec![vec!["admin"]]);
    assert_eq!(rows(&mut admin, "SHOW is_superuser"), vec![vec!["on"]]);
}

#[test]
fn table_privileges_are_checked_per_statement() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(
        &mut admin,
        "CREATE TABLE t (id bigint PRIMARY KEY, x integer, note text)",
    );
    ok(&mut admin, "CREATE TABLE other (id bigint PRIMARY KEY)");
    ok(
        &mut admin,
        "INSERT INTO t VALUES (1, 10, 'a'), (2, 20, 'b')",
    );
    ok(&mut admin, "CREATE USER alice PASSWORD 'p'");
    ok(&mut admin, "CREATE USER bob PASSWORD 'p'");
    let mut alice = e.session_as(Principal::role("alice"));

    assert_eq!(
        denied(&mut alice, "SELECT * FROM t"),
        "permission denied for table t"
    );
    denied(&mut alice, "SELECT * FROM t WHERE id = 1");
    denied(&mut alice, "SELECT count(*) FROM t");
    denied(&mut alice, "SELECT * FROM t JOIN other ON t.id = other.id");
    denied(&mut alice, "EXPLAIN SELECT * FROM t");
    denied(&mut alice, "INSERT INTO t VALUES (3, 30, 'c')");
    denied(&mut alice, "UPDATE t SET x = 1");
    denied(&mut alice, "DELETE FROM t");

    ok(&mut admin, "GRANT SELECT ON t TO alice");
    assert_eq!(
        rows(&mut alice, "SELECT x FROM t WHERE id = 2"),
        vec![vec!["20"]]
    );
    assert_eq!(rows(&mut alice, "SELECT count(*) FROM t"), vec![vec!["2"]]);
    // The join also reads `other`.
    assert_eq!(
        denied(&mut alice, "SELECT * FROM t JOIN other ON t.id = other.id"),
        "permission denied for table other"
    );
    // Inside a transaction block too (the one-shot path).
    ok(&mut alice, "BEGIN");
    assert_eq!(
        rows(&mut alice, "SELECT x FROM t WHERE id = 1"),
        vec![vec!["10"]]
    );
    ok(&mut alice, "COMMIT");

    // UPDATE and DELETE without a WHERE reading the table need only their
    // own privilege; with one they need SELECT too (as in PostgreSQL).
    let mut bob = e.session_as(Principal::role("bob"));
    ok(&mut admin, "GRANT UPDATE, DELETE ON TABLE t TO bob");
    assert_eq!(tag(&mut bob, "UPDATE t SET note = 'all'"), "UPDATE 2");
    denied(&mut bob, "UPDATE t SET x = 5 WHERE id = 1");
    denied(&mut bob, "UPDATE t SET x = x + 1");
    denied(&mut bob, "UPDATE t SET x = 5 RETURNING id");
    denied(&mut bob, "DELETE FROM t WHERE id = 1");
    denied(&mut bob, "INSERT INTO t VALUES (3, 30, 'c')");
    ok(&mut admin, "GRANT INSERT ON t TO bob");
    ok(&mut bob, "INSERT INTO t VALUES (3, 30, 'c')");
    denied(&mut bob, "INSERT INTO t VALUES (4, 40, 'd') RETURNING id");
    denied(&mut bob, "INSERT INTO t SELECT id + 10, x, note FROM t");
    ok(&mut admin, "GRANT SELECT ON t TO bob");
    assert_eq!(tag(&mut bob, "DELETE FROM t WHERE id = 3"), "DELETE 1");
    assert_eq!(
        tag(&mut bob, "UPDATE t SET x = x + 1 WHERE id = 1"),
        "UPDATE 1"
    );

    // REVOKE takes effect at once, also for statements prepared before.
    let p = alice.prepare("SELECT x FROM t WHERE id = $1", &[]).unwrap();
    assert_eq!(
        common::prepared_rows(&mut alice, &p, &[Value::Int(2)]),
        vec![vec!["20"]]
    );
    assert_eq!(tag(&mut admin, "REVOKE SELECT ON t FROM alice"), "REVOKE");
    let err = alice.execute_prepared(&p, &[Value::Int(2)]).unwrap_err();
    assert_eq!(err.code, "42501");
    denied(&mut alice, "SELECT * FROM t");

    // ALL and PUBLIC.
    ok(&mut admin, "GRANT ALL PRIVILEGES ON t TO PUBLIC");
    ok(&mut alice, "INSERT INTO t VALUES (5, 50, 'e')");
    assert_eq!(tag(&mut alice, "DELETE FROM t WHERE id = 5"), "DELETE 1");
    ok(&mut admin, "REVOKE ALL ON t FROM PUBLIC");
    denied(&mut alice, "SELECT * FROM t");
    // bob still holds his own grants.
    ok(&mut bob, "SELECT * FROM t");
}

#[test]
fn owners_drop_and_grant_others_may_not() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(&mut admin, "CREATE USER alice PASSWORD 'p'");
    ok(&mut admin, "CREATE USER bob PASSWORD 'p'");
    ok(
        &mut admin,
        "CREATE TABLE admins_table (id bigint PRIMARY KEY)",
    );
    let mut alice = e.session_as(Principal::role("alice"));
    let mut bob = e.session_as(Principal::role("bob"));

    ok(
        &mut alice,
        "CREATE TABLE notes (id bigint PRIMARY KEY, body text)",
    );
    ok(&mut alice, "INSERT INTO notes VALUES (1, 'mine')");
    assert_eq!(
        rows(&mut alice, "SELECT body FROM notes"),
        vec![vec!["mine"]]
    );
    ok(&mut alice, "CREATE INDEX notes_body ON notes (body)");
    ok(
        &mut alice,
        "CREATE VIEW note_count AS SELECT count(*) AS n FROM notes",
    );
    assert_eq!(
        rows(&mut alice, "SELECT n FROM note_count"),
        vec![vec!["1"]]
    );

    denied(&mut bob, "SELECT * FROM notes");
    assert_eq!(
        denied(&mut bob, "DROP TABLE notes"),
        "must be owner of table notes"
    );
    assert_eq!(
        denied(&mut bob, "GRANT SELECT ON notes TO bob"),
        "must be owner of table notes"
    );
    denied(&mut bob, "CREATE INDEX bob_idx ON notes (body)");
    denied(&mut bob, "DROP INDEX notes_body");
    assert_eq!(
        denied(&mut bob, "DROP VIEW note_count"),
        "must be owner of view note_count"
    );
    denied(&mut alice, "DROP TABLE admins_table");
    denied(&mut alice, "GRANT SELECT ON admins_table TO alice");

    ok(&mut alice, "GRANT SELECT ON notes TO bob");
    assert_eq!(rows(&mut bob, "SELECT body FROM notes"), vec![vec!["mine"]]);
    // A role that owns objects cannot be dropped.
    assert_eq!(code(&mut admin, "DROP ROLE alice"), "2BP01");
    // Dropping a role revokes what it was granted.
    ok(&mut admin, "CREATE USER carol PASSWORD 'p'");
    ok(&mut alice, "GRANT SELECT ON notes TO carol");
    ok(&mut admin, "DROP ROLE carol");
    ok(&mut admin, "CREATE USER carol PASSWORD 'p'");
    let mut carol = e.session_as(Principal::role("carol"));
    denied(&mut carol, "SELECT * FROM notes");

    ok(&mut alice, "DROP VIEW note_count");
    ok(&mut alice, "DROP TABLE notes");
    // Superusers may drop anything.
    ok(&mut bob, "CREATE TABLE bobs (id bigint PRIMARY KEY)");
    ok(&mut admin, "DROP TABLE bobs");
    ok(&mut admin, "DROP ROLE alice");
}

#[test]
fn views_are_read_with_their_owners_rights_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(
        &mut admin,
        "CREATE TABLE salaries (id bigint PRIMARY KEY, dept text, pay integer)",
    );
    ok(
        &mut admin,
        "INSERT INTO salaries VALUES (1, 'eng', 100), (2, 'eng', 120), (3, 'ops', 90)",
    );
    ok(
        &mut admin,
        "CREATE VIEW dept_pay AS SELECT dept, count(*) AS n, sum(pay) AS total FROM salaries GROUP BY dept",
    );
    ok(
        &mut admin,
        "CREATE VIEW dept_sizes AS SELECT dept, n FROM dept_pay",
    );
    ok(&mut admin, "CREATE USER alice PASSWORD 'p'");
    ok(&mut admin, "GRANT SELECT ON dept_pay, dept_sizes TO alice");
    let mut alice = e.session_as(Principal::role("alice"));

    denied(&mut alice, "SELECT * FROM salaries");
    // A whole view, a keyed view read, a prepared keyed read, a view over
    // a view, a query over views answered by an automatic view and one
    // evaluated once in a transaction: all read with the owner's rights.
    assert_eq!(
        common::sorted_rows(&mut alice, "SELECT dept, total FROM dept_pay"),
        vec![vec!["eng", "220"], vec!["ops", "90"]]
    );
    assert_eq!(
        rows(&mut alice, "SELECT total FROM dept_pay WHERE dept = 'ops'"),
        vec![vec!["90"]]
    );
    let p = alice
        .prepare("SELECT n FROM dept_pay WHERE dept = $1", &[])
        .unwrap();
    assert_eq!(
        common::prepared_rows(&mut alice, &p, &[Value::Text("eng".into())]),
        vec![vec!["2"]]
    );
    assert_eq!(
        rows(&mut alice, "SELECT n FROM dept_sizes WHERE dept = 'eng'"),
        vec![vec!["2"]]
    );
    ok(
        &mut admin,
        "CREATE TABLE depts (name text PRIMARY KEY, floor integer)",
    );
    ok(
        &mut admin,
        "INSERT INTO depts VALUES ('eng', 3), ('ops', 1)",
    );
    let joined = "SELECT d.floor, p.total FROM depts d JOIN dept_pay p ON d.name = p.dept WHERE d.name = 'eng'";
    assert_eq!(
        denied(&mut alice, joined),
        "permission denied for table depts"
    );
    ok(&mut admin, "GRANT SELECT ON depts TO alice");
    assert_eq!(rows(&mut alice, joined), vec![vec!["3", "220"]]);
    assert!(rows(&mut alice, &format!("EXPLAIN {joined}"))
        .concat()
        .concat()
        .contains("auto"));
    ok(&mut alice, "BEGIN");
    assert_eq!(
        rows(&mut alice, "SELECT n FROM dept_sizes WHERE dept = 'ops'"),
        vec![vec!["1"]]
    );
    ok(&mut alice, "COMMIT");
    // A query mixing the view with the table it hides is refused for the table.
    assert_eq!(
        denied(
            &mut alice,
            "SELECT s.pay FROM salaries s JOIN dept_pay d ON s.dept = d.dept WHERE s.id = 1"
        ),
        "permission denied for table salaries"
    );
    // Without the grant on the view, no path reads it.
    ok(&mut admin, "REVOKE SELECT ON dept_pay FROM alice");
    assert_eq!(
        denied(&mut alice, "SELECT * FROM dept_pay"),
        "permission denied for view dept_pay"
    );
    let err = alice
        .execute_prepared(&p, &[Value::Text("eng".into())])
        .unwrap_err();
    assert_eq!(err.code, "42501");
    // dept_sizes is still granted: it reads dept_pay with its owner's rights.
    assert_eq!(
        rows(&mut alice, "SELECT n FROM dept_sizes WHERE dept = 'eng'"),
        vec![vec!["2"]]
    );

    // A view owned by a role reads with that role's rights: when the owner
    // loses them, readers of the view are refused too.
    ok(&mut admin, "CREATE USER bob PASSWORD 'p'");
    ok(&mut admin, "GRANT SELECT ON salaries TO bob");
    let mut bob = e.session_as(Principal::role("bob"));
    ok(
        &mut bob,
        "CREATE VIEW eng_pay AS SELECT id, pay FROM salaries WHERE dept = 'eng'",
    );
    ok(&mut bob, "GRANT SELECT ON eng_pay TO alice");
    assert_eq!(
        common::sorted_rows(&mut alice, "SELECT pay FROM eng_pay"),
        vec![vec!["100"], vec!["120"]]
    );
    ok(&mut admin, "REVOKE SELECT ON salaries FROM bob");
    let e1 = run(&mut alice, "SELECT pay FROM eng_pay WHERE id = 1").unwrap_err();
    assert_eq!(e1.code, "42501");
    assert_eq!(e1.message, "permission denied for table salaries");
    assert!(e1.detail.unwrap().contains("bob"));
    // Creating a view over what one cannot read is refused.
    denied(&mut alice, "CREATE VIEW peek AS SELECT * FROM salaries");
}

#[test]
fn roles_owners_and_grants_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(dir.path());
        let mut admin = e.session();
        ok(&mut admin, "CREATE USER alice PASSWORD 'secret' CREATEROLE");
        ok(&mut admin, "CREATE USER bob PASSWORD 'other'");
        let mut alice = e.session_as(Principal::role("alice"));
        ok(&mut alice, "CREATE TABLE mine (id bigint PRIMARY KEY)");
        ok(&mut alice, "INSERT INTO mine VALUES (7)");
        ok(&mut alice, "GRANT SELECT ON mine TO bob");
    }
    let e = engine(dir.path());
    assert!(e.login_verifier("alice").unwrap().verify("secret"));
    assert!(e.database().read().role("alice").unwrap().createrole);
    let mut bob = e.session_as(Principal::role("bob"));
    assert_eq!(rows(&mut bob, "SELECT id FROM mine"), vec![vec!["7"]]);
    denied(&mut bob, "DROP TABLE mine");
    denied(&mut bob, "DELETE FROM mine");
    let mut alice = e.session_as(Principal::role("alice"));
    ok(&mut alice, "DELETE FROM mine");
    let mut admin = e.session();
    assert_eq!(code(&mut admin, "CREATE ROLE bob"), "42710");
}

#[test]
fn bootstrap_users_are_superusers_no_role_may_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    e.set_bootstrap_users(["admin".to_string()]);
    let mut admin = e.session_as(Principal::superuser("admin"));
    assert_eq!(code(&mut admin, "CREATE ROLE admin"), "42710");
    ok(&mut admin, "CREATE TABLE t (id bigint PRIMARY KEY)");
    ok(&mut admin, "CREATE USER alice PASSWORD 'p'");
    // Bootstrap users can be grantees (and are superusers anyway).
    ok(&mut admin, "GRANT SELECT ON t TO admin");
    assert_eq!(
        e.database()
            .read()
            .owner(e.database().read().table("t").unwrap().schema.id),
        Some("admin")
    );
    let mut alice = e.session_as(Principal::role("alice"));
    denied(&mut alice, "SELECT * FROM t");
    assert_eq!(code(&mut admin, "DROP ROLE admin"), "42501");
}

#[test]
fn role_statements_work_through_the_extended_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(&mut admin, "CREATE TABLE t (id bigint PRIMARY KEY)");
    admin
        .execute_with_params("CREATE USER alice PASSWORD 'p'", &[])
        .unwrap();
    admin
        .execute_with_params("GRANT SELECT ON t TO alice", &[])
        .unwrap();
    let mut alice = e.session_as(Principal::role("alice"));
    alice.execute_with_params("SELECT * FROM t", &[]).unwrap();
    let err = alice
        .execute_with_params("INSERT INTO t VALUES ($1)", &[Value::Int(1)])
        .unwrap_err();
    assert_eq!(err.code, "42501");
}

/// A maintained view would hold its creator's name (or nobody's) for every
/// reader: `current_user` and its kin are refused there, as `now()` is,
/// and answer each reader's own name in a query.
#[test]
fn current_user_is_refused_in_a_maintained_view() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = e.session();
    ok(&mut s, "CREATE TABLE t (id bigint PRIMARY KEY)");
    for f in ["current_user", "session_user"] {
        let sql = format!("CREATE VIEW v AS SELECT id, {f} AS who FROM t");
        assert_eq!(code(&mut s, &sql), "0A000", "{sql}");
    }
    ok(&mut s, "INSERT INTO t VALUES (1)");
    let me = rows(&mut s, "SELECT current_user")[0][0].clone();
    assert_eq!(
        rows(&mut s, "SELECT id, current_user FROM t"),
        vec![vec!["1".to_string(), me]]
    );
}

/// `has_table_privilege` answers what the statement would be allowed: the
/// owner and superusers may do all, others what grants to them or PUBLIC
/// give; the catalog's own relations are readable by all.
#[test]
fn has_table_privilege_follows_grants_and_owners() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut admin = e.session();
    ok(&mut admin, "CREATE ROLE alice LOGIN");
    ok(&mut admin, "CREATE ROLE bob LOGIN");
    ok(&mut admin, "CREATE TABLE t (id int PRIMARY KEY)");
    ok(&mut admin, "GRANT SELECT ON t TO alice");
    let answer = |s: &mut Session, sql: &str| match ok(s, sql) {
        Outcome::Rows { rows, .. } => rows[0]
            .iter()
            .map(|v| v.to_text().unwrap_or_else(|| "NULL".into()))
            .collect::<Vec<_>>()
            .join(" "),
        other => panic!("{other:?}"),
    };
    let mut alice = e.session_as(Principal::role("alice"));
    assert_eq!(
        answer(
            &mut alice,
            "SELECT has_table_privilege('t', 'SELECT'), has_table_privilege('t', 'insert'), \
             has_table_privilege('pg_class'::regclass, 'SELECT'), has_table_privilege('bob', 't', 'SELECT')"
        ),
        "t f t f"
    );
    assert_eq!(
        answer(
            &mut admin,
            "SELECT has_table_privilege('t', 'DELETE'), has_table_privilege('alice', 't', 'UPDATE')"
        ),
        "t f"
    );
    // Its answer agrees with what running the statement finds.
    assert_eq!(code(&mut alice, "INSERT INTO t VALUES (1)"), "42501");
}
