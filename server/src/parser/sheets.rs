//! Spreadsheets and delimited exports: Excel workbooks (`.xlsx`) and
//! OpenDocument spreadsheets (`.ods`) read with `calamine`, CSV and TSV with
//! `csv`. A number means nothing in a chunk without its column, so a row
//! becomes a line that names its columns from the sheet's header row:
//! `Region: North; Q1: 1200` (a column without a header is named by its
//! letter). A sheet is a page, its name on its first line.
//!
//! Bounds: the workbook is an archive and passes
//! [`office::check_archive`](super::office::check_archive) first (entry
//! count, declared sizes); Excel sheets are streamed cell by cell, so a
//! sheet that declares a million rows by sixteen thousand columns costs
//! only the cells it holds; the text is capped while it is produced.

use std::io::Cursor;

use app::dto::FailureCode;
use calamine::{Data, DataRef, Reader};

use super::{
    extract::{Progress, Rejection},
    Kind,
};

/// The page break between sheets.
const PAGE_BREAK: &str = "\n\n\u{c}";

/// Lines of one sheet, each row naming its columns after the header row.
struct Sheet {
    text: String,
    header: Option<Vec<String>>,
    max_text: usize,
}

impl Sheet {
    fn new(name: Option<&str>, max_text: usize) -> Self {
        let mut text = String::new();
        if let Some(name) = name {
            text.push_str(name);
            text.push('\n');
        }
        Self {
            text,
            header: None,
            max_text,
        }
    }

    /// Adds a row given as `(column, value)`, values already trimmed.
    fn row(&mut self, cells: &[(usize, String)]) -> Result<(), Rejection> {
        if cells.iter().all(|(_, v)| v.is_empty()) {
            return Ok(());
        }
        let Some(header) = &self.header else {
            // The first row with anything in it names the columns; it is
            // kept as a line too (a sheet of one row still says something).
            let width = cells.iter().map(|(c, _)| c + 1).max().unwrap_or(0);
            let mut names = vec![String::new(); width];
            for (c, v) in cells {
                names[*c] = v.clone();
            }
            let line: Vec<&str> = cells
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(_, v)| v.as_str())
                .collect();
            self.push(&line.join("; "))?;
            self.header = Some(names);
            return Ok(());
        };
        let named: Vec<String> = cells
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(c, v)| match header.get(*c).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h}: {v}"),
                None => format!("{}: {v}", column_letters(*c)),
            })
            .collect();
        self.push(&named.join("; "))
    }

    fn push(&mut self, line: &str) -> Result<(), Rejection> {
        if self.text.len() + line.len() + 1 > self.max_text {
            return Err(super::extract::too_much_text(self.max_text));
        }
        self.text.push_str(line);
        self.text.push('\n');
        Ok(())
    }
}

/// `A`, `Z`, `AA`, … for a zero-based column.
fn column_letters(mut c: usize) -> String {
    let mut out = Vec::new();
    loop {
        out.push(b'A' + (c % 26) as u8);
        if c < 26 {
            break;
        }
        c = c / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// A cell's value as a reader would write it: `1200`, `12.5`, `TRUE`, a
/// date as the workbook stores it.
fn cell_text(value: &impl std::fmt::Display) -> String {
    let s = value.to_string();
    s.trim().to_string()
}

/// The text of a workbook and its sheet count, telling `progress` of each
/// sheet read, of how many.
pub fn workbook(
    kind: Kind,
    bytes: &[u8],
    max_text: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<(String, u32), Rejection> {
    let damaged = |e: &dyn std::fmt::Display| {
        Rejection::new(
            FailureCode::Damaged,
            format!("the {} is damaged: {e}", kind.noun()),
        )
    };
    let mut pages = Vec::new();
    let mut produced = 0usize;
    match kind {
        Kind::Xlsx => {
            let mut book = calamine::Xlsx::new(Cursor::new(bytes)).map_err(|e| damaged(&e))?;
            let names = book.sheet_names();
            let total = u32::try_from(names.len()).unwrap_or(u32::MAX);
            for (done, name) in (1..).zip(names) {
                let mut sheet = Sheet::new(Some(&name), max_text.saturating_sub(produced));
                let mut cells = book
                    .worksheet_cells_reader(&name)
                    .map_err(|e| damaged(&e))?;
                let mut row: Vec<(usize, String)> = Vec::new();
                let mut at = None;
                while let Some(cell) = cells.next_cell().map_err(|e| damaged(&e))? {
                    let (r, c) = cell.get_position();
                    if at != Some(r) {
                        sheet.row(&row)?;
                        row.clear();
                        at = Some(r);
                    }
                    let value: Data = DataRef::clone(cell.get_value()).into();
                    row.push((c as usize, cell_text(&value)));
                }
                sheet.row(&row)?;
                produced += sheet.text.len();
                pages.push(sheet.text);
                progress(Progress { done, total });
            }
        }
        Kind::Ods => {
            let mut book = calamine::Ods::new(Cursor::new(bytes)).map_err(|e| damaged(&e))?;
            let names = book.sheet_names();
            let total = u32::try_from(names.len()).unwrap_or(u32::MAX);
            for (done, name) in (1..).zip(names) {
                let mut sheet = Sheet::new(Some(&name), max_text.saturating_sub(produced));
                let range = book.worksheet_range(&name).map_err(|e| damaged(&e))?;
                let left = range.start().map_or(0, |(_, c)| c as usize);
                for row in range.rows() {
                    let cells: Vec<(usize, String)> = row
                        .iter()
                        .enumerate()
                        .map(|(c, v): (usize, &Data)| (c + left, cell_text(v)))
                        .collect();
                    sheet.row(&cells)?;
                }
                produced += sheet.text.len();
                pages.push(sheet.text);
                progress(Progress { done, total });
            }
        }
        _ => {
            return Err(Rejection::new(
                FailureCode::Internal,
                format!("{} is not a spreadsheet format", kind.mime()),
            ))
        }
    }
    let n = u32::try_from(pages.len()).unwrap_or(u32::MAX);
    Ok((pages.join(PAGE_BREAK), n))
}

/// The text of a CSV or TSV export, rows naming their columns.
pub fn delimited(text: &str, delimiter: u8, max_text: usize) -> Result<String, Rejection> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut sheet = Sheet::new(None, max_text);
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {
                let cells: Vec<(usize, String)> = record
                    .iter()
                    .enumerate()
                    .map(|(c, v)| (c, v.trim().to_string()))
                    .collect();
                sheet.row(&cells)?;
            }
            Ok(false) => break,
            Err(e) => {
                return Err(Rejection::new(
                    FailureCode::Damaged,
                    format!(
                        "the file is not readable as {} ({e})",
                        if delimiter == b'\t' { "TSV" } else { "CSV" }
                    ),
                ))
            }
        }
    }
    Ok(sheet.text)
}

#[cfg(test)]
mod tests {
    use super::super::office_files as files;
    use super::*;

    const MB: usize = 1 << 20;

    #[test]
    fn each_sheet_read_is_reported() {
        let sheets: [(&str, &[&[&str]]); 3] = [
            ("North", &[&["Q1"], &["1200"]]),
            ("South", &[&["Q1"], &["950"]]),
            ("East", &[&["Q1"], &["700"]]),
        ];
        for (kind, book) in [
            (Kind::Xlsx, files::xlsx(&sheets, None)),
            (Kind::Ods, files::ods(&sheets)),
        ] {
            let mut heard = Vec::new();
            workbook(kind, &book, MB, &mut |p| heard.push((p.done, p.total))).expect("readable");
            assert_eq!(heard, [(1, 3), (2, 3), (3, 3)], "{kind:?}");
        }
    }

    #[test]
    fn a_workbook_row_names_its_columns_and_a_sheet_is_a_page() {
        let book = files::xlsx(
            &[
                (
                    "Sales",
                    &[
                        &["Region", "Q1", "", "Notes"],
                        &["North", "1200", "", "after the storm"],
                        &["South", "950.5", "7", ""],
                    ],
                ),
                ("Staff", &[&["Name", "Desk"], &["Ada", "4B"]]),
            ],
            None,
        );
        let (text, sheets) = workbook(Kind::Xlsx, &book, MB, &mut |_| {}).expect("readable");
        assert_eq!(sheets, 2);
        assert_eq!(
            text,
            "Sales\nRegion; Q1; Notes\nRegion: North; Q1: 1200; Notes: after the storm\n\
             Region: South; Q1: 950.5; C: 7\n\n\n\u{c}Staff\nName; Desk\nName: Ada; Desk: 4B\n"
        );
    }

    #[test]
    fn an_opendocument_spreadsheet_reads_like_the_workbook() {
        let book = files::ods(&[(
            "Stock",
            &[&["Item", "Count"], &["rope", "7"], &["", ""], &["tar", "2"]],
        )]);
        let (text, sheets) = workbook(Kind::Ods, &book, MB, &mut |_| {}).expect("readable");
        assert_eq!(sheets, 1);
        assert_eq!(
            text,
            "Stock\nItem; Count\nItem: rope; Count: 7\nItem: tar; Count: 2\n"
        );
    }

    #[test]
    fn a_sheet_that_declares_every_cell_of_excel_costs_only_what_it_holds() {
        let book = files::xlsx(
            &[("Huge", &[&["Key", "Value"], &["answer", "42"]])],
            Some("A1:XFD1048576"),
        );
        let started = std::time::Instant::now();
        let (text, _) = workbook(Kind::Xlsx, &book, MB, &mut |_| {}).expect("readable");
        assert_eq!(text, "Huge\nKey; Value\nKey: answer; Value: 42\n");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn the_text_cap_stops_a_long_sheet_while_it_is_read() {
        let rows: Vec<Vec<String>> = (0..5_000)
            .map(|i| vec![format!("row {i}"), "some words in a cell".to_string()])
            .collect();
        let rows: Vec<Vec<&str>> = rows
            .iter()
            .map(|r| r.iter().map(String::as_str).collect())
            .collect();
        let rows: Vec<&[&str]> = rows.iter().map(Vec::as_slice).collect();
        let book = files::xlsx(&[("Long", &rows)], None);
        let err = workbook(Kind::Xlsx, &book, 10_000, &mut |_| {}).expect_err("over the cap");
        assert_eq!(err.code, FailureCode::TooLarge);
    }

    #[test]
    fn csv_and_tsv_rows_name_their_columns_and_keep_quoted_commas() {
        let csv = "Region,Q1,Comment\nNorth,1200,\"late, but fine\"\nSouth,,short\n";
        assert_eq!(
            delimited(csv, b',', MB).expect("csv"),
            "Region; Q1; Comment\nRegion: North; Q1: 1200; Comment: late, but fine\n\
             Region: South; Comment: short\n"
        );
        assert_eq!(
            delimited("Item\tCount\nrope\t7\textra\n", b'\t', MB).expect("tsv"),
            "Item; Count\nItem: rope; Count: 7; C: extra\n"
        );
        assert_eq!(column_letters(0), "A");
        assert_eq!(column_letters(25), "Z");
        assert_eq!(column_letters(26), "AA");
        assert_eq!(column_letters(16_383), "XFD");
    }

    #[test]
    fn a_workbook_that_is_not_one_is_damaged() {
        let err = workbook(
            Kind::Xlsx,
            &files::zip_of(&[("a.txt", b"x")]),
            MB,
            &mut |_| {},
        )
        .expect_err("no workbook");
        assert_eq!(err.code, FailureCode::Damaged);
        assert!(
            err.message.starts_with("the Excel workbook is damaged: "),
            "{err}"
        );
    }
}
