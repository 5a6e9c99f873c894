//! What the benchmarks share: interruption, machine facts, latency
//! histograms, the concurrent-writer harness, tables and files.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

static STOP: AtomicBool = AtomicBool::new(false);
static CTRLC_HITS: AtomicUsize = AtomicUsize::new(0);

/// First Ctrl-C: every loop winds down and guards (the PostgreSQL, MariaDB,
/// Redis, memcached and Aqueduct servers, temporary directories) are dropped
/// normally. Second: stop the servers at once and exit.
pub fn install_ctrlc() -> anyhow::Result<()> {
    ctrlc::set_handler(|| {
        if CTRLC_HITS.fetch_add(1, Ordering::SeqCst) == 0 {
            STOP.store(true, Ordering::SeqCst);
            eprintln!("\ninterrupted: winding down (press Ctrl-C again to abort at once)");
        } else {
            emergency_stop();
            std::process::exit(130);
        }
    })
    .context("installing the Ctrl-C handler")
}

/// Stops every server this process started, at once.
pub fn emergency_stop() {
    crate::pg::emergency_stop();
    crate::mariadb::emergency_stop();
    crate::kv::emergency_stop();
    crate::aqueduct_server::emergency_stop();
    crate::feed_bench::emergency_stop();
    crate::publications::emergency_stop();
}

pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

pub fn check_stop() -> anyhow::Result<()> {
    if stopped() {
        bail!("interrupted");
    }
    Ok(())
}

/// Sleeps up to `d`, waking early when interrupted.
pub fn nap(d: Duration) {
    let until = Instant::now() + d;
    while !stopped() {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}

#[derive(Serialize, Clone, Debug)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub memory_total_bytes: u64,
    pub kernel: String,
    pub os: String,
}

pub fn machine() -> Machine {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_total_bytes = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/version")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_default();
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default();
    Machine {
        cores,
        cpu_model,
        memory_total_bytes,
        kernel,
        os,
    }
}

/// A latency histogram in nanoseconds (2 significant digits: 1 % precision).
pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 2).expect("valid histogram bounds")
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        Latency {
            count: h.len(),
            mean_ms: h.mean() / 1e6,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p95_ms: ms(h.value_at_quantile(0.95)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

/// How one timed run of concurrent writers is shaped.
#[derive(Clone, Debug)]
pub struct WriterSpec {
    pub label: String,
    pub writers: usize,
    /// Appends before this are not measured (time mode only).
    pub warmup: Duration,
    pub seconds: Duration,
    /// When set, the run does exactly this many appends, all measured.
    pub records: Option<u64>,
    pub keyspace: u64,
    pub value_bytes: usize,
    pub seed: u64,
}

/// What a run of writers measured.
pub struct WriterOutcome {
    pub records: u64,
    pub seconds: f64,
    pub hist: Histogram<u64>,
}

impl WriterOutcome {
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records as f64 / self.seconds
        } else {
            0.0
        }
    }
}

pub fn key_of(n: u64) -> Vec<u8> {
    format!("obj/{n}").into_bytes()
}

/// A value of `len` random bytes.
pub fn random_value(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Runs `spec.writers` threads, each calling `op(key, value)` back to back
/// with keys `obj/<n>` drawn uniformly from the keyspace, and times every call:
/// the time from the call to its return is the time to durable. Only calls
/// that complete inside the measured window count.
pub fn run_writers<F>(spec: &WriterSpec, pb: &ProgressBar, op: F) -> anyhow::Result<WriterOutcome>
where
    F: Fn(Vec<u8>, Vec<u8>) -> anyhow::Result<()> + Sync,
{
    let start = Instant::now();
    let timed = spec.records.is_none();
    let measure_from = if timed { start + spec.warmup } else { start };
    let end = measure_from + spec.seconds;
    let issued = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let op = &op;
    let (records, hist, last) = std::thread::scope(|s| -> anyhow::Result<_> {
        let mut handles = Vec::with_capacity(spec.writers);
        for t in 0..spec.writers {
            let (issued, done, failed) = (&issued, &done, &failed);
            let h = std::thread::Builder::new()
                .name(format!("writer-{t}"))
                .stack_size(256 * 1024)
                .spawn_scoped(
                    s,
                    move || -> anyhow::Result<(u64, Histogram<u64>, Instant)> {
                        let mut rng =
                            StdRng::seed_from_u64(spec.seed ^ (t as u64).wrapping_mul(0x9e37_79b9));
                        let template = random_value(&mut rng, spec.value_bytes);
                        let mut hist = new_hist();
                        let mut n = 0u64;
                        let mut last = start;
                        let mut seq = 0u64;
                        loop {
                            if stopped() || failed.load(Ordering::Relaxed) {
                                break;
                            }
                            match spec.records {
                                Some(limit) => {
                                    if issued.fetch_add(1, Ordering::Relaxed) >= limit {
                                        break;
                                    }
                                }
                                None => {
                                    if Instant::now() >= end {
                                        break;
                                    }
                                }
                            }
                            let key = key_of(rng.gen_range(0..spec.keyspace.max(1)));
                            let mut value = template.clone();
                            seq += 1;
                            let stamp = (seq ^ ((t as u64) << 40)).to_le_bytes();
                            let k = stamp.len().min(value.len());
                            value[..k].copy_from_slice(&stamp[..k]);
                            let t0 = Instant::now();
                            if let Err(e) = op(key, value) {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                            let t1 = Instant::now();
                            if t1 >= measure_from && (!timed || t1 <= end) {
                                hist.saturating_record((t1 - t0).as_nanos() as u64);
                                n += 1;
                                done.fetch_add(1, Ordering::Relaxed);
                                last = last.max(t1);
                            }
                        }
                        Ok((n, hist, last))
                    },
                )
                .context("spawning a writer thread")?;
            handles.push(h);
        }
        let mut shown = Instant::now();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if shown.elapsed() >= Duration::from_millis(250) {
                shown = Instant::now();
                let now = Instant::now();
                let msg = if now < measure_from {
                    format!("{}: warming up", spec.label)
                } else {
                    let secs = (now.min(end) - measure_from).as_secs_f64().max(1e-9);
                    let d = done.load(Ordering::Relaxed);
                    format!(
                        "{}: {} records, {:.0} rec/s",
                        spec.label,
                        d,
                        d as f64 / secs
                    )
                };
                pb.set_message(msg);
            }
        }
        let mut records = 0;
        let mut hist = new_hist();
        let mut last = start;
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok((n, th, l))) => {
                    records += n;
                    hist.add(&th).expect("histograms of the same bounds");
                    last = last.max(l);
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow::anyhow!("a writer thread panicked"));
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e.context(format!("{}: a write failed", spec.label)));
        }
        Ok((records, hist, last))
    })?;
    check_stop()?;
    let seconds = if timed {
        spec.seconds.as_secs_f64()
    } else {
        (last - start).as_secs_f64()
    };
    Ok(WriterOutcome {
        records,
        seconds,
        hist,
    })
}

/// Ends the process if a run outlives its time bound (a stuck run, such as a
/// deadlock in the code under test, must not hang the benchmark).
pub struct Watchdog {
    tx: Option<std::sync::mpsc::Sender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn new(limit: Duration, what: String) -> Watchdog {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!(
                    "\nerror: {what} did not finish within {} s: it is stuck (a deadlock?); aborting",
                    limit.as_secs()
                );
                emergency_stop();
                std::process::exit(3);
            }
        });
        Watchdog {
            tx: Some(tx),
            handle: Some(handle),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A line above the progress bar (or on stderr when the bar is hidden).
pub fn say(pb: &ProgressBar, msg: String) {
    if pb.is_hidden() {
        eprintln!("{msg}");
    } else {
        pb.println(msg);
    }
}

/// The disk's own fdatasync latency: `n` appends of 256 bytes to a fresh
/// file in `dir`, each followed by fdatasync, one at a time.
pub fn fdatasync_probe(dir: &Path, n: usize) -> anyhow::Result<Latency> {
    use std::io::Write;
    let path = dir.join("fdatasync-probe");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .context("creating the fdatasync probe file")?;
    let buf = [0x5au8; 256];
    let mut hist = new_hist();
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&buf)?;
        f.sync_data()?;
        hist.saturating_record(t.elapsed().as_nanos() as u64);
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(Latency::of(&hist))
}

pub fn progress(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("valid progress template")
            .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

/// Prints an aligned table: the first column left-aligned, the rest right.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i == 0 {
                out.push_str(c);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.iter().map(|s| s.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for r in rows {
        line(r.clone());
    }
}

/// 1234567 -> "1,234,567".
pub fn thousands(n: u64) -> String {
    let digits: Vec<char> = n.to_string().chars().rev().collect();
    let groups: Vec<String> = digits.chunks(3).map(|c| c.iter().rev().collect()).collect();
    groups.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// A latency in milliseconds, with precision to suit its size.
pub fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else if v >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// Bytes of all files directly in `dir`.
pub fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let m = e?.metadata()?;
        if m.is_file() {
            total += m.len();
        }
    }
    Ok(total)
}

/// How many bytes of the files in `dir` are in the page cache (mincore).
pub fn resident_bytes(dir: &Path) -> anyhow::Result<(u64, u64)> {
    use std::os::unix::io::AsRawFd;
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let (mut resident, mut total) = (0u64, 0u64);
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if !path.is_file() {
            continue;
        }
        let f = std::fs::File::open(&path)?;
        let len = f.metadata()?.len();
        total += len;
        if len == 0 {
            continue;
        }
        // SAFETY: a read-only shared mapping of a file we opened, unmapped below;
        // mincore only reads the mapping's residency.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                bail!(
                    "mmap of {}: {}",
                    path.display(),
                    std::io::Error::last_os_error()
                );
            }
            let pages = len.div_ceil(page) as usize;
            let mut vec = vec![0u8; pages];
            let rc = libc::mincore(p, len as usize, vec.as_mut_ptr());
            libc::munmap(p, len as usize);
            if rc != 0 {
                bail!("mincore: {}", std::io::Error::last_os_error());
            }
            let n = vec.iter().filter(|b| **b & 1 == 1).count() as u64;
            resident += (n * page).min(len);
        }
    }
    Ok((resident, total))
}

/// Drops the files of `dir` from the page cache without privileges: each is
/// synced, then advised away with posix_fadvise(POSIX_FADV_DONTNEED).
pub fn evict_from_page_cache(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::io::AsRawFd;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if !path.is_file() {
            continue;
        }
        let f = std::fs::File::open(&path)?;
        f.sync_all()
            .with_context(|| format!("syncing {}", path.display()))?;
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            bail!("posix_fadvise on {}: error {rc}", path.display());
        }
    }
    Ok(())
}

/// A scratch directory for one benchmark, inside `parent` (the disk under test).
pub fn scratch_dir(
    parent: &Option<std::path::PathBuf>,
    prefix: &str,
) -> anyhow::Result<tempfile::TempDir> {
    let parent = parent.clone().unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .with_context(|| format!("creating a scratch directory in {}", parent.display()))
}
