//! `aqueduct subscribe` end to end: a server with a publication, the
//! agent bootstrapping into SQLite and following, checked against the
//! publication's query recomputed on the server (the oracle is SQL, not
//! the publisher's code): after bootstrap, after updates, deletes, row
//! filter transitions and an added column, and after the agent was killed
//! with kill -9 several times while a writer kept writing.
//!
//! No timed sleeps: every wait is for a condition, under a deadline.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use aqueduct_sinks::SqliteSink;
use serde_json::{json, Map, Value as Json};

use common::{aqueduct, serve, serve_at, Running, Server, STEP_TIMEOUT};

fn client(pg: u16) -> postgres::Client {
    postgres::Config::new()
        .host("127.0.0.1")
        .port(pg)
        .user("test")
        .dbname("aqueduct")
        .connect_timeout(STEP_TIMEOUT)
        .connect(postgres::NoTls)
        .unwrap()
}

fn subscribe_args(server: &Server, sink: &Path, mode: &str) -> Vec<String> {
    vec![
        "subscribe".into(),
        "--from".into(),
        format!("127.0.0.1:{}", server.http),
        "--publication".into(),
        "social".into(),
        "--name".into(),
        "t1".into(),
        "--mode".into(),
        mode.into(),
        "--into".into(),
        format!("sqlite:{}", sink.display()),
        "--workers".into(),
        "3".into(),
    ]
}

/// Runs the agent until it has applied everything committed when it
/// started.
fn catch_up(server: &Server, sink: &Path, mode: &str) {
    catch_up_as(server, sink, mode, "t1");
}

/// [`catch_up`] for the subscriber called `name`; what the agent said.
fn catch_up_as(server: &Server, sink: &Path, mode: &str, name: &str) -> String {
    let mut args = subscribe_args(server, sink, mode);
    let at = args.iter().position(|a| a == "--name").unwrap() + 1;
    args[at] = name.to_string();
    common::subscribe_until_caught_up(&args)
}

/// The publication's objects as the server computes them with SQL.
fn oracle(c: &mut postgres::Client) -> BTreeMap<String, BTreeMap<String, Map<String, Json>>> {
    let mut out = BTreeMap::new();
    let mut users = BTreeMap::new();
    for r in c
        .query("SELECT id, name, lower(email) FROM users", &[])
        .unwrap()
    {
        let id: i32 = r.get(0);
        let name: Option<String> = r.get(1);
        let email: Option<String> = r.get(2);
        let mut m = Map::new();
        m.insert("id".into(), json!(id));
        m.insert("name".into(), json!(name));
        m.insert("email_lc".into(), json!(email));
        users.insert(json!([id]).to_string(), m);
    }
    out.insert("users".to_string(), users);
    // Every column of the visible posts, by name, whatever ALTER TABLE
    // did to them.
    let mut posts = BTreeMap::new();
    for r in c.query("SELECT * FROM posts WHERE NOT draft", &[]).unwrap() {
        let mut m = Map::new();
        for (i, col) in r.columns().iter().enumerate() {
            let v = match col.type_().name() {
                "int4" => json!(r.get::<_, Option<i32>>(i)),
                "bool" => json!(r.get::<_, Option<bool>>(i)),
                _ => json!(r.get::<_, Option<String>>(i)),
            };
            m.insert(col.name().to_string(), v);
        }
        let id: i32 = r.get("id");
        posts.insert(json!([id]).to_string(), m);
    }
    out.insert("posts".to_string(), posts);
    out
}

/// What the sink holds, in the same shape.
fn sink_state(path: &Path) -> BTreeMap<String, BTreeMap<String, Map<String, Json>>> {
    let sink = SqliteSink::open(path, "check").unwrap();
    let mut out = BTreeMap::new();
    for object in ["users", "posts"] {
        let rows = sink.rows(object).unwrap();
        out.insert(
            object.to_string(),
            rows.into_iter().map(|(k, (_, attrs))| (k, attrs)).collect(),
        );
    }
    out
}

fn assert_same(c: &mut postgres::Client, sink: &Path, when: &str) {
    let want = oracle(c);
    let got = sink_state(sink);
    for (object, rows) in &want {
        let have = &got[object];
        assert_eq!(
            have.len(),
            rows.len(),
            "{when}: {object} has {} rows in the sink, {} at the source",
            have.len(),
            rows.len()
        );
        for (k, row) in rows {
            assert_eq!(have.get(k), Some(row), "{when}: {object} row {k}");
        }
    }
}

fn setup(c: &mut postgres::Client) {
    c.batch_execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, email text);
         CREATE TABLE posts (id int PRIMARY KEY, author int, body text, draft bool);
         INSERT INTO users SELECT g, 'user' || g, 'U' || g || '@Example.com' FROM generate_series(1, 200) g;
         INSERT INTO posts SELECT g, g % 200 + 1, 'post ' || g, g % 3 = 0 FROM generate_series(1, 500) g;
         CREATE PUBLICATION social FOR TABLE users (id, name, lower(email) AS email_lc), posts WHERE (NOT draft) WITH (mode = 'causal');",
    )
    .unwrap();
}

/// A deterministic mix of writes: updates, filter transitions, deletes
/// and inserts, some in one transaction with a read.
fn write(c: &mut postgres::Client, step: u64) {
    let id = (step * 7919) % 500 + 1;
    let user = (step * 104_729) % 200 + 1;
    match step % 5 {
        0 => c
            .execute(
                "UPDATE posts SET draft = NOT draft WHERE id = $1",
                &[&(id as i32)],
            )
            .map(|_| ()),
        1 => c
            .execute(
                "UPDATE users SET name = name || '!' , email = upper(email) WHERE id = $1",
                &[&(user as i32)],
            )
            .map(|_| ()),
        2 => c
            .execute("DELETE FROM posts WHERE id = $1", &[&(id as i32)])
            .map(|_| ()),
        3 => c
            .execute(
                "INSERT INTO posts VALUES ($1, $2, 'again', false) ON CONFLICT (id) DO UPDATE SET body = 'again'",
                &[&(id as i32), &(user as i32)],
            )
            .map(|_| ()),
        _ => {
            let mut t = c.transaction().unwrap();
            t.query("SELECT name FROM users WHERE id = $1", &[&(user as i32)])
                .unwrap();
            t.execute(
                "UPDATE posts SET body = body || '+', author = $2 WHERE id = $1",
                &[&(id as i32), &(user as i32)],
            )
            .unwrap();
            t.commit()
        }
    }
    .unwrap();
}

#[test]
fn a_subscriber_follows_a_publication_into_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    let sink = dir.path().join("sink.db");

    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after bootstrap");
    let st = status(&server, &sink);
    assert!(st.contains(": in sync"), "{st}");

    for step in 0..300 {
        write(&mut c, step);
    }
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after the stream");

    // A column added to a table published without a column list reaches
    // the sink, with the value existing rows got.
    c.batch_execute("ALTER TABLE posts ADD COLUMN tag text DEFAULT 'none'")
        .unwrap();
    c.execute("UPDATE posts SET tag = 'x' WHERE id = 1", &[])
        .unwrap();
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after ALTER TABLE ADD COLUMN");

    // Renamed and dropped columns follow, in order with the rows.
    c.batch_execute("ALTER TABLE posts RENAME COLUMN body TO content")
        .unwrap();
    c.execute("UPDATE posts SET content = 'renamed' WHERE id = 2", &[])
        .unwrap();
    c.batch_execute("ALTER TABLE posts DROP COLUMN tag")
        .unwrap();
    for step in 300..360 {
        write_renamed(&mut c, step);
    }
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after RENAME COLUMN and DROP COLUMN");
}

/// Writes after `body` became `content`.
fn write_renamed(c: &mut postgres::Client, step: u64) {
    let id = (step * 7919) % 500 + 1;
    c.execute(
        "UPDATE posts SET content = content || '.' WHERE id = $1",
        &[&(id as i32)],
    )
    .unwrap();
}

#[test]
fn a_subscriber_killed_with_kill_9_resumes_with_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(&dir.path().join("data"), &["--fsync", "always"]);
    let mut c = client(server.pg);
    setup(&mut c);
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    let mut step = 0;
    for round in 0..4 {
        let agent = Running(
            aqueduct()
                .args(subscribe_args(&server, &sink, "causal"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // Write while the agent follows; once it has stored a position
        // past some of it, kill it: batches in flight, positions not
        // stored, acknowledgements not sent.
        let before = watermark(&sink);
        for _ in 0..(100 + round * 37) {
            write(&mut c, step);
            step += 1;
        }
        let deadline = Instant::now() + STEP_TIMEOUT;
        while watermark(&sink) <= before {
            assert!(Instant::now() < deadline, "the agent made no progress");
            std::thread::yield_now();
        }
        agent.kill9();
        if round == 1 {
            // The server too: it restarts on its directory, and the
            // agent follows it at its new address from its position.
            server.process.kill9();
            server = serve(&dir.path().join("data"), &["--fsync", "always"]);
            c = client(server.pg);
        }
    }
    catch_up(&server, &sink, "causal");
    assert_same(
        &mut c,
        &sink,
        "after four kill -9 of the agent and one of the server",
    );
}

/// The watermark the sink holds for the subscription.
fn watermark(sink: &Path) -> u64 {
    use aqueduct_subscribe::Sink;
    SqliteSink::open(sink, "t1")
        .and_then(|s| s.resume())
        .map_or(0, |r| r.watermark)
}

/// The transactions a JSON-lines sink received, in the order it applied
/// them, without the bootstrap's chunks (which have no `txid`; the
/// stream's transactions after a bootstrap are flagged `bootstrap` too).
fn applied_order(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .filter(|j| j["type"] == "txn" && j["txid"] != "")
        .map(|j| j["lsn"].as_u64().unwrap())
        .collect()
}

/// Causal order on the real system: every transaction of one session
/// depends on the one before it (the session's slot), so however many
/// workers apply them, they land in commit order; global order is commit
/// order by definition. Weak mode has no such promise and is only checked
/// for convergence above.
#[test]
fn one_sessions_transactions_arrive_in_commit_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    for (round, mode) in ["causal", "global"].into_iter().enumerate() {
        c.batch_execute(&format!("ALTER PUBLICATION social SET (mode = '{mode}')"))
            .unwrap();
        let out = dir.path().join(format!("{mode}.jsonl"));
        let state = dir.path().join(format!("{mode}-state"));
        let args = |until: bool| {
            let mut a = vec![
                "subscribe".to_string(),
                "--from".into(),
                format!("127.0.0.1:{}", server.http),
                "--publication".into(),
                "social".into(),
                "--name".into(),
                format!("order-{mode}"),
                "--mode".into(),
                mode.into(),
                "--into".into(),
                format!("jsonl:{}", out.display()),
                "--state-dir".into(),
                state.display().to_string(),
                "--workers".into(),
                "4".into(),
            ];
            if until {
                a.push("--until-caught-up".into());
            }
            a
        };
        let run = || {
            let o = aqueduct()
                .args(args(true))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        run();
        // Written while nothing follows, then all at once: the agent has
        // many ready transactions to spread over its workers.
        for step in 0..400 {
            write(&mut c, round as u64 * 1000 + step);
        }
        run();
        let order = applied_order(&out);
        assert!(
            order.len() >= 200,
            "{mode}: only {} transactions",
            order.len()
        );
        for w in order.windows(2) {
            assert!(
                w[0] < w[1],
                "{mode}: LSN {} applied after LSN {}",
                w[1],
                w[0]
            );
        }
    }
}

/// An ephemeral table's inserts reach a subscriber as inserts; its
/// bootstrap sends no rows (the table keeps none), so a subscriber gets
/// only what is inserted after it starts.
#[test]
fn an_ephemeral_tables_inserts_reach_a_subscriber() {
    const BEFORE: u64 = 5;
    const AFTER: u64 = 30;
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    c.batch_execute(
        "CREATE TABLE events (kind text NOT NULL, n bigint) WITH (ephemeral = true);
         CREATE PUBLICATION stream FOR TABLE events",
    )
    .unwrap();
    for n in 0..BEFORE {
        c.execute("INSERT INTO events VALUES ('before', $1)", &[&(n as i64)])
            .unwrap();
    }
    let out = dir.path().join("events.jsonl");
    let run = || {
        let o = aqueduct()
            .args([
                "subscribe",
                "--from",
                &format!("127.0.0.1:{}", server.http),
                "--publication",
                "stream",
                "--name",
                "listener",
                "--mode",
                "causal",
                "--into",
                &format!("jsonl:{}", out.display()),
                "--state-dir",
                &dir.path().join("state").display().to_string(),
                "--until-caught-up",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run();
    for n in 0..AFTER {
        c.execute("INSERT INTO events VALUES ('after', $1)", &[&(n as i64)])
            .unwrap();
    }
    run();
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<Json> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    // A bootstrap chunk is a line flagged `bootstrap` without a source
    // transaction (an empty txid); stream transactions up to the head the
    // first stream saw are flagged too, and carry their txid.
    let bootstrap_rows = lines
        .iter()
        .filter(|j| j["bootstrap"] == true && j["txid"].as_str().is_none_or(str::is_empty))
        .all(|j| j["type"] != "row" && j["changes"].as_array().is_none_or(|c| c.is_empty()));
    assert!(
        bootstrap_rows,
        "the bootstrap sent rows of an ephemeral table: {text}"
    );
    let inserts: Vec<&Json> = lines
        .iter()
        .filter(|j| j["type"] == "txn")
        .flat_map(|j| j["changes"].as_array().unwrap())
        .collect();
    assert!(inserts.iter().all(|ch| ch["object"] == "events"
        && ch["op"] == "insert"
        && ch["prev_version"].is_null()));
    let got: Vec<(String, i64)> = inserts
        .iter()
        .map(|ch| {
            (
                ch["attrs"]["kind"].as_str().unwrap().to_string(),
                ch["attrs"]["n"].as_i64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, i64)> = (0..AFTER).map(|n| ("after".into(), n as i64)).collect();
    assert_eq!(
        got, want,
        "every insert after the subscriber started, once, in order"
    );
}

/// Whether the server can still stream changes from `lsn` (a probe that
/// holds nothing: no durable consumer).
fn log_still_has(server: &Server, lsn: u64) -> bool {
    let r = aqueduct_mirror::http::request(
        &format!("127.0.0.1:{}", server.http),
        "GET",
        &format!("/v1/changes?from_lsn={lsn}"),
        None,
        None,
        STEP_TIMEOUT,
    )
    .unwrap();
    r.status == 200
}

/// The metrics page's value of `line_start` (a metric with its labels).
fn metric(server: &Server, line_start: &str) -> Option<u64> {
    let r = aqueduct_mirror::http::request(
        &format!("127.0.0.1:{}", server.http),
        "GET",
        "/metrics",
        None,
        None,
        STEP_TIMEOUT,
    )
    .unwrap();
    let mut body = r.body;
    let text = String::from_utf8(body.read_to_end(16 << 20).unwrap()).unwrap();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A subscriber that falls further behind than its publication's cap is
/// cut off, the log it held is compacted away, and when it comes back it
/// bootstraps again by itself: from an empty copy, so rows deleted while
/// it was away are gone too.
#[test]
fn a_subscriber_cut_off_past_its_cap_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        &dir.path().join("data"),
        &[
            "--fsync",
            "never",
            "--segment-bytes",
            "65536",
            "--compaction-interval-secs",
            "1",
            // Small, so the stream behind must come from the log.
            "--feed-memory",
            "16384",
        ],
    );
    let mut c = client(server.pg);
    setup(&mut c);
    c.batch_execute("ALTER PUBLICATION social SET (max_lag = '64kB')")
        .unwrap();
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    let away_from = watermark(&sink);
    // While it is away: many versions of every post, some deleted.
    for round in 0..8 {
        c.execute("UPDATE posts SET body = body || $1", &[&format!("{round}")])
            .unwrap();
    }
    c.execute("DELETE FROM posts WHERE id <= 60", &[]).unwrap();
    c.execute("DELETE FROM users WHERE id > 190", &[]).unwrap();
    let deadline = Instant::now() + STEP_TIMEOUT;
    while metric(
        &server,
        "aqueduct_publication_subscriber_dropped{publication=\"social\",subscriber=\"t1\"}",
    ) != Some(1)
        || log_still_has(&server, away_from)
    {
        assert!(
            Instant::now() < deadline,
            "the subscriber was not cut off and its log compacted in time"
        );
        std::thread::yield_now();
    }
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after being cut off and bootstrapped again");
}

/// A published view's rows in the sink, by key.
fn sink_rows(path: &Path, object: &str) -> BTreeMap<String, Map<String, Json>> {
    let sink = SqliteSink::open(path, "check").unwrap();
    sink.rows(object)
        .unwrap()
        .into_iter()
        .map(|(k, (_, attrs))| (k, attrs))
        .collect()
}

/// The oracle of `post_counts`: the visible posts read from the table
/// (a plain scan) and grouped here, not by the dataflow.
fn post_counts(c: &mut postgres::Client) -> BTreeMap<String, Map<String, Json>> {
    let mut groups: BTreeMap<i32, (i64, i32)> = BTreeMap::new();
    for r in c
        .query("SELECT id, author FROM posts WHERE NOT draft", &[])
        .unwrap()
    {
        let (id, author): (i32, i32) = (r.get(0), r.get(1));
        let g = groups.entry(author).or_insert((0, i32::MIN));
        g.0 += 1;
        g.1 = g.1.max(id);
    }
    groups
        .into_iter()
        .map(|(author, (n, last))| {
            let mut m = Map::new();
            m.insert("author".into(), json!(author));
            m.insert("n".into(), json!(n));
            m.insert("last".into(), json!(last));
            (json!([author]).to_string(), m)
        })
        .collect()
}

fn assert_view_same(c: &mut postgres::Client, sink: &Path, when: &str) {
    let want = post_counts(c);
    let got = sink_rows(sink, "post_counts");
    assert_eq!(
        got.len(),
        want.len(),
        "{when}: post_counts has {} rows in the sink, {} in the oracle",
        got.len(),
        want.len()
    );
    for (k, row) in &want {
        assert_eq!(got.get(k), Some(row), "{when}: post_counts row {k}");
    }
}

#[test]
fn a_published_view_follows_its_query_in_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(&dir.path().join("data"), &["--fsync", "always"]);
    let mut c = client(server.pg);
    c.batch_execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, email text);
         CREATE TABLE posts (id int PRIMARY KEY, author int, body text, draft bool);
         INSERT INTO users SELECT g, 'user' || g, 'u' || g FROM generate_series(1, 200) g;
         INSERT INTO posts SELECT g, g % 50 + 1, 'post ' || g, g % 3 = 0 FROM generate_series(1, 500) g;
         CREATE VIEW post_counts AS
             SELECT author, count(*) AS n, max(id) AS last FROM posts WHERE NOT draft GROUP BY author;
         CREATE PUBLICATION social FOR TABLE users, VIEW post_counts KEY (author) WITH (mode = 'causal');",
    )
    .unwrap();
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    assert_view_same(&mut c, &sink, "after bootstrap");

    // Groups change, appear (a new author) and disappear (every post of
    // an author deleted or made a draft).
    for step in 0..300 {
        write(&mut c, step);
    }
    c.execute("DELETE FROM posts WHERE author = 7", &[])
        .unwrap();
    c.execute("UPDATE posts SET draft = true WHERE author = 8", &[])
        .unwrap();
    catch_up(&server, &sink, "causal");
    assert_view_same(&mut c, &sink, "after the stream");

    // A server killed with kill -9 keeps the changes of the view from
    // where it recovered: the caught-up subscriber goes on.
    server.process.kill9();
    server = serve(&dir.path().join("data"), &["--fsync", "always"]);
    c = client(server.pg);
    for step in 300..400 {
        write(&mut c, step);
    }
    let said = catch_up_as(&server, &sink, "causal", "t1");
    assert!(!said.contains("bootstrapping again"), "{said}");
    assert_view_same(&mut c, &sink, "after a restart of the server");

    // A subscriber further behind than the restart bootstraps again.
    let late = dir.path().join("late.db");
    catch_up_as(&server, &late, "weak", "late");
    for step in 400..460 {
        write(&mut c, step);
    }
    server.process.kill9();
    server = serve(&dir.path().join("data"), &["--fsync", "always"]);
    c = client(server.pg);
    for step in 460..500 {
        write(&mut c, step);
    }
    let said = catch_up_as(&server, &late, "weak", "late");
    assert!(said.contains("bootstrapping again"), "{said}");
    assert_view_same(&mut c, &late, "after bootstrapping again");
}

/// The server's last committed LSN, from its health page.
fn head(server: &Server) -> u64 {
    let r = aqueduct_mirror::http::request(
        &format!("127.0.0.1:{}", server.http),
        "GET",
        "/health",
        None,
        None,
        STEP_TIMEOUT,
    )
    .unwrap();
    let mut body = r.body;
    let j: Json = serde_json::from_slice(&body.read_to_end(1 << 20).unwrap()).unwrap();
    j["lsn"].as_u64().unwrap()
}

/// The first stream after a bootstrap at `S` flags the transactions up to
/// the head the server had when it opened (`bootstrap: true`), and only
/// those: the subscriber is in sync after them.
#[test]
fn the_first_stream_after_a_bootstrap_flags_transactions_up_to_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    let s = head(&server);
    for step in 0..10 {
        write(&mut c, step);
    }
    let opened_at = head(&server);
    let r = aqueduct_mirror::http::request(
        &format!("127.0.0.1:{}", server.http),
        "GET",
        &format!(
            "/v1/publications/social/stream?subscriber=probe&from_lsn={}&mode=causal&bootstrapped_at={s}",
            s + 1
        ),
        None,
        None,
        STEP_TIMEOUT,
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let mut body = r.body;
    body.set_read_timeout(Some(STEP_TIMEOUT)).unwrap();
    let mut next = || -> Json {
        loop {
            let line = body.next_line().unwrap().expect("the stream goes on");
            if !line.is_empty() {
                return serde_json::from_slice(&line).unwrap();
            }
        }
    };
    let epoch = next();
    assert_eq!(epoch["type"], "epoch");
    assert_eq!(epoch["bootstrap_until"], json!(opened_at), "{epoch}");
    for step in 10..20 {
        write(&mut c, step);
    }
    let last = head(&server);
    let (mut flagged, mut unflagged) = (0, 0);
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        assert!(Instant::now() < deadline, "the stream did not reach {last}");
        let m = next();
        if m["type"] == "progress" && m["lsn"].as_u64() >= Some(last) {
            break;
        }
        if m["type"] != "txn" {
            continue;
        }
        let lsn = m["lsn"].as_u64().unwrap();
        let want = lsn <= opened_at;
        assert_eq!(m["bootstrap"], json!(want), "txn at LSN {lsn}: {m}");
        if want {
            flagged += 1;
        } else {
            unflagged += 1;
        }
        if lsn >= last {
            break;
        }
    }
    assert!(
        flagged >= 5 && unflagged >= 5,
        "{flagged} flagged, {unflagged} not"
    );
}

/// `aqueduct subscribe status` on a subscription: its output.
fn status(server: &Server, sink: &Path) -> String {
    let out = aqueduct()
        .args(["subscribe", "status", "--name", "t1", "--into"])
        .arg(format!("sqlite:{}", sink.display()))
        .args(["--from", &format!("127.0.0.1:{}", server.http)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A server whose data directory was wiped and which came back at the
/// same address is another log: the agent refuses to follow it, says
/// why and what to do, and changes nothing; with `--rebootstrap` it
/// clears its copy and bootstraps from the new server.
#[test]
fn a_wiped_server_at_the_same_address_is_refused_until_rebootstrap() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = serve(&data, &["--fsync", "never"]);
    let (pg, http) = (server.pg, server.http);
    let mut c = client(server.pg);
    setup(&mut c);
    for step in 0..50 {
        write(&mut c, step);
    }
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "before the wipe");
    drop(c);
    server.process.kill9();
    std::fs::remove_dir_all(&data).unwrap();
    let server = serve_at(&data, pg, http, &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    c.execute("DELETE FROM posts WHERE id > 400", &[]).unwrap();
    let before = watermark(&sink);
    let (ok, err) = bounded(
        aqueduct()
            .args(subscribe_args(&server, &sink, "causal"))
            .arg("--until-caught-up"),
    );
    assert!(!ok, "the agent followed a wiped server");
    assert!(
        err.contains("wiped") && err.contains("--rebootstrap"),
        "unclear refusal: {err}"
    );
    assert_eq!(
        watermark(&sink),
        before,
        "the refused agent changed the sink"
    );
    let out = aqueduct()
        .args(subscribe_args(&server, &sink, "causal"))
        .args(["--until-caught-up", "--rebootstrap"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same(&mut c, &sink, "after --rebootstrap from the new server");
}

/// Runs `cmd` to its end within the step deadline (killed and failed
/// past it): whether it succeeded, and its standard error.
fn bounded(cmd: &mut std::process::Command) -> (bool, String) {
    use std::io::Read;
    let mut child = Running(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + STEP_TIMEOUT;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not finish in time (it follows on as if nothing happened)"
        );
        std::thread::yield_now();
    };
    (status.success(), reader.join().unwrap())
}

/// A bootstrap of thousands of rows in small chunks, fetched by four
/// workers in parallel while a writer keeps changing the tables, ends
/// equal to the publisher once the stream has caught up.
#[test]
fn a_parallel_bootstrap_under_concurrent_writes_equals_the_publisher() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    c.batch_execute(
        "INSERT INTO posts SELECT g, g % 200 + 1, 'more ' || g, g % 7 = 0 FROM generate_series(501, 6000) g",
    )
    .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let pg = server.pg;
        std::thread::spawn(move || {
            let mut c = client(pg);
            let mut step: i32 = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = (step * 7919) % 6000 + 1;
                match step % 4 {
                    0 => c.execute("UPDATE posts SET body = body || '~' WHERE id = $1", &[&id]),
                    1 => c.execute("DELETE FROM posts WHERE id = $1", &[&id]),
                    2 => c.execute(
                        "INSERT INTO posts VALUES ($1, 1, 'new', false) ON CONFLICT (id) DO UPDATE SET draft = NOT posts.draft",
                        &[&(10_000 + step)],
                    ),
                    _ => c.execute("UPDATE users SET name = name || '*' WHERE id = $1", &[&(id % 200 + 1)]),
                }
                .unwrap();
                step += 1;
            }
            step
        })
    };
    let sink = dir.path().join("sink.db");
    let mut args = subscribe_args(&server, &sink, "causal");
    let w = args.iter().position(|a| a == "--workers").unwrap();
    args[w + 1] = "4".into();
    args.extend(["--bootstrap-chunk-rows", "250", "--until-caught-up"].map(String::from));
    let (ok, err) = bounded(aqueduct().args(&args));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(ok, "{err}");
    assert!(writes > 0, "nothing was written during the bootstrap");
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after a parallel bootstrap under writes");
}

/// Writes rows straight into the sink, as drift the publisher never
/// made: a version above anything the server has, so the guard keeps
/// them against every later write.
fn drift(sink: &Path, changes: Vec<aqueduct_publish::Change>) {
    use aqueduct_subscribe::Sink;
    let mut s = SqliteSink::open(sink, "drift").unwrap();
    let txn = aqueduct_publish::TxnMessage {
        lsn: 1 << 40,
        first_lsn: 0,
        txid: String::new(),
        commit_time: String::new(),
        epoch: 0,
        frame: 0,
        last: true,
        deps: None,
        bootstrap: false,
        changes,
        origin: None,
    };
    s.apply(
        &[aqueduct_subscribe::Item::Txn(std::sync::Arc::new(txn))],
        &aqueduct_subscribe::Record::default(),
    )
    .unwrap();
}

fn post(id: i32, body: &str) -> aqueduct_publish::Change {
    let attrs = json!({"id": id, "author": 1, "body": body, "draft": false});
    aqueduct_publish::Change {
        object: "posts".into(),
        op: aqueduct_publish::ChangeOp::Update,
        key: vec![json!(id)],
        attrs: Some(attrs.as_object().unwrap().clone()),
        version: 1 << 40,
        prev_version: None,
    }
}

/// `--rebootstrap-table posts --rebootstrap-where ...` deletes the
/// matching rows of that one object and loads it again from a new
/// snapshot, while the stream goes on from the subscriber's position: a
/// sink whose rows drifted ends equal to the publisher.
#[test]
fn one_table_bootstrapped_again_equals_the_publisher() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    drift(&sink, vec![post(1, "drifted"), post(99_999, "stray")]);
    for step in 0..100 {
        write(&mut c, step);
    }
    let mut args = subscribe_args(&server, &sink, "causal");
    args.extend(
        [
            "--rebootstrap-table",
            "posts",
            "--rebootstrap-where",
            "id = 1 OR id > 5000",
            "--until-caught-up",
        ]
        .map(String::from),
    );
    let (ok, err) = bounded(aqueduct().args(&args));
    assert!(ok, "{err}");
    for step in 100..150 {
        write(&mut c, step);
    }
    catch_up(&server, &sink, "causal");
    assert_same(
        &mut c,
        &sink,
        "after posts was bootstrapped again where ...",
    );
    // Whole, while writes wait in the stream: its changes up to S' are
    // skipped, the snapshot has them.
    drift(&sink, vec![post(2, "drifted"), post(99_998, "stray")]);
    for step in 150..250 {
        write(&mut c, step);
    }
    let mut args = subscribe_args(&server, &sink, "causal");
    args.extend(["--rebootstrap-table", "posts", "--until-caught-up"].map(String::from));
    let (ok, err) = bounded(aqueduct().args(&args));
    assert!(ok, "{err}");
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after posts was bootstrapped again whole");
}

/// A table added to the publication reaches the subscriber with the rows
/// it had before it was added (a partial bootstrap of that table at
/// S' >= the addition), and the changes after.
#[test]
fn a_table_added_to_the_publication_arrives_with_its_old_rows() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"), &["--fsync", "never"]);
    let mut c = client(server.pg);
    setup(&mut c);
    let sink = dir.path().join("sink.db");
    catch_up(&server, &sink, "causal");
    // The agent follows while the table is made, filled and added: its
    // stream passed the rows when they were not published yet.
    let agent = Running(
        aqueduct()
            .args(subscribe_args(&server, &sink, "causal"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let until = |lsn: u64| {
        let deadline = Instant::now() + STEP_TIMEOUT;
        while watermark(&sink) <= lsn {
            assert!(
                Instant::now() < deadline,
                "the agent did not reach LSN {lsn}"
            );
            std::thread::yield_now();
        }
    };
    c.batch_execute(
        "CREATE TABLE tags (id int PRIMARY KEY, label text);
         INSERT INTO tags SELECT g, 'tag ' || g FROM generate_series(1, 700) g;",
    )
    .unwrap();
    until(head(&server));
    c.batch_execute(
        "ALTER PUBLICATION social ADD TABLE tags;
         UPDATE tags SET label = 'changed' WHERE id % 10 = 0;
         DELETE FROM tags WHERE id % 7 = 0;",
    )
    .unwrap();
    for step in 0..50 {
        write(&mut c, step);
    }
    until(head(&server));
    agent.kill9();
    catch_up(&server, &sink, "causal");
    c.batch_execute("UPDATE tags SET label = 'later' WHERE id % 3 = 0")
        .unwrap();
    catch_up(&server, &sink, "causal");
    assert_same(&mut c, &sink, "after a table was added");
    let want: BTreeMap<String, Map<String, Json>> = c
        .query("SELECT id, label FROM tags", &[])
        .unwrap()
        .into_iter()
        .map(|r| {
            let id: i32 = r.get(0);
            let label: Option<String> = r.get(1);
            let m = json!({"id": id, "label": label});
            (json!([id]).to_string(), m.as_object().unwrap().clone())
        })
        .collect();
    let got: BTreeMap<String, Map<String, Json>> = SqliteSink::open(&sink, "check")
        .unwrap()
        .rows("tags")
        .unwrap()
        .into_iter()
        .map(|(k, (_, attrs))| (k, attrs))
        .collect();
    assert_eq!(got.len(), want.len(), "tags rows in the sink");
    assert_eq!(got, want, "tags in the sink");
}
