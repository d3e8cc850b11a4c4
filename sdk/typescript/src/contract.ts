// The contract this package follows. When schema/events changes,
// sdk/typescript_test.go fails until this file does: regenerate the
// builders (npm run generate), record the schemas' new SHA-256 here, and
// raise VERSION, in package.json too (the major is the contract's version,
// the events' schemaversion: a schemaversion 2 is a package 2.0.0).

/** VERSION is the package's version, as in package.json: its major is SCHEMA_VERSION. */
export const VERSION = "1.0.0";

/** SCHEMA_VERSION is the schemaversion of every event the package builds: the contract's version. */
export const SCHEMA_VERSION = 1;

/**
 * CONTRACT_SHA256 is the SHA-256 of the JSON Schemas of schema/events
 * (every *.json file there, concatenated in the order of their names) that
 * the package's builders and validation follow.
 */
export const CONTRACT_SHA256 = "e657a21e662c452b26b71129c9fb5d460bb67566e6e69327b4479ab736370705";
