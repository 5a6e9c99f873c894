#[test]
fn stub() {
    let _c = rusqlite::Connection::open_in_memory().unwrap();
}
