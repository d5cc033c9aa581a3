//! The tokenizers library run on a requester's files without letting a panic reach the node.
//!
//! Some malformed `tokenizer.json` files make the library panic rather than return an error:
//! a decoder it cannot deserialize (`expect("Helper")` while reading the file), a template
//! post-processor naming a special token the file does not define (an index out of its map on
//! every encode). `trainer/tests/fuzz_model_files.rs` found both. Every call into the library
//! with a requester's tokenizer goes through here, so such a file is that job's error.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use tokenizers::{Encoding, Tokenizer};

/// Reads `tokenizer.json`; the error says what is wrong with it.
pub fn read(path: &Path) -> Result<Tokenizer, String> {
    catch_unwind(|| Tokenizer::from_file(path))
        .map_err(|_| "the tokenizers library panicked reading it".to_owned())?
        .map_err(|e| e.to_string())
}

/// `tokenizer.encode(text, add_special_tokens)`.
pub fn encode(
    tokenizer: &Tokenizer,
    text: &str,
    add_special_tokens: bool,
) -> Result<Encoding, String> {
    // The tokenizer is only read; after a panic the caller gets an error and, at load, drops it.
    catch_unwind(AssertUnwindSafe(|| {
        tokenizer.encode(text, add_special_tokens)
    }))
    .map_err(|_| "the tokenizers library panicked".to_owned())?
    .map_err(|e| e.to_string())
}

/// `tokenizer.decode(ids, skip_special_tokens)`.
pub fn decode(
    tokenizer: &Tokenizer,
    ids: &[u32],
    skip_special_tokens: bool,
) -> Result<String, String> {
    catch_unwind(AssertUnwindSafe(|| {
        tokenizer.decode(ids, skip_special_tokens)
    }))
    .map_err(|_| "the tokenizers library panicked".to_owned())?
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the raw library call panics (the test's inputs must hit the real panics).
    fn panics<T>(f: impl FnOnce() -> T) -> bool {
        catch_unwind(AssertUnwindSafe(f)).is_err()
    }

    /// The two panics the fuzzer found, each an error here.
    #[test]
    fn files_that_make_the_library_panic_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        crate::sample::write_model(dir.path(), 1).unwrap();
        let sound = std::fs::read_to_string(dir.path().join("tokenizer.json")).unwrap();
        let value: serde_json::Value = serde_json::from_str(&sound).unwrap();

        // A syntax error inside the decoder's value panics while reading (the library buffers
        // the value for an untagged enum and `expect`s that to succeed).
        assert!(sound.contains("\"decoder\": null"), "{sound}");
        let bad_decoder = sound.replace(
            "\"decoder\": null",
            "\"decoder\": {\"type\": \"WordPiece\",}",
        );
        let path = dir.path().join("bad-decoder.json");
        std::fs::write(&path, bad_decoder).unwrap();
        assert!(
            panics(|| Tokenizer::from_file(&path)),
            "the library no longer panics here"
        );
        assert!(read(&path).unwrap_err().contains("panicked"));

        // A template post-processor naming a special token the file lacks panics on encode.
        let mut bad_template = value.clone();
        bad_template["post_processor"]["single"][0]["SpecialToken"]["id"] =
            serde_json::json!("[NOPE]");
        let path = dir.path().join("bad-template.json");
        std::fs::write(&path, bad_template.to_string()).unwrap();
        let tokenizer = read(&path).expect("the library reads it without checking the template");
        assert!(
            panics(|| tokenizer.encode("good film", true)),
            "the library no longer panics here"
        );
        assert!(
            encode(&tokenizer, "good film", true)
                .unwrap_err()
                .contains("panicked")
        );
        // And at load, a tokenizer that cannot encode is the file's error.
        let error = crate::text::TextTokenizer::from_file(&path, 16)
            .err()
            .unwrap();
        assert!(
            error.to_string().contains("cannot tokenize with it"),
            "{error}"
        );
    }
}
