//! Rows back from the encoding: round trips, errors, a cell at a time.

use super::*;
use crate::RowsBuilder;

#[test]
fn every_cell_round_trips() {
    let mut b = RowsBuilder::new();
    b.begin_row(RowKind::Upsert, 2);
    b.null();
    b.boolean(true);
    b.tinyint(-3);
    b.smallint(-300);
    b.int(70_000);
    b.bigint(-1 << 40);
    b.float(1.5);
    b.double(-2.25);
    b.string("héllo");
    b.bytes(&[0, 255]);
    b.decimal("-12.30");
    b.date(19_000);
    b.time(3_600_000);
    b.timestamp(1_700_000_000_000_000);
    b.timestamp_ltz(-5);
    b.absent();
    b.end_row();
    b.begin_row(RowKind::Delete, 0);
    b.end_row();
    let bytes = b.into_bytes();
    let rows: Vec<_> = Rows::new(&bytes).collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].kind, RowKind::Upsert);
    assert_eq!(rows[0].table, 2);
    let cells: Vec<_> = rows[0].cells().collect();
    assert_eq!(
        cells,
        vec![
            Cell::Null,
            Cell::Boolean(true),
            Cell::TinyInt(-3),
            Cell::SmallInt(-300),
            Cell::Int(70_000),
            Cell::BigInt(-1 << 40),
            Cell::Float(1.5),
            Cell::Double(-2.25),
            Cell::String("héllo"),
            Cell::Bytes(&[0, 255]),
            Cell::Decimal("-12.30"),
            Cell::Date(19_000),
            Cell::Time(3_600_000),
            Cell::Timestamp(1_700_000_000_000_000),
            Cell::TimestampLtz(-5),
            Cell::Absent,
        ]
    );
    assert_eq!(rows[1].kind, RowKind::Delete);
    assert_eq!(rows[1].cell_count, 0);
}

#[test]
fn abandoned_and_rolled_back_rows_leave_nothing() {
    let mut b = RowsBuilder::new();
    b.begin_row(RowKind::Append, 0);
    b.int(1);
    b.end_row();
    let mark = b.mark();
    b.begin_row(RowKind::Append, 0);
    b.int(2);
    b.end_row();
    b.begin_row(RowKind::Append, 0);
    b.int(3);
    b.rollback(mark);
    assert_eq!(b.row_count(), 1);
    let bytes = b.into_bytes();
    assert_eq!(Rows::new(&bytes).count(), 1);
}

#[test]
fn truncated_and_garbage_buffers_are_errors() {
    let mut b = RowsBuilder::new();
    b.begin_row(RowKind::Append, 0);
    b.string("abc");
    b.end_row();
    let bytes = b.into_bytes();
    for cut in 1..bytes.len() {
        let r: Result<Vec<_>, _> = Rows::new(&bytes[..cut]).collect();
        assert!(r.is_err(), "cut at {cut} should fail");
    }
    let err = Rows::new(&[9, 0, 0, 0, 0]).next().unwrap().unwrap_err();
    assert!(err.reason.contains("row kind 9"), "{err}");
    let err = Rows::new(&[0, 0, 0, 1, 0, 99]).next().unwrap().unwrap_err();
    assert_eq!(err.offset, 5);
    assert!(err.reason.contains("cell tag 99"));
    let err = Rows::new(&[0, 0, 0, 1, 0, 8, 1, 0, 0, 0, 0xff])
        .next()
        .unwrap()
        .unwrap_err();
    assert!(err.reason.contains("UTF-8"), "{err}");
    // The errors made out of line say what they said inline.
    let err = Rows::new(&[0, 0, 0, 1, 0, 1, 7]).next().unwrap().unwrap_err();
    assert_eq!(err.reason, "boolean byte 7 is neither 0 nor 1");
    let err = Rows::new(&[0, 0, 0, 1, 0, 5, 1, 2]).next().unwrap().unwrap_err();
    assert_eq!(
        (err.offset, err.reason.as_str()),
        (6, "needs 8 more bytes, 2 left")
    );
}

/// Every row of `bytes` read a header and a cell at a time, taking
/// only the first `take` cells of each (the rest are left to `finish`).
fn streamed(bytes: &[u8], take: usize) -> Result<Vec<(RowHead, Vec<Cell<'_>>, usize)>, DecodeError> {
    let mut rows = Rows::new(bytes);
    let mut out = Vec::new();
    while let Some(head) = rows.next_head() {
        let head = head?;
        let mut cells = rows.cells(&head);
        let taken: Vec<_> = cells.by_ref().take(take).collect();
        cells.finish()?;
        out.push((head, taken, rows.position()));
    }
    Ok(out)
}

#[test]
fn rows_read_a_cell_at_a_time_are_the_rows_read_whole() {
    let mut b = RowsBuilder::new();
    b.begin_row(RowKind::Upsert, 2);
    b.bigint(-7);
    b.string("zwölf");
    b.decimal("1.50");
    b.end_row();
    b.begin_row(RowKind::Append, 0);
    b.null();
    b.boolean(true);
    b.bytes(&[0, 255]);
    b.end_row();
    let bytes = b.into_bytes();
    for cut in 0..=bytes.len() {
        let whole: Result<Vec<RowView<'_>>, _> = Rows::new(&bytes[..cut]).collect();
        for take in [0, 1, 3] {
            let streamed = streamed(&bytes[..cut], take);
            match (&whole, streamed) {
                (Ok(whole), Ok(streamed)) => {
                    assert_eq!(whole.len(), streamed.len(), "cut {cut}");
                    for (row, (head, cells, end)) in whole.iter().zip(streamed) {
                        assert_eq!(
                            (head.kind, head.table, head.cell_count),
                            (row.kind, row.table, row.cell_count)
                        );
                        assert_eq!((head.offset, end), (row.offset, row.offset + row.encoded_len()));
                        assert_eq!(cells, row.cells().take(take).collect::<Vec<_>>());
                    }
                }
                (Err(whole), Err(streamed)) => assert_eq!(whole, &streamed, "cut {cut}, take {take}"),
                (whole, streamed) => panic!("cut {cut}, take {take}: {whole:?} against {streamed:?}"),
            }
        }
    }
    for garbage in [
        &[9, 0, 0, 0, 0][..],
        &[0, 0, 0, 1, 0, 99],
        &[0, 0, 0, 1, 0, 8, 1, 0, 0, 0, 0xff],
    ] {
        let whole = Rows::new(garbage).next().unwrap().unwrap_err();
        assert_eq!(streamed(garbage, 1).unwrap_err(), whole);
    }
}

/// One STRING cell of `text`'s bytes, encoded by hand (the builder
/// takes only `&str`).
fn string_row(text: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0, 0, 0, 1, 0, tag::STRING];
    bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
    bytes.extend_from_slice(text);
    bytes
}

#[test]
fn text_is_checked_as_utf8_at_every_length() {
    for len in [1, 7, 8, 63, 64, 65, 200] {
        for (text, valid) in [
            ("a".repeat(len).into_bytes(), true),
            (format!("{}é", "a".repeat(len)).into_bytes(), true),
            // A lone continuation byte, first, in the middle, last.
            ([&[0x80][..], &b"a".repeat(len)].concat(), false),
            (
                [&b"a".repeat(len / 2)[..], &[0xC3][..], &b"a".repeat(len / 2)].concat(),
                false,
            ),
            ([&b"a".repeat(len)[..], &[0xff][..]].concat(), false),
        ] {
            let bytes = string_row(&text);
            let row = Rows::new(&bytes).next().unwrap();
            match row {
                Ok(row) if valid => {
                    let [Cell::String(s)] = row.cells().collect::<Vec<_>>()[..] else {
                        panic!("one string cell")
                    };
                    assert_eq!(s.as_bytes(), &text[..]);
                }
                Err(err) if !valid => {
                    assert_eq!(err.offset, 10, "{err}");
                    assert!(err.reason.starts_with("text is not UTF-8"), "{err}");
                }
                other => panic!("{len} bytes, valid {valid}: {other:?}"),
            }
        }
    }
}

#[test]
fn fits_allows_widening_only() {
    let col = |t: DataType, nullable| Column::new("c", t, nullable);
    assert!(Cell::Int(1).fits(&col(DataType::BigInt, false)).is_ok());
    assert!(Cell::BigInt(1).fits(&col(DataType::Int, false)).is_err());
    assert!(Cell::Float(1.0).fits(&col(DataType::Double, false)).is_ok());
    assert!(Cell::Null.fits(&col(DataType::Int, true)).is_ok());
    let err = Cell::Null.fits(&col(DataType::Int, false)).unwrap_err();
    assert!(err.contains("NOT NULL"), "{err}");
    let err = Cell::String("x").fits(&col(DataType::Int, true)).unwrap_err();
    assert_eq!(err, "column `c` is INT but the row has a STRING value");
    assert!(Cell::Bytes(&[1, 2]).fits(&col(DataType::Binary(2), true)).is_ok());
    assert!(Cell::Bytes(&[1]).fits(&col(DataType::Binary(2), true)).is_err());
}
