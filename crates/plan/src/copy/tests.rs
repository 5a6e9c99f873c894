//! Tests of `COPY`'s formats: round trips through the encoder and the
//! decoder (fed whole and byte by byte), PostgreSQL's exact bytes for
//! known rows, and the option checks.

use super::*;
use crate::parse::parse;
use sqlparser::ast::Statement;

/// The options of a `COPY` statement, as the binder gets them.
fn opts(sql: &str) -> Result<CopyOptions, SqlError> {
    match parse(sql)?.pop() {
        Some(Statement::Copy {
            options: o,
            legacy_options,
            to,
            ..
        }) => options(&o, &legacy_options, to),
        other => panic!("not a COPY: {other:?}"),
    }
}

fn col(name: &str, ty: DataType) -> Column {
    Column::computed(name, ty)
}

/// Columns of most kinds of value.
fn columns() -> Vec<Column> {
    vec![
        col("i", DataType::Int4),
        col("t", DataType::Text),
        col("b", DataType::Bytea),
        col("a", DataType::Array(Box::new(DataType::Text))),
        col("j", DataType::Jsonb),
        col("ts", DataType::Timestamp),
        col("n", DataType::Numeric),
    ]
}

/// Values of `columns()`: awkward text, NULLs, empty strings.
fn rows() -> Vec<Vec<Value>> {
    let cols = columns();
    let typed = |texts: [Option<&str>; 7]| -> Vec<Value> {
        texts
            .iter()
            .zip(&cols)
            .map(|(t, c)| match t {
                None => Value::Null,
                Some(t) => crate::parse::param_from_text(t, &c.ty).unwrap(),
            })
            .collect()
    };
    vec![
        typed([
            Some("1"),
            Some("plain"),
            Some("\\x00ff10"),
            Some("{a,\"b c\",NULL}"),
            Some("{\"k\": [1, \"x\\ty\"]}"),
            Some("2024-02-29 12:34:56.789"),
            Some("-12345.6789"),
        ]),
        typed([Some("2"), Some(""), None, Some("{}"), None, None, Some("0")]),
        typed([
            Some("3"),
            Some("tab\there\nnew\\line\r\u{8}\u{c}\u{b}, \"quoted\" \\."),
            Some("\\x"),
            None,
            Some("\"s\""),
            Some("1999-12-31 23:59:59"),
            Some("1e-10"),
        ]),
        typed([None, Some("\\."), None, None, None, None, None]),
        typed([Some("5"), Some("\\N"), None, None, None, None, None]),
    ]
}

fn encode(o: &CopyOptions, cols: &[Column], rows: &[Vec<Value>]) -> Vec<u8> {
    let mut e = CopyEncoder::new(o.clone(), cols).unwrap();
    for r in rows {
        e.row(r).unwrap();
    }
    e.finish().concat()
}

/// Decodes `data` fed in pieces of `step` bytes.
fn decode(
    o: &CopyOptions,
    cols: &[Column],
    data: &[u8],
    step: usize,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut d = CopyDecoder::new(o.clone(), "t", cols)?;
    let mut rows = Vec::new();
    for chunk in data.chunks(step.max(1)) {
        d.feed(chunk)?;
        take_all(&mut d, &mut rows, false)?;
    }
    take_all(&mut d, &mut rows, true)?;
    Ok(rows)
}

/// Takes every chunk of rows `d` holds into `rows`, as a session writes
/// them; `last`: the data ended.
fn take_all(d: &mut CopyDecoder, rows: &mut Vec<Vec<Value>>, last: bool) -> Result<(), SqlError> {
    loop {
        if last {
            d.resume(true)?;
        }
        let full = d.full();
        rows.extend(d.take_rows().0);
        if !full {
            return Ok(());
        }
        d.resume(last)?;
    }
}

#[test]
fn round_trips_in_every_format() {
    for sql in [
        "COPY t TO STDOUT",
        "COPY t TO STDOUT (FORMAT csv)",
        "COPY t TO STDOUT (FORMAT csv, HEADER)",
        "COPY t TO STDOUT (FORMAT text, HEADER true, DELIMITER '|', NULL 'nil')",
        "COPY t TO STDOUT (FORMAT csv, QUOTE '''', ESCAPE '\\', DELIMITER ';')",
        "COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE *)",
        "COPY t TO STDOUT (FORMAT binary)",
        "COPY t TO STDOUT WITH CSV HEADER",
        "COPY t TO STDOUT BINARY",
    ] {
        let o = opts(sql).unwrap();
        let data = encode(&o, &columns(), &rows());
        for step in [usize::MAX, 1, 7] {
            let back = decode(&o, &columns(), &data, step)
                .unwrap_or_else(|e| panic!("{sql} (step {step}): {e:?}"));
            assert_eq!(back, rows(), "{sql} (step {step})");
        }
    }
}

#[test]
fn text_format_is_postgresql_s() {
    let o = opts("COPY t TO STDOUT").unwrap();
    let cols = [col("a", DataType::Text), col("b", DataType::Int4)];
    let rows = [
        vec![
            Value::Text("a\\b\tc\nd\re\u{8}f\u{c}g\u{b}h".into()),
            Value::Null,
        ],
        vec![Value::Text(String::new()), Value::Int(-1)],
    ];
    assert_eq!(
        encode(&o, &cols, &rows),
        b"a\\\\b\\tc\\nd\\re\\bf\\fg\\vh\t\\N\n\t-1\n"
    );
    // Octal and hex escapes, and a backslash before anything else, read back.
    let back = decode(&o, &cols, b"\\101\\x42\\q\t7\n", 1).unwrap();
    assert_eq!(back, vec![vec![Value::Text("ABq".into()), Value::Int(7)]]);
    // The first line's ending is every line's.
    let e = decode(&o, &cols, b"x\t1\ny\t2\rz\t3\n", 100).unwrap_err();
    assert_eq!(e.message, "literal carriage return found in data");
    let e = decode(&o, &cols, b"x\t1\r\ny\t2\n", 1).unwrap_err();
    assert_eq!(e.message, "literal newline found in data");
    let csv = opts("COPY t FROM STDIN (FORMAT csv)").unwrap();
    let e = decode(&csv, &cols, b"x,1\ry,2\nz,3", 2).unwrap_err();
    assert_eq!(e.message, "unquoted newline found in data");
    assert_eq!(decode(&csv, &cols, b"x,1\ry,2\r", 1).unwrap().len(), 2);
    // The end marker stops the data; `\r\n` ends lines.
    let back = decode(&o, &cols, b"x\t1\r\n\\.\r\nignored\n", 3).unwrap();
    assert_eq!(back, vec![vec![Value::Text("x".into()), Value::Int(1)]]);
}

#[test]
fn csv_quoting_is_postgresql_s() {
    let o = opts("COPY t TO STDOUT (FORMAT csv)").unwrap();
    let cols = [col("a", DataType::Text), col("b", DataType::Text)];
    let rows = [
        vec![Value::Text(String::new()), Value::Null],
        vec![Value::Text("x,y".into()), Value::Text("say \"hi\"".into())],
        vec![
            Value::Text("two\nlines".into()),
            Value::Text("plain".into()),
        ],
    ];
    let data = encode(&o, &cols, &rows);
    assert_eq!(
        data,
        b"\"\",\n\"x,y\",\"say \"\"hi\"\"\"\n\"two\nlines\",plain\n".to_vec()
    );
    // Empty string and NULL stay apart, and the quoted newline is data.
    assert_eq!(decode(&o, &cols, &data, 1).unwrap(), rows);
    // A lone `\.` is quoted when it is the only column.
    let one = [col("a", DataType::Text)];
    assert_eq!(
        encode(&o, &one, &[vec![Value::Text("\\.".into())]]),
        b"\"\\.\"\n"
    );
    let force = opts("COPY t TO STDOUT (FORMAT csv, HEADER, FORCE_QUOTE (b))").unwrap();
    assert_eq!(
        encode(&force, &cols, &[vec![Value::Text("1".into()), Value::Null]]),
        b"a,b\n1,\n"
    );
    assert_eq!(
        encode(
            &force,
            &cols,
            &[vec![Value::Text("1".into()), Value::Text("2".into())]]
        ),
        b"a,b\n1,\"2\"\n"
    );
}

#[test]
fn csv_force_null_and_force_not_null() {
    let cols = [col("a", DataType::Text), col("b", DataType::Text)];
    let o = opts("COPY t FROM STDIN (FORMAT csv, FORCE_NOT_NULL (a), FORCE_NULL (b))").unwrap();
    let back = decode(&o, &cols, b",\"\"\n", 100).unwrap();
    assert_eq!(back, vec![vec![Value::Text(String::new()), Value::Null]]);
    let o = opts("COPY t FROM STDIN WITH CSV FORCE NOT NULL a").unwrap();
    assert_eq!(o.force_not_null, vec!["a".to_string()]);
}

#[test]
fn binary_layout_is_postgresql_s() {
    let o = opts("COPY t TO STDOUT (FORMAT binary)").unwrap();
    let cols = [col("a", DataType::Int4), col("b", DataType::Text)];
    let data = encode(&o, &cols, &[vec![Value::Int(1), Value::Null]]);
    let mut want = b"PGCOPY\n\xff\r\n\0".to_vec();
    want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0, 2, 0, 0, 0, 4, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
    want.extend_from_slice(&[0xff, 0xff]);
    assert_eq!(data, want);
    // A tuple of the wrong width, a bad signature and a cut are 22P04.
    let e = decode(&o, &cols[..1], &data, 5).unwrap_err();
    assert_eq!(e.code, "22P04");
    assert_eq!(
        decode(&o, &cols, b"PGCOPY\nxx", 100).unwrap_err().code,
        "22P04"
    );
    assert_eq!(
        decode(&o, &cols, &want[..25], 100).unwrap_err().code,
        "22P04"
    );
    // Without a trailer the data may still end between tuples.
    assert_eq!(
        decode(&o, &cols, &want[..want.len() - 2], 3).unwrap().len(),
        1
    );
}

#[test]
fn bad_rows_name_their_line() {
    let o = opts("COPY t FROM STDIN").unwrap();
    let cols = [col("a", DataType::Int4), col("b", DataType::Text)];
    let e = decode(&o, &cols, b"1\tx\n2\n", 100).unwrap_err();
    assert_eq!(e.code, "22P04");
    assert_eq!(e.message, "missing data for column \"b\"");
    assert_eq!(e.context.as_deref(), Some("COPY t, line 2: \"2\""));
    let e = decode(&o, &cols, b"1\tx\t3\n", 100).unwrap_err();
    assert_eq!(e.message, "extra data after last expected column");
    let e = decode(&o, &cols, b"1\tx\n2\ty\nabc\tz\n", 2).unwrap_err();
    assert_eq!(e.code, "22P02");
    assert_eq!(
        e.context.as_deref(),
        Some("COPY t, line 3, column a: \"abc\"")
    );
    // A header line counts.
    let h = opts("COPY t FROM STDIN (FORMAT csv, HEADER)").unwrap();
    let e = decode(&h, &cols, b"a,b\n1,x\n\"2\nz\",y\n", 1).unwrap_err();
    assert_eq!(
        e.context.as_deref(),
        Some("COPY t, line 4, column a: \"2\nz\"")
    );
    assert_eq!(
        decode(&h, &cols, b"a,b\n1,\"open\n", 100).unwrap_err().code,
        "22P04"
    );
}

#[test]
fn options_are_checked_as_postgresql_checks_them() {
    let code = |sql: &str| opts(sql).unwrap_err().code;
    assert_eq!(code("COPY t FROM STDIN (FORMAT xml)"), "22023");
    assert_eq!(code("COPY t FROM STDIN (FORMAT csv, FORMAT text)"), "42601");
    assert_eq!(code("COPY t FROM STDIN (FORMAT binary, HEADER)"), "42601");
    assert_eq!(code("COPY t FROM STDIN (QUOTE '''')"), "0A000");
    assert_eq!(
        code("COPY t FROM STDIN (FORMAT csv, FORCE_QUOTE (a))"),
        "0A000"
    );
    assert_eq!(
        code("COPY t TO STDOUT (FORMAT csv, FORCE_NOT_NULL (a))"),
        "0A000"
    );
    assert_eq!(code("COPY t FROM STDIN (DELIMITER 'a')"), "22023");
    assert_eq!(
        code("COPY t FROM STDIN (FORMAT csv, DELIMITER '\"')"),
        "22023"
    );
    assert_eq!(code("COPY t FROM STDIN (ENCODING 'LATIN1')"), "0A000");
    let o = opts("COPY t FROM STDIN WITH (FREEZE on, ENCODING 'UTF8', HEADER off)").unwrap();
    assert!(!o.header);
    let o = opts("COPY t FROM STDIN WITH DELIMITER AS ',' NULL AS ''").unwrap();
    assert_eq!((o.delimiter, o.null.as_str()), (b',', ""));
    let o = opts("COPY t TO STDOUT WITH CSV HEADER FORCE QUOTE *").unwrap();
    assert_eq!((o.header, o.force_quote), (true, ForceQuote::All));
    let cols = [col("a", DataType::Text)];
    let o = opts("COPY t TO STDOUT (FORMAT csv, FORCE_QUOTE (nope))").unwrap();
    assert_eq!(CopyEncoder::new(o, &cols).err().unwrap().code, "42P10");
}

#[test]
fn rows_are_handed_on_in_chunks_and_a_row_is_bounded() {
    let o = opts("COPY t FROM STDIN").unwrap();
    let cols = [col("a", DataType::Int4)];
    // One message of two and a half chunks: read a chunk at a time.
    let n = COPY_CHUNK_ROWS * 5 / 2;
    let data: String = (0..n).map(|i| format!("{i}\n")).collect();
    let mut d = CopyDecoder::new(o.clone(), "t", &cols).unwrap();
    d.feed(data.as_bytes()).unwrap();
    assert!(d.full());
    let (first, lines) = d.take_rows();
    assert_eq!(
        (first.len(), lines[0], lines[COPY_CHUNK_ROWS - 1]),
        (COPY_CHUNK_ROWS, 1, COPY_CHUNK_ROWS as u64)
    );
    d.resume(false).unwrap();
    let (second, lines) = d.take_rows();
    assert_eq!(
        (second[0][0].clone(), lines[0]),
        (
            Value::Int(COPY_CHUNK_ROWS as i64),
            COPY_CHUNK_ROWS as u64 + 1
        )
    );
    d.resume(true).unwrap();
    assert!(!d.full());
    assert_eq!(d.take_rows().0.len(), n - 2 * COPY_CHUNK_ROWS);
    // A line still arriving past the bound on one row is refused.
    let mut d = CopyDecoder::new(o, "t", &cols).unwrap();
    let e = d.feed(&vec![b'7'; MAX_COPY_ROW_BYTES + 1]).unwrap_err();
    assert_eq!(e.code, "54000");
    assert!(e.message.contains("MAX_COPY_ROW_BYTES"), "{}", e.message);
}
