// What the suites share: where the repository is, and the broker.
import * as fs from "fs";
import * as path from "path";

/** repo is the repository's top directory: CANOPY_REPO, or where this file is built under sdk/typescript. */
export const repo = process.env.CANOPY_REPO ?? path.resolve(__dirname, "..", "..", "..", "..");

/** readJSON reads a file of the repository as JSON. */
export function readJSON(rel: string): unknown {
  return JSON.parse(fs.readFileSync(path.join(repo, rel), "utf8"));
}

/**
 * brokers are the Kafka brokers of the suites that need one (CANOPY_BROKERS,
 * set by sdk/typescript_test.go); without it those suites fail under CI=true
 * and are skipped otherwise, as internal/testenv does.
 */
export const brokers = process.env.CANOPY_BROKERS ?? "";
export const needsBroker: { skip?: string } =
  brokers || process.env.CI === "true" ? {} : { skip: "CANOPY_BROKERS not set: sdk/typescript_test.go runs these against kfake and Apache Kafka" };

/** unique is a name of the test's own: brokers are shared by the Go test's runs. */
export function unique(stem: string): string {
  return `${process.env.CANOPY_PREFIX ?? "tssdk"}-${stem}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** waitFor polls cond every 20 ms until it holds, failing after ms. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
