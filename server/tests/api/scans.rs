//! Scans made from known text: a real PDF (lopdf) drawn by poppler's
//! `pdftoppm`, and pages that are only those pictures, as a scanner makes
//! them. Shared by the OCR tests and the parse bench.

use std::{
    io::Write,
    process::{Command, Stdio},
};

use lopdf::{dictionary, Document, Object, Stream};

use crate::sample_pdf;

/// Page `page` of `pdf` drawn by pdftoppm at `dpi`, as `format` says:
/// `-gray` (a PGM), `-png` or `-jpeg`.
pub fn draw(pdf: &[u8], page: u32, dpi: u32, format: &str) -> Vec<u8> {
    let page = page.to_string();
    let dpi = dpi.to_string();
    let mut child = Command::new("pdftoppm")
        .args(["-f", &page, "-l", &page, "-r", &dpi, format, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pdftoppm (scripts/setup.sh installs poppler-utils)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(pdf)
        .expect("pdf to pdftoppm");
    let out = child.wait_with_output().expect("pdftoppm ran");
    assert!(out.status.success(), "pdftoppm: {}", out.status);
    out.stdout
}

/// A PGM's width, height and pixels.
fn pgm(bytes: &[u8]) -> (i64, i64, &[u8]) {
    // "P5\n<w> <h>\n255\n", then one byte per pixel.
    let mut fields = Vec::new();
    let mut at = 0;
    while fields.len() < 4 {
        while bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let start = at;
        while !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        fields.push(
            std::str::from_utf8(&bytes[start..at])
                .expect("header")
                .to_string(),
        );
    }
    assert_eq!(fields[0], "P5");
    let (w, h) = (fields[1].parse().expect("w"), fields[2].parse().expect("h"));
    (w, h, &bytes[at + 1..])
}

/// A PDF whose pages are pictures of `pages` (each a list of lines): no
/// text layer, as a scanner makes it.
pub fn scanned_pdf(pages: &[Vec<String>]) -> Vec<u8> {
    let printed = sample_pdf::pdf(pages);
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let mut kids: Vec<Object> = Vec::new();
    for n in 1..=pages.len() as u32 {
        let drawn = draw(&printed, n, 150, "-gray");
        let (w, h, pixels) = pgm(&drawn);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(pixels).expect("deflate");
        let image = doc.add_object(Stream::new(
            dictionary! {
                "Type" => "XObject", "Subtype" => "Image", "Width" => w, "Height" => h,
                "ColorSpace" => "DeviceGray", "BitsPerComponent" => 8, "Filter" => "FlateDecode",
            },
            z.finish().expect("deflate"),
        ));
        let content = doc.add_object(Stream::new(
            dictionary! {},
            b"q 595 0 0 842 0 0 cm /Scan Do Q".to_vec(),
        ));
        kids.push(
            doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => content,
                "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
                "Resources" => dictionary! {"XObject" => dictionary! {"Scan" => image}},
            })
            .into(),
        );
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {"Type" => "Pages", "Kids" => kids, "Count" => count}),
    );
    let catalog = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog);
    let mut out = Vec::new();
    doc.save_to(&mut out).expect("save");
    out
}
