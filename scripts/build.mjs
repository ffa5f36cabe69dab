#!/usr/bin/env node
// npm run build (and `prepack`, so `npm pack` and `npm publish` build too):
//   1. regenerate src/core/redis/lua-sources.ts, src/gateway/version.ts and
//      src/gateway/ops/dashboard-assets.ts (scripts/embed-*.mjs);
//   2. empty dist/ (no stale files or source maps from older builds get packed);
//   3. tsc twice, in parallel: ESM into dist/ (tsconfig.build.json) and CommonJS into dist/cjs/
//      (tsconfig.cjs.json, without the bin), each with its .d.ts;
//   4. dist/cjs/package.json {"type":"commonjs"}, so Node and TypeScript read dist/cjs as CommonJS.
// Options (test/package uses both, to build a tarball without touching the checkout):
//   --out-dir <dir>   build into <dir> instead of dist/
//   --no-generate     skip step 1 (test/package/generated.test.ts reports stale generated sources)
/* global process, console */
import { spawn } from 'node:child_process'
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { LUA_MODULE, renderLuaModule } from './embed-lua.mjs'
import { renderVersionModule, VERSION_MODULE } from './embed-version.mjs'
import { DASHBOARD_MODULE, renderDashboardModule } from './embed-dashboard.mjs'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const args = process.argv.slice(2)
const outAt = args.indexOf('--out-dir')
const DIST = outAt === -1 ? path.join(ROOT, 'dist') : path.resolve(args[outAt + 1] ?? '')
if (outAt !== -1 && !args[outAt + 1]) throw new Error('--out-dir needs a directory')
const TSC = createRequire(import.meta.url).resolve('typescript/bin/tsc')

function writeIfChanged(file, text) {
  let current
  try {
    current = readFileSync(file, 'utf8')
  } catch {
    current = undefined
  }
  if (current !== text) writeFileSync(file, text)
}

function tsc(project, outDir) {
  return new Promise((resolve) => {
    const argv = [TSC, '-p', project, '--outDir', outDir]
    const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: 'inherit' })
    child.on('close', (code, signal) =>
      resolve(code === 0 ? undefined : `tsc -p ${project}: ${signal ?? code}`),
    )
  })
}

if (!args.includes('--no-generate')) {
  writeIfChanged(LUA_MODULE, renderLuaModule())
  writeIfChanged(VERSION_MODULE, renderVersionModule())
  writeIfChanged(DASHBOARD_MODULE, renderDashboardModule())
}
rmSync(DIST, { recursive: true, force: true })
const builds = [tsc('tsconfig.build.json', DIST), tsc('tsconfig.cjs.json', path.join(DIST, 'cjs'))]
const failures = (await Promise.all(builds)).filter(Boolean)
if (failures.length > 0) {
  console.error(`build failed: ${failures.join('; ')}`)
  process.exit(1)
}
mkdirSync(path.join(DIST, 'cjs'), { recursive: true })
writeFileSync(path.join(DIST, 'cjs/package.json'), '{ "type": "commonjs" }\n')
chmodSync(path.join(DIST, 'gateway/main.js'), 0o755)
