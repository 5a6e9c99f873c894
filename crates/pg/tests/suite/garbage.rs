//! Broken protocol bytes: random, truncated, absurd lengths, unknown types,
//! before and after authentication. Each such connection must be closed by
//! the server (never hang, never take the server down), and a normal client
//! must work afterwards.

use crate::common;

use std::time::Duration;

use aqueduct_pg::PgConfig;
use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;

/// Cases per run; the seed makes a failure reproducible.
const CASES: usize = 200;
const SEED: u64 = 0x5eed_a9ed;
/// Time the server has to close a broken connection.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);
/// A small limit so that "too large" is cheap to test.
const MAX_MESSAGE_BYTES: usize = 64 * 1024;

const FRONTEND_TAGS: &[u8] = b"QPBEDCSHXpdcf";

#[derive(Debug)]
enum Case {
    /// Random bytes where the startup message belongs.
    RandomStartup(Vec<u8>),
    /// A startup message declaring an absurd length.
    AbsurdStartupLength(u32),
    /// Random bytes after a good startup.
    RandomAfterStartup(Vec<u8>),
    /// A known message type with a length over the limit (or under 4).
    AbsurdLength(u8, u32),
    /// A byte that is no frontend message type.
    UnknownType(u8),
    /// A well-formed header whose body is random (often malformed).
    RandomBody(u8, Vec<u8>),
    /// A valid message cut short, then the client stops sending.
    Truncated(Vec<u8>, usize),
}

fn valid_messages() -> Vec<Vec<u8>> {
    let mut parse = cstr("s");
    parse.extend(cstr("SELECT $1"));
    parse.extend(1u16.to_be_bytes());
    parse.extend(23u32.to_be_bytes());
    let mut bind = cstr("");
    bind.extend(cstr("s"));
    bind.extend([0, 1, 0, 1, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7, 0, 0]);
    vec![
        msg(b'Q', &cstr("SELECT 1")),
        msg(b'P', &parse),
        msg(b'B', &bind),
        msg(b'E', &[0, 0, 0, 0, 0]),
        msg(b'D', b"S\0"),
    ]
}

fn case(rng: &mut StdRng) -> Case {
    let bytes = |rng: &mut StdRng, max: usize| -> Vec<u8> {
        let n = rng.gen_range(0..max);
        (0..n).map(|_| rng.gen()).collect()
    };
    match rng.gen_range(0..7) {
        0 => Case::RandomStartup(bytes(rng, 300)),
        1 => Case::AbsurdStartupLength(rng.gen_range(10_001..=u32::MAX)),
        2 => Case::RandomAfterStartup(bytes(rng, 300)),
        3 => {
            let tag = FRONTEND_TAGS[rng.gen_range(0..FRONTEND_TAGS.len())];
            let len = if rng.gen_bool(0.2) {
                rng.gen_range(0..4)
            } else {
                rng.gen_range(MAX_MESSAGE_BYTES as u32 + 1..=u32::MAX)
            };
            Case::AbsurdLength(tag, len)
        }
        4 => Case::UnknownType(loop {
            let t: u8 = rng.gen();
            if !FRONTEND_TAGS.contains(&t) {
                break t;
            }
        }),
        5 => {
            let tag = FRONTEND_TAGS[rng.gen_range(0..FRONTEND_TAGS.len())];
            Case::RandomBody(tag, bytes(rng, 64))
        }
        _ => {
            let all = valid_messages();
            let m = all[rng.gen_range(0..all.len())].clone();
            let keep = rng.gen_range(1..m.len());
            Case::Truncated(m, keep)
        }
    }
}

/// Plays one case; returns whether the client should stop sending (the
/// server then sees end of input) rather than wait for the server to act.
async fn play(raw: &mut Raw, case: &Case) -> bool {
    match case {
        Case::RandomStartup(b) => {
            raw.send(b).await;
            true
        }
        Case::AbsurdStartupLength(len) => {
            let mut m = len.to_be_bytes().to_vec();
            m.extend(196_608u32.to_be_bytes());
            raw.send(&m).await;
            false
        }
        Case::RandomAfterStartup(b) => {
            raw.send(b).await;
            true
        }
        Case::AbsurdLength(tag, len) => {
            let mut m = vec![*tag];
            m.extend(len.to_be_bytes());
            raw.send(&m).await;
            false
        }
        Case::UnknownType(tag) => {
            raw.send(&[*tag, 0, 0, 0, 4]).await;
            false
        }
        Case::RandomBody(tag, body) => {
            raw.send(&msg(*tag, body)).await;
            // A body that happens to be well formed is a real request; end
            // the session after it.
            raw.send(&msg(b'X', &[])).await;
            true
        }
        Case::Truncated(m, keep) => {
            raw.send(&m[..*keep]).await;
            true
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_clients_are_closed_and_others_served() {
    let server = Server::start(PgConfig {
        max_message_bytes: MAX_MESSAGE_BYTES,
        ..Default::default()
    })
    .await;
    let good = server.connect().await;
    good.batch_execute("CREATE TABLE g (id integer PRIMARY KEY)")
        .await
        .unwrap();
    bounded(async {
        let mut rng = StdRng::seed_from_u64(SEED);
        for i in 0..CASES {
            let case = case(&mut rng);
            let before_startup =
                matches!(case, Case::RandomStartup(_) | Case::AbsurdStartupLength(_));
            let mut raw = if before_startup {
                Raw::open(server.addr).await
            } else {
                Raw::connect(server.addr).await
            };
            if i % 10 == 0 && !before_startup {
                // Some mid-transaction, to check nothing of it survives.
                raw.query("BEGIN").await;
                raw.query(&format!("INSERT INTO g VALUES ({i})")).await;
            }
            let stop_sending = play(&mut raw, &case).await;
            if stop_sending {
                let _ = raw.stream.shutdown().await;
            }
            let reply = raw.until_closed(CLOSE_WITHIN).await;
            assert!(reply.is_ok(), "case {i} {case:?}: {}", reply.unwrap_err());
            // Refusals of absurd input say why before closing.
            if let Case::AbsurdLength(..) | Case::UnknownType(_) = case {
                let reply = reply.unwrap();
                assert!(
                    reply.first() == Some(&b'E')
                        && String::from_utf8_lossy(&reply).contains("08P01"),
                    "case {i} {case:?}: {reply:?}"
                );
            }
            assert!(server.is_serving());
        }
        // The well-behaved client never noticed, and nothing half-done committed.
        let n: i64 = good
            .query_one("SELECT count(*) FROM g", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0);
        let fresh = server.connect().await;
        fresh.simple_query("SELECT 1").await.unwrap();
    })
    .await;
    server.stop().await.unwrap();
}

/// Many connections opened and abandoned at once, some mid-message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_storm() {
    let server = Server::start(PgConfig {
        max_connections: 20,
        ..Default::default()
    })
    .await;
    bounded(async {
        let mut tasks = Vec::new();
        for i in 0..60 {
            let addr = server.addr;
            tasks.push(tokio::spawn(async move {
                let mut raw = Raw::open(addr).await;
                let startup = startup_message("storm");
                let cut = if i % 3 == 0 {
                    startup.len()
                } else {
                    i % startup.len()
                };
                raw.send(&startup[..cut]).await;
                drop(raw);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Slots come back as the server notices the clients are gone.
        let mut attempts = 0;
        loop {
            match connect(server.config("after")).await {
                Ok(c) => {
                    c.simple_query("SELECT 1").await.unwrap();
                    break;
                }
                Err(e) if attempts < 200 => {
                    attempts += 1;
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    server.stop().await.unwrap();
}
