// Compiles one standard-JSON input with solcjs (the wasm build of solc) and writes the
// standard-JSON output. Used by the .tools/bin/solc wrapper that scripts/install/npm-tools
// writes. Files instead of stdio: the solcjs CLI reads stdin with a blocking read that fails on
// the non-blocking pipes forge hands over, and it exits before a piped stdout is flushed,
// cutting the output at 64 KiB.
'use strict';
const fs = require('fs');
const path = require('path');

const [nodeModules, inputPath, outputPath] = process.argv.slice(2);
if (!nodeModules || !inputPath || !outputPath) {
  process.stderr.write('usage: solc-standard-json.js <node_modules> <input.json> <output.json>\n');
  process.exit(2);
}
const solc = require(path.join(nodeModules, 'solc'));
// No import callback: forge and foundry-compilers put every source's content in the input.
fs.writeFileSync(outputPath, solc.compile(fs.readFileSync(inputPath, 'utf8')));
