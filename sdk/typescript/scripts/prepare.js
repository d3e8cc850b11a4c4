"use strict";
// npm runs this (the package's "prepare" script) after `npm ci` here, and in
// this directory when a project installs it from the repository:
// `npm install path/to/sdk/typescript`, linked or (--install-links) packed.
// It builds dist/ (JavaScript and .d.ts types) with tsc. A project that
// installs the package from a fresh checkout has not installed the
// package's own dependencies, tsc among them: then this installs them first,
// into this directory, exactly as package-lock.json pins them, so that one
// `npm install` is enough.
const { execFileSync } = require("child_process");
const fs = require("fs");
const path = require("path");

const dir = path.join(__dirname, "..");
if (!fs.existsSync(path.join(dir, "tsconfig.json"))) {
  process.exit(0); // a packed copy: dist/ is built already
}

function tsc() {
  try {
    return require.resolve("typescript/bin/tsc", { paths: [dir] });
  } catch {
    return undefined;
  }
}

let bin = tsc();
if (!bin) {
  console.error(`@canopy/agents: installing its own dependencies to build it (npm ci in ${dir})`);
  // The installing npm's settings (npm_config_*) are for the project that
  // installs this package, not for this directory.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_config_(global|prefix|save|install_links|omit|include|production|dev|only)/i.test(k)));
  execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", ["ci", "--ignore-scripts", "--no-audit", "--no-fund"],
    { cwd: dir, stdio: ["ignore", "inherit", "inherit"], env });
  bin = tsc();
  if (!bin) {
    console.error("@canopy/agents: npm ci did not install typescript; run `npm ci` in " + dir);
    process.exit(1);
  }
}
execFileSync(process.execPath, [bin, "-p", path.join(dir, "tsconfig.json")], { stdio: "inherit" });
