use aqueduct_log::{Log, Options, SyncPolicy};
use aqueduct_sql::Engine;
#[test]
fn scratch() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = Log::open(
        dir.path(),
        Options {
            sync: SyncPolicy::Never,
            ..Default::default()
        },
    )
    .unwrap();
    let e = Engine::open(log, &mut |_| {}).unwrap();
    let mut s = e.session();
    for sql in std::fs::read_to_string("/tmp/scratch.sql")
        .unwrap()
        .split(";\n")
    {
        let sql = sql.trim();
        if sql.is_empty() {
            continue;
        }
        let r = s.execute(sql).pop().unwrap();
        match r {
            Ok(aqueduct_sql::Outcome::Rows { rows, .. }) => eprintln!(
                "{sql}\n  => {:?}",
                rows.iter()
                    .map(|r| r.iter().map(|v| v.to_string()).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            ),
            Ok(o) => eprintln!("{sql}\n  => {o:?}"),
            Err(err) => eprintln!("{sql}\n  => ERROR {err}"),
        }
    }
}
