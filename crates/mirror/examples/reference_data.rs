//! A TV guide application that mirrors its reference data in process
//! (`examples/reference-data/README.md`): titles by name, airings by time,
//! episodes by id, all in its own structures, kept up to date by an
//! `aqueduct_mirror::Follower` on one thread while requests read them
//! without any I/O.
//!
//!     cargo run -p aqueduct-mirror --example reference_data -- --http 127.0.0.1:8433
//!     ... --check 10   # follow for 10 s, then check the indexes against the server
//!     ... --until FILE # follow until FILE exists, then check

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use aqueduct_mirror::{
    http, value_from_json, Follower, FollowerConfig, Key, Lsn, Mirror, MirrorChange, Row,
    TableInfo, Value,
};

#[derive(Clone, Debug, PartialEq)]
struct Title {
    name: String,
    kind: String,
}

#[derive(Clone, Debug, PartialEq)]
struct Episode {
    title_id: i64,
    season: i64,
    number: i64,
    name: String,
}

/// The application's own indexes.
#[derive(Default, Debug)]
struct Guide {
    titles: HashMap<i64, Title>,
    /// Lower-cased name and id: prefix search.
    titles_by_name: BTreeSet<(String, i64)>,
    /// Seasons per title.
    seasons: BTreeSet<(i64, i64)>,
    episodes: HashMap<i64, Episode>,
    /// Airings by start time (microseconds since the epoch) and channel.
    airings: BTreeMap<(i64, String), i64>,
    /// The LSN the guide reflects.
    lsn: Lsn,
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        _ => 0,
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Text(s) => s.clone(),
        Value::Null => String::new(),
        other => format!("{other:?}"),
    }
}

fn micros(v: &Value) -> i64 {
    match v {
        Value::TimestampTz(t) | Value::Timestamp(t) => *t,
        _ => 0,
    }
}

impl Guide {
    fn put(&mut self, table: &str, row: &Row) {
        match table {
            "titles" => {
                let id = int(&row[0]);
                self.remove(table, &[row[0].clone()]);
                let t = Title {
                    name: text(&row[1]),
                    kind: text(&row[2]),
                };
                self.titles_by_name.insert((t.name.to_lowercase(), id));
                self.titles.insert(id, t);
            }
            "seasons" => {
                self.seasons.insert((int(&row[0]), int(&row[1])));
            }
            "episodes" => {
                let e = Episode {
                    title_id: int(&row[1]),
                    season: int(&row[2]),
                    number: int(&row[3]),
                    name: text(&row[4]),
                };
                self.episodes.insert(int(&row[0]), e);
            }
            "schedules" => {
                self.airings
                    .insert((micros(&row[1]), text(&row[0])), int(&row[2]));
            }
            _ => {}
        }
    }

    fn remove(&mut self, table: &str, key: &[Value]) {
        match table {
            "titles" => {
                if let Some(t) = self.titles.remove(&int(&key[0])) {
                    self.titles_by_name
                        .remove(&(t.name.to_lowercase(), int(&key[0])));
                }
            }
            "seasons" => {
                self.seasons.remove(&(int(&key[0]), int(&key[1])));
            }
            "episodes" => {
                self.episodes.remove(&int(&key[0]));
            }
            "schedules" => {
                self.airings.remove(&(micros(&key[1]), text(&key[0])));
            }
            _ => {}
        }
    }

    /// Titles whose name starts with `prefix`.
    fn search(&self, prefix: &str) -> Vec<&str> {
        let p = prefix.to_lowercase();
        self.titles_by_name
            .range((p.clone(), i64::MIN)..)
            .take_while(|(n, _)| n.starts_with(&p))
            .filter_map(|(_, id)| self.titles.get(id).map(|t| t.name.as_str()))
            .collect()
    }

    /// The next `n` airings from `from` (microseconds), described.
    fn upcoming(&self, from: i64, n: usize) -> Vec<String> {
        self.airings
            .range((from, String::new())..)
            .take(n)
            .map(|((at, channel), ep)| {
                let what = self
                    .episodes
                    .get(ep)
                    .map(|e| {
                        let title = self
                            .titles
                            .get(&e.title_id)
                            .map_or("?", |t| t.name.as_str());
                        format!("{title} S{}E{} \"{}\"", e.season, e.number, e.name)
                    })
                    .unwrap_or_else(|| format!("episode {ep}"));
                let at = Value::TimestampTz(*at).to_text().unwrap_or_default();
                format!("{at} {channel}: {what}")
            })
            .collect()
    }
}

/// The follower's handle on the guide the request threads read.
#[derive(Clone, Default)]
struct Shared(Arc<RwLock<Guide>>);

impl Mirror for Shared {
    fn reset(&mut self) {
        *self.0.write().unwrap() = Guide::default();
    }
    fn load(&mut self, table: &TableInfo, _key: &Key, row: &Row) {
        self.0.write().unwrap().put(&table.name, row);
    }
    fn apply(&mut self, _lsn: Lsn, change: &MirrorChange) {
        let mut g = self.0.write().unwrap();
        match change {
            MirrorChange::Row(c) => match &c.new {
                Some(row) => {
                    g.remove(&c.table.name, &c.key);
                    g.put(&c.table.name, row);
                }
                None => g.remove(&c.table.name, &c.key),
            },
            MirrorChange::DropTable(t) => {
                let keep = std::mem::take(&mut *g);
                *g = Guide {
                    lsn: keep.lsn,
                    ..Guide::default()
                };
                if t.name != "titles" {
                    g.titles = keep.titles;
                    g.titles_by_name = keep.titles_by_name;
                }
                if t.name != "seasons" {
                    g.seasons = keep.seasons;
                }
                if t.name != "episodes" {
                    g.episodes = keep.episodes;
                }
                if t.name != "schedules" {
                    g.airings = keep.airings;
                }
            }
            MirrorChange::CreateTable(_) => {}
        }
    }
    fn committed(&mut self, lsn: Lsn) {
        self.0.write().unwrap().lsn = lsn;
    }
}

/// Compares the guide's airings and titles with `SELECT` over HTTP.
fn check(addr: &str, guide: &Guide) -> Result<(), String> {
    let rows = |q: &str| -> Result<Vec<Row>, String> {
        let r =
            http::sql(addr, None, q, &[], Duration::from_secs(10)).map_err(|e| e.to_string())?;
        let types: Vec<_> = r["columns"]
            .as_array()
            .ok_or("no columns")?
            .iter()
            .map(|c| aqueduct_mirror::parse_type(c["type"].as_str().unwrap_or_default()))
            .collect::<Result<_, _>>()?;
        r["rows"]
            .as_array()
            .ok_or("no rows")?
            .iter()
            .map(|row| {
                row.as_array()
                    .ok_or("a row is not an array")?
                    .iter()
                    .zip(&types)
                    .map(|(v, t)| value_from_json(v, t).map_err(|e| e.to_string()))
                    .collect()
            })
            .collect()
    };
    let airings: BTreeMap<(i64, String), i64> = rows("SELECT * FROM schedules")?
        .iter()
        .map(|r| ((micros(&r[1]), text(&r[0])), int(&r[2])))
        .collect();
    if airings != guide.airings {
        return Err(format!(
            "airings differ: server {}, mirror {}",
            airings.len(),
            guide.airings.len()
        ));
    }
    let titles: HashMap<i64, Title> = rows("SELECT * FROM titles")?
        .iter()
        .map(|r| {
            (
                int(&r[0]),
                Title {
                    name: text(&r[1]),
                    kind: text(&r[2]),
                },
            )
        })
        .collect();
    if titles != guide.titles {
        return Err("titles differ".into());
    }
    let episodes = rows("SELECT * FROM episodes")?.len();
    if episodes != guide.episodes.len() {
        return Err("episodes differ".into());
    }
    Ok(())
}

fn main() {
    let mut addr = "127.0.0.1:8433".to_string();
    let mut check_after = None;
    let mut until: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--http" => addr = args.next().expect("--http ADDR"),
            "--check" => {
                check_after = Some(Duration::from_secs_f64(
                    args.next()
                        .and_then(|s| s.parse().ok())
                        .expect("--check SECONDS"),
                ))
            }
            "--until" => until = Some(args.next().expect("--until FILE").into()),
            other => {
                eprintln!(
                    "usage: reference_data [--http HOST:PORT] [--check SECONDS] [--until FILE] (not {other})"
                );
                std::process::exit(2);
            }
        }
    }
    let guide = Shared::default();
    let mut cfg = FollowerConfig::new(addr.clone());
    cfg.tables = Some(
        ["titles", "seasons", "episodes", "schedules"]
            .map(String::from)
            .to_vec(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (guide, stop) = (guide.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut f = Follower::new(cfg, guide);
            f.run_until(&stop);
            f
        })
    };

    // The "request handlers": reads from the guide, no I/O.
    let started = Instant::now();
    let mut report = Instant::now();
    loop {
        if let Some(after) = check_after {
            if started.elapsed() >= after {
                break;
            }
        }
        if until.as_ref().is_some_and(|f| f.exists()) {
            break;
        }
        if report.elapsed() >= Duration::from_secs(2) {
            report = Instant::now();
            let g = guide.0.read().unwrap();
            let t0 = Instant::now();
            let found = g.search("ri");
            let next = g.upcoming(
                Value::Text("2024-06-03 20:00:00+00".into())
                    .coerce(&aqueduct_mirror::DataType::TimestampTz)
                    .map(|v| micros(&v))
                    .unwrap_or(0),
                3,
            );
            let took = t0.elapsed();
            println!(
                "at LSN {}: {} titles, {} episodes, {} airings; titles \"ri…\": {}; next airings: {:?} (answered in {took:?})",
                g.lsn,
                g.titles.len(),
                g.episodes.len(),
                g.airings.len(),
                found.len(),
                next
            );
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }

    // --check (the publisher has stopped by now: the caller's job): follow
    // on this thread until the guide equals the server, or give up.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut f = follower.join().expect("the follower thread");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_err = String::new();
    while Instant::now() < deadline {
        let _ = f.poll_once(Duration::from_millis(200));
        match check(&addr, &guide.0.read().unwrap()) {
            Ok(()) => {
                let g = guide.0.read().unwrap();
                println!(
                    "reference data: ok ({} titles, {} episodes, {} airings at LSN {})",
                    g.titles.len(),
                    g.episodes.len(),
                    g.airings.len(),
                    g.lsn
                );
                return;
            }
            Err(e) => last_err = e,
        }
    }
    eprintln!("reference data: FAILED: {last_err}");
    std::process::exit(1);
}
