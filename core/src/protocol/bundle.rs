//! A folder in the content store: a small JSON document mapping file names to the CIDs of their
//! bytes. Base models (config.json, model.safetensors, tokenizer.json, or one .gguf) and
//! adapters (adapter_config.json, adapter_model.safetensors, shardwork.json) travel as bundles,
//! so one CID names the whole folder and every file in it is verified on read like any block.
//!
//! Not a UnixFS directory: Kubo's directory CIDs depend on its HAMT sharding rules, and a
//! bundle is simple enough for any client (the portal, a PEFT user with `ipfs cat`) to follow.
//! An adapter bundle's files are sealed (its `sealed` flag); the document itself is not, so a
//! reader learns the file names and nothing else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::PROTOCOL_VERSION;
use super::ids::ContentId;
use super::validation::{SpecErrors, decode_json};

/// Files per bundle, far above what a model or adapter folder holds.
pub const MAX_BUNDLE_FILES: usize = 256;

/// A bundle document: the files of one model or adapter folder, each named by the CID of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// The protocol version it was written with.
    pub version: u32,
    /// `model` or `adapter`.
    pub kind: String,
    /// File name (one plain path segment) to the CID of the file's bytes.
    pub files: BTreeMap<String, ContentId>,
    /// Whether each file is stored sealed (`store::keys`): every adapter is, so that a public
    /// store gives it only to who holds its key; a base model is not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sealed: bool,
}

impl Bundle {
    /// An empty bundle of `kind` (`model` or `adapter`) at the current protocol version.
    pub fn new(kind: &str) -> Bundle {
        Bundle {
            version: PROTOCOL_VERSION,
            kind: kind.to_owned(),
            files: BTreeMap::new(),
            sealed: false,
        }
    }

    /// Decodes and checks a bundle document; every problem is named by its path.
    pub fn decode(bytes: &[u8]) -> Result<Bundle, SpecErrors> {
        let bundle: Bundle = decode_json(bytes)?;
        let mut e = SpecErrors::default();
        e.check(bundle.version == PROTOCOL_VERSION, "version", || {
            format!("version {} is not supported", bundle.version)
        });
        e.check(
            matches!(bundle.kind.as_str(), "model" | "adapter"),
            "kind",
            || format!("{:?} is neither `model` nor `adapter`", bundle.kind),
        );
        e.check(
            !bundle.files.is_empty() && bundle.files.len() <= MAX_BUNDLE_FILES,
            "files",
            || {
                format!(
                    "holds {} files; 1..={MAX_BUNDLE_FILES} allowed",
                    bundle.files.len()
                )
            },
        );
        // Two names for one CID would have every node write the same bytes twice: a bundle
        // listing one 256 MiB file under many names multiplied what each node stores.
        let mut seen = std::collections::BTreeMap::new();
        for (name, cid) in &bundle.files {
            let digest = (cid.cid().hash().code(), cid.cid().hash().digest().to_vec());
            if let Some(first) = seen.insert(digest, name) {
                e.check(false, &format!("files.{name}"), || {
                    format!("names the same content as files.{first}")
                });
            }
        }
        for name in bundle.files.keys() {
            e.check(is_plain_file_name(name), &format!("files.{name}"), || {
                "a file name is one path segment of letters, digits, `.`, `-` and `_`".into()
            });
        }
        e.into_result().map(|()| bundle)
    }

    /// The CID of the file called `name`, if the bundle holds one.
    pub fn file(&self, name: &str) -> Option<&ContentId> {
        self.files.get(name)
    }
}

/// No separators, no `..`, nothing a file system or a URL would read specially.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CID: &str = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku";

    #[test]
    fn round_trips_and_refuses_paths() {
        let mut b = Bundle::new("adapter");
        b.files
            .insert("adapter_config.json".into(), CID.parse().unwrap());
        let bytes = serde_json::to_vec(&b).unwrap();
        assert_eq!(Bundle::decode(&bytes).unwrap(), b);
        let evil = format!(r#"{{"version":1,"kind":"adapter","files":{{"../x":"{CID}"}}}}"#);
        let err = Bundle::decode(evil.as_bytes()).unwrap_err();
        assert_eq!(err.errors()[0].path, "files.../x");
    }

    #[test]
    fn one_content_under_two_names_is_refused_in_any_spelling() {
        // Issue 46, attack 8: a bundle listing one 256 MiB file under many names multiplied
        // what every node writes. The CIDv0 spelling of the same content counts as the same.
        let v1: super::ContentId = CID.parse().unwrap();
        let v0 = super::ContentId(cid::Cid::new_v0(*v1.cid().hash()).unwrap());
        let mut b = Bundle::new("model");
        b.files.insert("a.gguf".into(), v1);
        b.files.insert("b.bin".into(), v1);
        let err = Bundle::decode(&serde_json::to_vec(&b).unwrap()).unwrap_err();
        assert_eq!(err.errors()[0].path, "files.b.bin");
        assert!(err.errors()[0].message.contains("files.a.gguf"), "{err:?}");
        b.files.insert("b.bin".into(), v0);
        assert_ne!(v0.to_string(), v1.to_string());
        assert!(Bundle::decode(&serde_json::to_vec(&b).unwrap()).is_err());
    }

    #[test]
    fn empty_and_unknown_kinds_are_named() {
        let err = Bundle::decode(br#"{"version":1,"kind":"zip","files":{}}"#).unwrap_err();
        let paths: Vec<_> = err.errors().iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["kind", "files"]);
    }
}
