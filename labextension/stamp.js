// Records which sources the committed build in ../ease_jupyter/labextension
// came from: a sha256 over src/, style/ and the package files, in path order.
// tests/lab/test_labextension.py recomputes it, so an edit without a rebuild fails there.
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const INPUTS = ['package.json', 'package-lock.json', 'tsconfig.json', 'src', 'style'];

function files(p) {
  if (fs.statSync(p).isDirectory()) {
    return fs.readdirSync(p).sort().flatMap(name => files(path.posix.join(p, name)));
  }
  return [p];
}

const hash = crypto.createHash('sha256');
for (const file of INPUTS.flatMap(files).sort()) {
  hash.update(file + '\0');
  hash.update(fs.readFileSync(file));
  hash.update('\0');
}
fs.writeFileSync('../ease_jupyter/labextension/source.sha256', hash.digest('hex') + '\n');
