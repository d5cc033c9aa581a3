// Prints the CID that ipfs-unixfs-importer (the JS reference implementation, written by the IPFS
// project, not by us) computes for each file named on the command line, one JSON object a line.
// The options are those of `ipfs add --cid-version=1 --raw-leaves --chunker=size-262144` in Kubo,
// which our embedded store must reproduce byte for byte.
//
// Usage: SHARDWORK_NPM_IPFS=.tools/npm-ipfs node unixfs-cid.mjs [--chunk-size N] [--max-links M] FILE...
// (scripts/install/npm-ipfs-reference installs the pinned packages there.) The two options
// default to Kubo's 262144 and 174; the tests also use small values to build DAGs of three and
// more levels from a few kilobytes, which Kubo's values would need gigabytes for.
import { createReadStream } from 'node:fs'
import { join, resolve } from 'node:path'

const modules = process.env.SHARDWORK_NPM_IPFS
if (!modules) {
  console.error('SHARDWORK_NPM_IPFS must name the folder holding node_modules/ipfs-unixfs-importer')
  process.exit(2)
}
// The packages are ESM-only and live outside this folder, so bare specifiers would not resolve
// from here; import their (pinned) entry points by path instead.
const from = (file) => import(join(resolve(modules), 'node_modules', file))
const { importer } = await from('ipfs-unixfs-importer/dist/src/index.js')
const { fixedSize } = await from('ipfs-unixfs-importer/dist/src/chunker/index.js')
const { balanced } = await from('ipfs-unixfs-importer/dist/src/layout/index.js')
const { BlackHoleBlockstore } = await from('blockstore-core/dist/src/black-hole.js')

const args = process.argv.slice(2)
let chunkSize = 262144
let maxLinks = 174
const paths = []
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--chunk-size') chunkSize = Number(args[++i])
  else if (args[i] === '--max-links') maxLinks = Number(args[++i])
  else paths.push(args[i])
}

for (const path of paths) {
  // Only the CIDs matter here: a blockstore that keeps nothing bounds memory for big files.
  const blockstore = new BlackHoleBlockstore()
  const options = {
    cidVersion: 1,
    rawLeaves: true,
    reduceSingleLeafToSelf: true,
    chunker: fixedSize({ chunkSize }),
    layout: balanced({ maxChildrenPerNode: maxLinks })
  }
  let root
  for await (const entry of importer([{ content: createReadStream(path) }], blockstore, options)) {
    root = entry
  }
  console.log(JSON.stringify({ path, cid: root.cid.toString(), size: Number(root.size) }))
}
