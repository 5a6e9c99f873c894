//! Where the machine's CPU went during a measured window, from /proc: the
//! server under test (its process, or PostgreSQL's postmaster and children),
//! this benchmark's own client threads, and everything else (other users'
//! work, the idle peer server, kernel threads), plus the interrupt and softirq
//! time (which overlaps the others). Also the load average.

use std::time::Instant;

use serde::Serialize;

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The fields of /proc/<pid>/stat after the command name, which is in
/// parentheses and may hold spaces.
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// utime + stime of a process (all its threads), in clock ticks.
fn process_ticks(pid: &str) -> Option<u64> {
    let f = stat_fields(pid)?;
    // After the name: state(3) ppid(4) ... utime(14) stime(15).
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// utime + stime of `root` and of each of its direct children, in clock
/// ticks, by process id.
fn tree_ticks(root: u32) -> Vec<(u32, u64)> {
    let root_s = root.to_string();
    let mut out = Vec::new();
    if let Some(t) = process_ticks(&root_s) {
        out.push((root, t));
    }
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(pid) = name.parse::<u32>() else {
                continue;
            };
            if let Some(f) = stat_fields(&name) {
                if f.get(1) == Some(&root_s) {
                    if let Some(t) = process_ticks(&name) {
                        out.push((pid, t));
                    }
                }
            }
        }
    }
    out
}

/// Ticks the processes of `b` used since `a`: a process only in `b` started
/// in between and counts in full; one only in `a` exited in between and its
/// last interval is lost (never a negative amount).
fn tree_delta(a: &[(u32, u64)], b: &[(u32, u64)]) -> u64 {
    b.iter()
        .map(|(pid, tb)| match a.iter().find(|(p, _)| p == pid) {
            Some((_, ta)) => tb.saturating_sub(*ta),
            None => *tb,
        })
        .sum()
}

/// Clock ticks of all CPUs from /proc/stat.
#[derive(Clone, Copy, Debug, Default)]
struct MachineTicks {
    /// Everything but idle and iowait.
    busy: u64,
    /// Interrupts and softirqs (on loopback, most of TCP's receive path).
    irq: u64,
    steal: u64,
    total: u64,
}

fn machine_ticks() -> MachineTicks {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return MachineTicks::default();
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return MachineTicks::default();
    }
    // user nice system idle iowait irq softirq steal
    let total: u64 = v.iter().sum();
    let idle = v[3] + v[4];
    MachineTicks {
        busy: total - idle,
        irq: v[5] + v[6],
        steal: v[7],
        total,
    }
}

/// The 1-, 5- and 15-minute load averages.
pub fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = [0.0; 3];
    for (i, x) in text.split_whitespace().take(3).enumerate() {
        out[i] = x.parse().unwrap_or(0.0);
    }
    out
}

/// A reading of the counters at one instant.
#[derive(Clone, Debug)]
pub struct Sample {
    at: Instant,
    server: Vec<(u32, u64)>,
    bench: u64,
    machine: MachineTicks,
}

/// Reads the counters; `server` is the server's root process (with its
/// children: PostgreSQL runs a process per connection).
pub fn sample(server: Option<u32>) -> Sample {
    Sample {
        at: Instant::now(),
        server: server.map(tree_ticks).unwrap_or_default(),
        bench: process_ticks("self").unwrap_or(0),
        machine: machine_ticks(),
    }
}

/// CPU used between two samples, in cores (1.0 = one core busy all the time).
#[derive(Serialize, Clone, Debug, Default)]
pub struct CpuUse {
    pub window_seconds: f64,
    /// Cores available (the machine's total over the window).
    pub cores: f64,
    /// All busy time on the machine (user + system + irq, not idle/iowait).
    pub machine_busy_cores: f64,
    /// The server under test (with its child processes).
    pub server_cores: f64,
    /// This benchmark process: the client threads and the driver.
    pub bench_cores: f64,
    /// Interrupts and softirqs as /proc/stat counts them: on loopback mostly
    /// TCP's receive path, for both the server and the client. Not a separate
    /// share: without CONFIG_IRQ_TIME_ACCOUNTING the kernel also charges
    /// softirq work done in a process's context to that process, so most of
    /// this is already inside `server_cores` and `bench_cores`.
    pub irq_cores: f64,
    /// Busy time outside the server and this process: other users' work, the
    /// idle peer server, kernel threads.
    pub other_cores: f64,
    /// Time the hypervisor gave to other guests.
    pub steal_cores: f64,
}

impl CpuUse {
    pub fn between(a: &Sample, b: &Sample) -> CpuUse {
        let secs = (b.at - a.at).as_secs_f64().max(1e-9);
        let hz = clock_ticks_per_s();
        let c = |x: u64, y: u64| y.saturating_sub(x) as f64 / hz / secs;
        let (ma, mb) = (&a.machine, &b.machine);
        let machine_busy_cores = c(ma.busy, mb.busy);
        let server_cores = c(0, tree_delta(&a.server, &b.server));
        let bench_cores = c(a.bench, b.bench);
        let irq_cores = c(ma.irq, mb.irq);
        CpuUse {
            window_seconds: secs,
            cores: c(ma.total, mb.total),
            machine_busy_cores,
            server_cores,
            bench_cores,
            irq_cores,
            other_cores: (machine_busy_cores - server_cores - bench_cores).max(0.0),
            steal_cores: c(ma.steal, mb.steal),
        }
    }

    /// The mean over several windows, weighted by their lengths.
    pub fn mean(all: &[CpuUse]) -> CpuUse {
        let w: f64 = all.iter().map(|u| u.window_seconds).sum();
        if w <= 0.0 {
            return CpuUse::default();
        }
        let avg =
            |f: fn(&CpuUse) -> f64| all.iter().map(|u| f(u) * u.window_seconds).sum::<f64>() / w;
        CpuUse {
            window_seconds: w,
            cores: avg(|u| u.cores),
            machine_busy_cores: avg(|u| u.machine_busy_cores),
            server_cores: avg(|u| u.server_cores),
            bench_cores: avg(|u| u.bench_cores),
            irq_cores: avg(|u| u.irq_cores),
            other_cores: avg(|u| u.other_cores),
            steal_cores: avg(|u| u.steal_cores),
        }
    }
}

/// CPU time (user + system) `root` and its direct children have used since
/// they started, in seconds (0 when it is gone).
pub fn tree_seconds(root: u32) -> f64 {
    tree_ticks(root).iter().map(|(_, t)| *t).sum::<u64>() as f64 / clock_ticks_per_s()
}
