//! Word, PowerPoint, OpenDocument and EPUB files built in the test: the
//! parts each format requires (content types, relationships, manifest,
//! container), written with the `zip` crate, so a test knows every
//! sentence inside and where it sits (a table cell, a footnote, a slide).

use std::io::Write;

use zip::{write::SimpleFileOptions, CompressionMethod, ZipWriter};

/// A zip of `parts` in order; a `mimetype` part (OpenDocument, EPUB) is
/// stored uncompressed as those formats require.
pub fn zip_of(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in parts {
        let method = if *name == "mimetype" {
            CompressionMethod::Stored
        } else {
            CompressionMethod::Deflated
        };
        zip.start_file(
            *name,
            SimpleFileOptions::default().compression_method(method),
        )
        .expect("part");
        zip.write_all(bytes).expect("write");
    }
    zip.finish().expect("zip").into_inner()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";

/// A Word document: `paragraphs`, then a table of `rows`, and a footnote.
pub fn docx(paragraphs: &[&str], rows: &[&[&str]], footnote: Option<&str>) -> Vec<u8> {
    let para = |t: &str| {
        // A run split in two, as Word does around a spelling mark.
        let (a, b) = t.split_at(t.len() / 2);
        format!(
            r#"<w:p><w:pPr><w:pStyle w:val="Normal"/></w:pPr><w:r><w:t xml:space="preserve">{}</w:t></w:r><w:r><w:t xml:space="preserve">{}</w:t></w:r></w:p>"#,
            escape(a),
            escape(b)
        )
    };
    let mut body: String = paragraphs.iter().map(|p| para(p)).collect();
    if !rows.is_empty() {
        body.push_str("<w:tbl>");
        for row in rows {
            body.push_str("<w:tr>");
            for cell in *row {
                body.push_str(&format!("<w:tc>{}</w:tc>", para(cell)));
            }
            body.push_str("</w:tr>");
        }
        body.push_str("</w:tbl>");
    }
    let document = format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{W}"><w:body>{body}<w:sectPr/></w:body></w:document>"#
    );
    let content_types = r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"/></Types>"#;
    let rels = r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#;
    let mut parts: Vec<(&str, Vec<u8>)> = vec![
        ("[Content_Types].xml", content_types.into()),
        ("_rels/.rels", rels.into()),
        ("word/document.xml", document.into_bytes()),
    ];
    if let Some(note) = footnote {
        parts.push((
            "word/footnotes.xml",
            format!(
                r#"<?xml version="1.0"?><w:footnotes xmlns:w="{W}"><w:footnote w:id="1">{}</w:footnote></w:footnotes>"#,
                para(note)
            )
            .into_bytes(),
        ));
    }
    let parts: Vec<(&str, &[u8])> = parts.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    zip_of(&parts)
}

/// A PowerPoint deck, one slide per entry (its title, then its body lines).
pub fn pptx(slides: &[&[&str]]) -> Vec<u8> {
    let mut parts: Vec<(String, Vec<u8>)> = vec![(
        "[Content_Types].xml".into(),
        br#"<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/></Types>"#.to_vec(),
    ), (
        "ppt/presentation.xml".into(),
        br#"<?xml version="1.0"?><p:presentation xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"/>"#.to_vec(),
    )];
    for (i, lines) in slides.iter().enumerate() {
        let shapes: String = lines
            .iter()
            .map(|l| {
                format!(
                    "<p:sp><p:txBody><a:bodyPr/><a:p><a:r><a:rPr lang=\"en-GB\"/><a:t>{}</a:t></a:r></a:p></p:txBody></p:sp>",
                    escape(l)
                )
            })
            .collect();
        parts.push((
            format!("ppt/slides/slide{}.xml", i + 1),
            format!(
                r#"<?xml version="1.0"?><p:sld xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><p:cSld><p:spTree>{shapes}</p:spTree></p:cSld></p:sld>"#
            )
            .into_bytes(),
        ));
    }
    let parts: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    zip_of(&parts)
}

const ODF_NS: &str = r#"xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0""#;

fn odf(mime: &str, body: &str) -> Vec<u8> {
    let content = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF_NS} office:version="1.3"><office:body>{body}</office:body></office:document-content>"#
    );
    let manifest = format!(
        r#"<?xml version="1.0"?><manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3"><manifest:file-entry manifest:full-path="/" manifest:media-type="{mime}"/><manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/></manifest:manifest>"#
    );
    zip_of(&[
        ("mimetype", mime.as_bytes()),
        ("content.xml", content.as_bytes()),
        ("META-INF/manifest.xml", manifest.as_bytes()),
    ])
}

/// An OpenDocument text: a heading, then `paragraphs`, then a table row.
pub fn odt(heading: &str, paragraphs: &[&str], row: &[&str]) -> Vec<u8> {
    let mut body = format!(
        r#"<office:text><text:h text:outline-level="1">{}</text:h>"#,
        escape(heading)
    );
    for p in paragraphs {
        body.push_str(&format!("<text:p>{}</text:p>", escape(p)));
    }
    body.push_str("<table:table><table:table-row>");
    for cell in row {
        body.push_str(&format!(
            "<table:table-cell><text:p>{}</text:p></table:table-cell>",
            escape(cell)
        ));
    }
    body.push_str("</table:table-row></table:table></office:text>");
    odf("application/vnd.oasis.opendocument.text", &body)
}

/// An OpenDocument presentation, one page per entry.
pub fn odp(slides: &[&[&str]]) -> Vec<u8> {
    let mut body = String::from("<office:presentation>");
    for (i, lines) in slides.iter().enumerate() {
        body.push_str(&format!(
            r#"<draw:page draw:name="page{}"><draw:frame><draw:text-box>"#,
            i + 1
        ));
        for l in *lines {
            body.push_str(&format!("<text:p>{}</text:p>", escape(l)));
        }
        body.push_str("</draw:text-box></draw:frame></draw:page>");
    }
    body.push_str("</office:presentation>");
    odf("application/vnd.oasis.opendocument.presentation", &body)
}

/// An EPUB whose chapters are `(title, paragraph)`, listed in the manifest
/// in reverse and in the spine in order, as the reading order is the
/// spine's.
pub fn epub(chapters: &[(&str, &str)]) -> Vec<u8> {
    let container = r#"<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>"#;
    let items: String = (0..chapters.len())
        .rev()
        .map(|i| format!(r#"<item id="c{i}" href="text/chapter%20{i}.xhtml" media-type="application/xhtml+xml"/>"#))
        .collect();
    let spine: String = (0..chapters.len())
        .map(|i| format!(r#"<itemref idref="c{i}"/>"#))
        .collect();
    let opf = format!(
        r#"<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Test book</dc:title></metadata><manifest>{items}</manifest><spine>{spine}</spine></package>"#
    );
    let mut parts: Vec<(String, Vec<u8>)> = vec![
        ("mimetype".into(), b"application/epub+zip".to_vec()),
        ("META-INF/container.xml".into(), container.into()),
        ("OEBPS/content.opf".into(), opf.into_bytes()),
    ];
    for (i, (title, text)) in chapters.iter().enumerate() {
        parts.push((
            format!("OEBPS/text/chapter {i}.xhtml"),
            format!(
                "<?xml version=\"1.0\"?>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"><head><title>Chapter</title><style>p {{ margin: 0 }}</style></head>\n<body>\n  <h1>{}</h1>\n  <p>{}</p>\n</body></html>",
                escape(title),
                escape(text)
            )
            .into_bytes(),
        ));
    }
    let parts: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    zip_of(&parts)
}

/// An Excel workbook: one sheet per `(name, rows)`, every cell an inline
/// string or, when it parses as one, a number. `dimension` is the range
/// the first sheet declares (Excel writes the used range there).
pub fn xlsx(sheets: &[(&str, &[&[&str]])], dimension: Option<&str>) -> Vec<u8> {
    let column = |mut c: usize| {
        let mut s = Vec::new();
        loop {
            s.push(b'A' + (c % 26) as u8);
            if c < 26 {
                break;
            }
            c = c / 26 - 1;
        }
        s.reverse();
        String::from_utf8(s).expect("ascii")
    };
    let mut parts: Vec<(String, Vec<u8>)> = vec![
        (
            "[Content_Types].xml".into(),
            br#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/></Types>"#.to_vec(),
        ),
        (
            "_rels/.rels".into(),
            br#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#.to_vec(),
        ),
    ];
    let mut listed = String::new();
    let mut rels = String::new();
    for (i, (name, rows)) in sheets.iter().enumerate() {
        let n = i + 1;
        listed.push_str(&format!(
            r#"<sheet name="{}" sheetId="{n}" r:id="rId{n}"/>"#,
            escape(name)
        ));
        rels.push_str(&format!(
            r#"<Relationship Id="rId{n}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet{n}.xml"/>"#
        ));
        let mut data = String::new();
        for (r, row) in rows.iter().enumerate() {
            data.push_str(&format!(r#"<row r="{}">"#, r + 1));
            for (c, v) in row.iter().enumerate() {
                if v.is_empty() {
                    continue;
                }
                let at = format!("{}{}", column(c), r + 1);
                if v.parse::<f64>().is_ok() {
                    data.push_str(&format!(r#"<c r="{at}"><v>{v}</v></c>"#));
                } else {
                    data.push_str(&format!(
                        r#"<c r="{at}" t="inlineStr"><is><t>{}</t></is></c>"#,
                        escape(v)
                    ));
                }
            }
            data.push_str("</row>");
        }
        let dim = match (i, dimension) {
            (0, Some(d)) => format!(r#"<dimension ref="{d}"/>"#),
            _ => String::new(),
        };
        parts.push((
            format!("xl/worksheets/sheet{n}.xml"),
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">{dim}<sheetData>{data}</sheetData></worksheet>"#
            )
            .into_bytes(),
        ));
    }
    parts.push((
        "xl/workbook.xml".into(),
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>{listed}</sheets></workbook>"#
        )
        .into_bytes(),
    ));
    parts.push((
        "xl/_rels/workbook.xml.rels".into(),
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rels}</Relationships>"#
        )
        .into_bytes(),
    ));
    let parts: Vec<(&str, &[u8])> = parts
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    zip_of(&parts)
}

/// An OpenDocument spreadsheet, one table per `(name, rows)`.
pub fn ods(sheets: &[(&str, &[&[&str]])]) -> Vec<u8> {
    let mut body = String::from("<office:spreadsheet>");
    for (name, rows) in sheets {
        body.push_str(&format!(r#"<table:table table:name="{}">"#, escape(name)));
        for row in *rows {
            body.push_str("<table:table-row>");
            for v in *row {
                if v.is_empty() {
                    body.push_str("<table:table-cell/>");
                } else if v.parse::<f64>().is_ok() {
                    body.push_str(&format!(
                        r#"<table:table-cell office:value-type="float" office:value="{v}"><text:p>{v}</text:p></table:table-cell>"#
                    ));
                } else {
                    body.push_str(&format!(
                        r#"<table:table-cell office:value-type="string"><text:p>{}</text:p></table:table-cell>"#,
                        escape(v)
                    ));
                }
            }
            body.push_str("</table:table-row>");
        }
        body.push_str("</table:table>");
    }
    body.push_str("</office:spreadsheet>");
    odf("application/vnd.oasis.opendocument.spreadsheet", &body)
}

/// A Word document whose one run is `before`, a "billion laughs" entity
/// (ten levels of ten references, 10⁹ "lol"s if expanded), then `after`.
pub fn billion_laughs_docx(before: &str, after: &str) -> Vec<u8> {
    let mut dtd = String::from("<!DOCTYPE w:document [<!ENTITY lol0 \"lol\">");
    for i in 1..10 {
        let refs: String = (0..10).map(|_| format!("&lol{};", i - 1)).collect();
        dtd.push_str(&format!("<!ENTITY lol{i} \"{refs}\">"));
    }
    dtd.push_str("]>");
    let body = format!(
        "<?xml version=\"1.0\"?>{dtd}<w:document xmlns:w=\"x\"><w:body><w:p><w:r><w:t>{before}&lol9;{after}</w:t></w:r></w:p></w:body></w:document>"
    );
    zip_of(&[("word/document.xml", body.as_bytes())])
}

/// The 42.zip shape: a Word document saying `text` and carrying 16 zips
/// of 16 entries of 4 MB of zeros each, 1 GB if every level were inflated.
pub fn nested_zips_docx(text: &str) -> Vec<u8> {
    let zeros = vec![0u8; 4 << 20];
    let names: Vec<String> = (0..16).map(|i| format!("{i}.bin")).collect();
    let inner = zip_of(
        &names
            .iter()
            .map(|n| (n.as_str(), &zeros[..]))
            .collect::<Vec<_>>(),
    );
    let body = format!(
        "<w:document xmlns:w=\"x\"><w:body><w:p><w:r><w:t>{}</w:t></w:r></w:p></w:body></w:document>",
        escape(text)
    );
    let embedded: Vec<String> = (0..16)
        .map(|i| format!("word/embeddings/package{i}.zip"))
        .collect();
    let mut parts: Vec<(&str, &[u8])> = vec![("word/document.xml", body.as_bytes())];
    parts.extend(embedded.iter().map(|n| (n.as_str(), &inner[..])));
    zip_of(&parts)
}
