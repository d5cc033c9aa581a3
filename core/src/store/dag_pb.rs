//! The dag-pb codec (multicodec 0x70): the protobuf envelope of every UnixFS node.
//!
//! Written by hand rather than generated because the CID of a node is the hash of its exact
//! bytes, so the field order and presence rules must be those of Kubo (go-codec-dagpb) and
//! js `@ipld/dag-pb`, which a general protobuf encoder does not promise:
//!
//! * `Links` (field 2) are written before `Data` (field 1);
//! * every link carries `Hash`, `Name` (even when empty) and `Tsize`, in that order;
//! * `Data` is written only when present.
//!
//! Decoding is strict (unknown fields, truncated varints, wrong wire types are errors), because
//! it runs on bytes fetched from other parties.

use cid::Cid;

/// Wire types of the protobuf encoding that dag-pb and UnixFS use.
const WIRE_VARINT: u8 = 0;
const WIRE_LEN: u8 = 2;

/// One link of a dag-pb node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbLink {
    /// The CID of the linked node.
    pub hash: Cid,
    /// The link's name; empty for the chunks of a file.
    pub name: String,
    /// Cumulative size of the linked DAG: its encoded blocks, all the way down.
    pub tsize: u64,
}

/// A dag-pb node: ordered links plus an opaque data payload (UnixFS for files).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PbNode {
    /// The links, in order (for a file: its chunks, in file order).
    pub links: Vec<PbLink>,
    /// The payload, absent when the node has none.
    pub data: Option<Vec<u8>>,
}

/// Why bytes are not a valid protobuf message of the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {message} protobuf at byte {offset}: {reason}")]
pub struct DecodeError {
    /// The message being decoded (`dag-pb PBNode`, `UnixFS Data`, …).
    pub message: &'static str,
    /// Where decoding stopped, as a byte offset.
    pub offset: usize,
    /// What was wrong there.
    pub reason: String,
}

impl PbNode {
    /// The node's bytes as Kubo writes them: links first, then the data, if any.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(self.links.len() * 48 + self.data.as_ref().map_or(0, Vec::len) + 8);
        for link in &self.links {
            let mut inner = Vec::with_capacity(48);
            put_bytes_field(&mut inner, 1, &link.hash.to_bytes());
            put_bytes_field(&mut inner, 2, link.name.as_bytes());
            put_varint_field(&mut inner, 3, link.tsize);
            put_bytes_field(&mut out, 2, &inner);
        }
        if let Some(data) = &self.data {
            put_bytes_field(&mut out, 1, data);
        }
        out
    }

    /// Reads a node strictly (see the module's rules); links may come before or after the data.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(bytes, "dag-pb PBNode");
        let mut node = PbNode::default();
        while !reader.done() {
            match reader.key()? {
                (1, WIRE_LEN) => {
                    if node.data.is_some() {
                        return Err(reader.error("Data appears twice"));
                    }
                    node.data = Some(reader.bytes()?.to_vec());
                }
                // Links after Data is not what Kubo writes, but newer encoders may (js
                // `fieldOrder: 'data-first'`); the hash check already pins the bytes down.
                (2, WIRE_LEN) => {
                    let start = reader.offset;
                    let inner = reader.bytes()?;
                    node.links.push(decode_link(inner, start)?);
                }
                (field, wire) => {
                    return Err(reader.error(&format!("unexpected field {field} wire type {wire}")));
                }
            }
        }
        Ok(node)
    }
}

fn decode_link(bytes: &[u8], base: usize) -> Result<PbLink, DecodeError> {
    let mut reader = Reader::new(bytes, "dag-pb PBLink");
    reader.base = base;
    let mut hash = None;
    let mut name = String::new();
    let mut tsize = 0;
    while !reader.done() {
        match reader.key()? {
            (1, WIRE_LEN) => {
                let raw = reader.bytes()?;
                let cid = Cid::try_from(raw)
                    .map_err(|err| reader.error(&format!("link Hash is not a CID: {err}")))?;
                hash = Some(cid);
            }
            (2, WIRE_LEN) => {
                name = String::from_utf8(reader.bytes()?.to_vec())
                    .map_err(|_| reader.error("link Name is not UTF-8"))?;
            }
            (3, WIRE_VARINT) => tsize = reader.varint()?,
            (field, wire) => {
                return Err(reader.error(&format!("unexpected field {field} wire type {wire}")));
            }
        }
    }
    let hash = hash.ok_or_else(|| reader.error("link without Hash"))?;
    Ok(PbLink { hash, name, tsize })
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

pub(crate) fn put_varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    put_varint(out, (field << 3) | u64::from(WIRE_VARINT));
    put_varint(out, value);
}

pub(crate) fn put_bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | u64::from(WIRE_LEN));
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A cursor over protobuf bytes that reports where and why decoding failed.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
    /// Offset of `bytes` inside the enclosing message, so errors point into the whole block.
    base: usize,
    message: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], message: &'static str) -> Self {
        Reader {
            bytes,
            offset: 0,
            base: 0,
            message,
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.offset >= self.bytes.len()
    }

    pub(crate) fn error(&self, reason: &str) -> DecodeError {
        DecodeError {
            message: self.message,
            offset: self.base + self.offset,
            reason: reason.to_owned(),
        }
    }

    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes.get(self.offset) else {
                return Err(self.error("truncated varint"));
            };
            self.offset += 1;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(self.error("varint overflows 64 bits"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("varint longer than 10 bytes"))
    }

    /// Reads a field key, returning (field number, wire type).
    pub(crate) fn key(&mut self) -> Result<(u64, u8), DecodeError> {
        let key = self.varint()?;
        Ok((key >> 3, (key & 7) as u8))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.offset.checked_add(len))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.error(&format!("length {len} runs past the end")))?;
        let slice = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::unixfs::raw_cid;

    #[test]
    fn encodes_links_before_data_with_empty_names() {
        let child = raw_cid(b"x");
        let node = PbNode {
            links: vec![PbLink {
                hash: child,
                name: String::new(),
                tsize: 1,
            }],
            data: Some(vec![8, 2]),
        };
        let bytes = node.encode();
        // 0x12 = field 2 (Links), length-delimited; the node's Data (0x0a) comes last.
        assert_eq!(bytes[0], 0x12);
        assert_eq!(&bytes[bytes.len() - 4..], &[0x0a, 2, 8, 2]);
        // Name is present even though empty: field 2 of the link with length 0.
        let cid_len = child.to_bytes().len();
        assert_eq!(&bytes[2 + 2 + cid_len..2 + 2 + cid_len + 2], &[0x12, 0x00]);
        assert_eq!(PbNode::decode(&bytes).unwrap(), node);
    }

    #[test]
    fn rejects_truncated_and_unknown_fields() {
        let node = PbNode {
            links: vec![],
            data: Some(vec![1, 2, 3]),
        };
        let bytes = node.encode();
        let err = PbNode::decode(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(err.reason.contains("past the end"), "{err}");
        let err = PbNode::decode(&[0x18, 0x01]).unwrap_err();
        assert!(err.reason.contains("unexpected field 3"), "{err}");
        let err = PbNode::decode(&[0x0a, 0x80]).unwrap_err();
        assert!(err.reason.contains("truncated varint"), "{err}");
    }

    #[test]
    fn rejects_a_link_whose_hash_is_not_a_cid() {
        // Links: [ { Hash: 0xff 0xff } ]
        let err = PbNode::decode(&[0x12, 0x04, 0x0a, 0x02, 0xff, 0xff]).unwrap_err();
        assert!(err.reason.contains("not a CID"), "{err}");
    }
}
