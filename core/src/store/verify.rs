//! Verified reading of a UnixFS file DAG from any source of blocks.
//!
//! Both adapters read through this module, so both give the same guarantee: every block is
//! re-hashed and compared with the CID that named it before any of its bytes are used, and every
//! node's sizes must add up. Since the root CID commits to the whole DAG, bytes that reach the
//! caller are exactly the bytes the CID names, whoever served them.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use cid::Cid;
use futures::stream;
use sha2::{Digest, Sha256};

use super::dag_pb::PbNode;
use super::unixfs::{DAG_PB, DataType, RAW, SHA2_256, UnixFsData};
use super::{ByteStream, StoreError};

/// Where blocks come from: a folder, a Kubo node. Returns bytes as stored, unverified.
#[async_trait]
pub trait BlockSource: Send + Sync {
    /// The bytes of block `cid`, or `None` if the source does not have it.
    async fn block(&self, cid: &Cid) -> Result<Option<Bytes>, StoreError>;
}

/// Checks that `data` hashes to `cid`. Only sha2-256 is accepted: it is what Kubo and our
/// importer use, and accepting weaker hashes would weaken every guarantee built on CIDs.
pub fn verify_block(cid: &Cid, data: &[u8]) -> Result<(), StoreError> {
    check_supported(cid)?;
    if Sha256::digest(data).as_slice() != cid.hash().digest() {
        return Err(StoreError::Corrupt {
            cid: *cid,
            reason: format!("block of {} bytes does not hash to its CID", data.len()),
        });
    }
    Ok(())
}

/// Refuses CIDs we could not verify or decode (other hashes, other codecs) before any fetch.
pub fn check_supported(cid: &Cid) -> Result<(), StoreError> {
    let hash = cid.hash();
    if hash.code() != SHA2_256 || hash.size() != 32 || !matches!(cid.codec(), RAW | DAG_PB) {
        return Err(StoreError::Unsupported(*cid));
    }
    Ok(())
}

/// Fetches block `cid` and verifies it; a missing block is [`StoreError::NotFound`].
pub async fn verified_block(source: &dyn BlockSource, cid: &Cid) -> Result<Bytes, StoreError> {
    check_supported(cid)?;
    let data = source.block(cid).await?.ok_or(StoreError::NotFound(*cid))?;
    verify_block(cid, &data)?;
    Ok(data)
}

/// A decoded, verified file node: its own data and its children with their expected sizes.
struct FileNode {
    data: Bytes,
    children: Vec<(Cid, u64)>,
    filesize: u64,
}

fn corrupt(cid: &Cid, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        cid: *cid,
        reason: reason.into(),
    }
}

/// Interprets a verified block as a piece of a UnixFS file and checks that its sizes agree.
fn file_node(cid: &Cid, block: Bytes) -> Result<FileNode, StoreError> {
    if cid.codec() == RAW {
        let filesize = block.len() as u64;
        return Ok(FileNode {
            data: block,
            children: Vec::new(),
            filesize,
        });
    }
    let node = PbNode::decode(&block).map_err(|err| corrupt(cid, err.to_string()))?;
    let unixfs = node
        .data
        .as_deref()
        .ok_or_else(|| corrupt(cid, "dag-pb node without UnixFS data"))?;
    let unixfs = UnixFsData::decode(unixfs).map_err(|err| corrupt(cid, err.to_string()))?;
    if !matches!(unixfs.kind, DataType::File | DataType::Raw) {
        return Err(StoreError::Backend(format!(
            "{cid} is a UnixFS {:?}, not a file; only files can be read",
            unixfs.kind
        )));
    }
    if unixfs.blocksizes.len() != node.links.len() {
        return Err(corrupt(
            cid,
            format!(
                "{} links but {} blocksizes",
                node.links.len(),
                unixfs.blocksizes.len()
            ),
        ));
    }
    let data = Bytes::from(unixfs.data.unwrap_or_default());
    let filesize = data.len() as u64 + unixfs.blocksizes.iter().sum::<u64>();
    if unixfs.filesize.is_some_and(|declared| declared != filesize) {
        return Err(corrupt(
            cid,
            format!(
                "declares {:?} bytes but its parts add up to {filesize}",
                unixfs.filesize
            ),
        ));
    }
    let children = node
        .links
        .iter()
        .map(|l| l.hash)
        .zip(unixfs.blocksizes)
        .collect();
    Ok(FileNode {
        data,
        children,
        filesize,
    })
}

/// Streams the file `root` names, verifying each block before yielding its bytes. The root is
/// fetched and checked before this returns, so an unknown or corrupt root is an immediate error.
pub async fn read_file(source: Arc<dyn BlockSource>, root: Cid) -> Result<ByteStream, StoreError> {
    let block = verified_block(source.as_ref(), &root).await?;
    let node = file_node(&root, block)?;
    // Depth-first, left to right: a stack of children still to visit, the next one on top.
    let pending: Vec<(Cid, u64)> = node.children.into_iter().rev().collect();
    let first = (!node.data.is_empty()).then_some(node.data);
    let state = (source, pending, first);
    let stream = stream::try_unfold(state, |(source, mut pending, mut ready)| async move {
        loop {
            if let Some(data) = ready.take() {
                return Ok(Some((data, (source, pending, None))));
            }
            let Some((cid, expected)) = pending.pop() else {
                return Ok(None);
            };
            // A linked block the source lacks ends the stream with NotFound naming that block.
            let block = verified_block(source.as_ref(), &cid).await?;
            let node = file_node(&cid, block)?;
            if node.filesize != expected {
                return Err(corrupt(
                    &cid,
                    format!(
                        "holds {} bytes but its parent expects {expected}",
                        node.filesize
                    ),
                ));
            }
            pending.extend(node.children.into_iter().rev());
            if !node.data.is_empty() {
                ready = Some(node.data);
            }
        }
    });
    Ok(Box::pin(stream))
}

/// File size and block count of `root`, fetching only the nodes that have children (raw leaves
/// are counted from the links that name them).
pub async fn stat_file(source: &dyn BlockSource, root: &Cid) -> Result<(u64, u64), StoreError> {
    let node = file_node(root, verified_block(source, root).await?)?;
    let size = node.filesize;
    let mut blocks = 1;
    let mut pending: Vec<Cid> = node.children.into_iter().map(|(cid, _)| cid).collect();
    while let Some(cid) = pending.pop() {
        blocks += 1;
        if cid.codec() == RAW {
            continue;
        }
        let node = file_node(&cid, verified_block(source, &cid).await?)?;
        pending.extend(node.children.into_iter().map(|(cid, _)| cid));
    }
    Ok((size, blocks))
}
