//! Minimising a failing case: keep the failing query alone, then drop
//! batches, schema changes, statements and rows and simplify the query,
//! keeping each step that still fails the same way.

use std::time::{Duration, Instant};

use super::query::{simplify, Body, From, Query};
use super::runner::{param_query, param_values, run, table_rows_sql, view_ddl, Config, Failure};
use super::schema::insert_sql;
use super::schema::Ty;
use super::workload::{Alter, BatchKind, Case, Dml};

/// At most this long and this many runs.
const BUDGET: Duration = Duration::from_secs(90);
const MAX_RUNS: usize = 3000;

struct Shrinker<'a> {
    cfg: &'a Config,
    best: Case,
    failure: Failure,
    runs: usize,
    started: Instant,
}

impl Shrinker<'_> {
    fn exhausted(&self) -> bool {
        self.runs >= MAX_RUNS || self.started.elapsed() > BUDGET
    }

    /// Adopts `c` if it fails the same way.
    fn try_case(&mut self, c: Case) -> bool {
        if self.exhausted() {
            return false;
        }
        self.runs += 1;
        // A variant that panics in the engine fails another way.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&c, self.cfg)));
        match outcome {
            Ok(Err(f)) if f.kind.signature() == self.failure.kind.signature() => {
                self.best = c;
                self.failure = *f;
                true
            }
            _ => false,
        }
    }
}

pub fn minimize(case: &Case, cfg: &Config, failure: &Failure) -> (Case, Failure, usize) {
    let mut s = Shrinker {
        cfg,
        best: case.clone(),
        failure: failure.clone(),
        runs: 0,
        started: Instant::now(),
    };
    // The failing view alone.
    if let Some(v) = failure.view {
        let mut c = case.clone();
        c.views = vec![case.views[v].clone()];
        s.try_case(c);
    }
    // Nothing after the failure ("after batch 3", "in batch 3, before
    // its COMMIT", "before batch 3, after its schema changes").
    let batch = failure.at.split_once("batch ").and_then(|(_, n)| {
        n.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse::<usize>().ok())
    });
    if let Some(n) = batch {
        let mut c = s.best.clone();
        c.batches.truncate(n);
        s.try_case(c);
    } else {
        let mut c = s.best.clone();
        c.batches.clear();
        s.try_case(c);
    }
    // Tables the query does not read: their rows and writes at once.
    let mut used = Vec::new();
    for v in &s.best.views {
        query_tables(&v.query, &mut used);
    }
    let unused: Vec<usize> = (0..s.best.schema.tables.len())
        .filter(|&t| !used.contains(&s.best.schema.tables[t].name))
        .collect();
    if !unused.is_empty() {
        let mut c = s.best.clone();
        for &t in &unused {
            c.initial[t].clear();
        }
        for b in &mut c.batches {
            b.stmts.retain(|d| !unused.contains(&d.table()));
            b.changes.retain(|a| !unused.contains(&a.table()));
        }
        c.batches
            .retain(|b| !b.stmts.is_empty() || !b.changes.is_empty());
        s.try_case(c);
    }
    if s.best.restart_after.is_some() {
        let mut c = s.best.clone();
        c.restart_after = None;
        s.try_case(c);
    }
    loop {
        let mut progress = false;
        progress |= shrink_views(&mut s);
        progress |= shrink_queries(&mut s);
        progress |= shrink_batches(&mut s);
        progress |= shrink_rows(&mut s);
        if !progress || s.exhausted() {
            break;
        }
    }
    (s.best, s.failure, s.runs)
}

/// Other views (when the failing one fails only with them: shared dataflow).
fn shrink_views(s: &mut Shrinker<'_>) -> bool {
    let mut progress = false;
    let mut v = s.best.views.len();
    while v > 0 && s.best.views.len() > 1 {
        v -= 1;
        if v >= s.best.views.len() {
            continue;
        }
        let mut c = s.best.clone();
        c.views.remove(v);
        progress |= s.try_case(c);
    }
    progress
}

fn shrink_batches(s: &mut Shrinker<'_>) -> bool {
    let mut progress = false;
    // Whole batches, last first.
    let mut b = s.best.batches.len();
    while b > 0 {
        b -= 1;
        if b >= s.best.batches.len() {
            continue;
        }
        let mut c = s.best.clone();
        c.batches.remove(b);
        if let Some(r) = &mut c.restart_after {
            if *r > b {
                *r -= 1;
            }
        }
        progress |= s.try_case(c);
    }
    // Single schema changes, last first.
    for b in 0..s.best.batches.len() {
        let mut i = s.best.batches[b].changes.len();
        while i > 0 {
            i -= 1;
            if b >= s.best.batches.len() || i >= s.best.batches[b].changes.len() {
                continue;
            }
            let mut c = s.best.clone();
            c.batches[b].changes.remove(i);
            progress |= s.try_case(c);
        }
    }
    // Single statements; transactions to autocommit.
    for b in 0..s.best.batches.len() {
        if s.best.batches[b].kind == BatchKind::Commit {
            let mut c = s.best.clone();
            c.batches[b].kind = BatchKind::Autocommit;
            progress |= s.try_case(c);
        }
        let mut i = s.best.batches[b].stmts.len();
        while i > 0 {
            i -= 1;
            if b >= s.best.batches.len() || i >= s.best.batches[b].stmts.len() {
                continue;
            }
            let mut c = s.best.clone();
            c.batches[b].stmts.remove(i);
            progress |= s.try_case(c);
            // Rows of a multi-row insert.
            if b < s.best.batches.len() && i < s.best.batches[b].stmts.len() {
                if let Dml::Insert { rows, .. } = &s.best.batches[b].stmts[i] {
                    for r in (0..rows.len()).rev() {
                        let mut c = s.best.clone();
                        if let Dml::Insert { rows, .. } = &mut c.batches[b].stmts[i] {
                            if rows.len() > 1 && r < rows.len() {
                                rows.remove(r);
                                progress |= s.try_case(c);
                            }
                        }
                    }
                }
            }
        }
    }
    progress
}

fn shrink_rows(s: &mut Shrinker<'_>) -> bool {
    let mut progress = false;
    for t in 0..s.best.initial.len() {
        // Halves, quarters, ... then single rows.
        let mut chunk = s.best.initial[t].len().div_ceil(2).max(1);
        loop {
            let mut start = 0;
            while start < s.best.initial[t].len() {
                let mut c = s.best.clone();
                let end = (start + chunk).min(c.initial[t].len());
                c.initial[t].drain(start..end);
                if s.try_case(c) {
                    progress = true;
                } else {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    progress
}

fn shrink_queries(s: &mut Shrinker<'_>) -> bool {
    let mut progress = false;
    for v in 0..s.best.views.len() {
        loop {
            let mut adopted = false;
            for q in simplify(&s.best.views[v].query) {
                let mut c = s.best.clone();
                c.views[v].query = q;
                if s.try_case(c) {
                    adopted = true;
                    break;
                }
            }
            if !adopted {
                break;
            }
            progress = true;
        }
        if s.best.views[v].param.is_some() {
            let mut c = s.best.clone();
            c.views[v].param = None;
            progress |= s.try_case(c);
        }
        if s.best.views[v].materialized {
            let mut c = s.best.clone();
            c.views[v].materialized = false;
            progress |= s.try_case(c);
        }
    }
    progress
}

fn query_tables(q: &Query, out: &mut Vec<String>) {
    fn from(f: &From, out: &mut Vec<String>) {
        match f {
            From::Table { table, .. } => out.push(table.clone()),
            From::Join { left, right, .. } => {
                from(left, out);
                from(right, out);
            }
            From::Sub { query, .. } => query_tables(query, out),
        }
    }
    fn body(b: &Body, out: &mut Vec<String>) {
        match b {
            Body::Select(s) => from(&s.from, out),
            Body::Union { left, right, .. } => {
                body(left, out);
                from(&right.from, out);
            }
        }
    }
    body(&q.body, out);
}

/// The case as one SQL script (Aqueduct's dialect), tables the queries do
/// not read (and no column is added to) left out.
pub fn script(case: &Case, cfg: &Config) -> String {
    let mut used = Vec::new();
    for v in &case.views {
        query_tables(&v.query, &mut used);
    }
    let mut out = String::new();
    // Tables the queries read, and those a column is added to (their rows
    // are compared).
    let added_to = |i: usize| {
        case.batches.iter().any(|b| {
            b.changes
                .iter()
                .any(|a| matches!(a, Alter::AddColumn { .. }) && a.table() == i)
        })
    };
    let used_table = |i: usize| used.contains(&case.schema.tables[i].name) || added_to(i);
    for (i, t) in case.schema.tables.iter().enumerate() {
        if used_table(i) {
            out += &format!("{};\n", t.create_sql());
        }
    }
    let views = |out: &mut String| {
        for i in 0..case.views.len() {
            if cfg.use_views {
                *out += &format!("{};\n", view_ddl(case, i));
            }
        }
    };
    if case.views_first {
        views(&mut out);
    }
    for (i, rows) in case.initial.iter().enumerate() {
        if used_table(i) && !rows.is_empty() {
            out += &format!("{};\n", insert_sql(&case.schema.tables[i].name, rows));
        }
    }
    if !case.views_first {
        views(&mut out);
    }
    // Prepared queries with a parameter, as PostgreSQL writes them.
    let params: Vec<Option<(String, Ty)>> = case
        .views
        .iter()
        .enumerate()
        .map(|(i, _)| {
            let (q, ty) = param_query(case, i, cfg)?;
            Some((q.render(), ty))
        })
        .collect();
    for (i, p) in params.iter().enumerate() {
        if let Some((sql, _)) = p {
            out += &format!("PREPARE p{i} AS {sql};\n");
        }
    }
    // Tables a column was added to (their rows are compared too).
    let mut altered: Vec<usize> = Vec::new();
    let selects = |out: &mut String, altered: &[usize], step: usize, when: &str| {
        for &t in altered {
            *out += &format!("{}; -- {when}\n", table_rows_sql(case, t));
        }
        for (i, v) in case.views.iter().enumerate() {
            if cfg.use_views {
                *out += &format!("SELECT * FROM v{i}; -- {when}\n");
            } else {
                *out += &format!("{}; -- {when}\n", v.query.render());
            }
            if let Some((_, ty)) = &params[i] {
                let values = param_values(*ty);
                let lit = &values[(step * 5 + i) % values.len()];
                *out += &format!("EXECUTE p{i}({lit}); -- {when}\n");
            }
        }
    };
    selects(&mut out, &altered, 0, "after the initial rows");
    for (b, batch) in case.batches.iter().enumerate() {
        out += &format!("-- batch {}\n", b + 1);
        let changes: Vec<String> = batch
            .changes
            .iter()
            .filter(|a| used_table(a.table()))
            .map(|a| {
                let sql = a.render(&case.schema);
                if a.on_sqlite() {
                    format!("{sql};\n")
                } else {
                    format!("{sql}; -- SQLite instead gives the value where an INSERT leaves the column out\n")
                }
            })
            .collect();
        for a in &batch.changes {
            if matches!(a, Alter::AddColumn { .. }) && !altered.contains(&a.table()) {
                altered.push(a.table());
            }
        }
        if !changes.is_empty() {
            out += &changes.concat();
            selects(
                &mut out,
                &altered,
                b + 1,
                &format!("before batch {}, after its schema changes", b + 1),
            );
        }
        if batch.kind != BatchKind::Autocommit {
            out += "BEGIN;\n";
        }
        for d in &batch.stmts {
            if used_table(d.table()) {
                out += &format!("{};\n", d.render(&case.schema));
            }
        }
        match batch.kind {
            BatchKind::Autocommit => {}
            BatchKind::Commit => out += "COMMIT;\n",
            BatchKind::Rollback => out += "ROLLBACK;\n",
        }
        if case.restart_after == Some(b + 1) {
            out += "-- restart the server\n";
        }
        selects(&mut out, &altered, b + 1, &format!("after batch {}", b + 1));
    }
    out
}
