#!/usr/bin/env node
// npm run check:package: build and pack exactly what `npm publish` would of both packages (npm pack
// runs `prepack`, which builds; tollgate-gateway is staged from that build), then let
// @arethetypeswrong/cli check every entry point of each tarball under node10, node16 (from CJS and
// from ESM) and bundler resolution. Exits non-zero on any problem.
//   node scripts/check-package.mjs [--keep]   --keep: leave the tarballs and print their paths
/* global process, console */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const ATTW = path.join(ROOT, 'node_modules/@arethetypeswrong/cli/dist/index.js')

const dir = mkdtempSync(path.join(os.tmpdir(), 'tollgate-pack-'))
/** npm pack in `cwd` (with `scripts`: its prepack builds), then attw on the tarball; the exit status. */
function check(cwd, scripts) {
  const pack = spawnSync(
    'npm',
    ['pack', '--json', '--pack-destination', dir, ...(scripts ? [] : ['--ignore-scripts'])],
    { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
  )
  if (pack.status !== 0) throw new Error(`npm pack failed (${pack.status ?? pack.signal})`)
  // Lifecycle scripts may print before the JSON array, which is the last thing on stdout.
  const [{ filename, size, unpackedSize, entryCount }] = JSON.parse(
    pack.stdout.slice(pack.stdout.lastIndexOf('\n[\n') + 1),
  )
  const tarball = path.join(dir, filename)
  console.log(`${filename}: ${entryCount} files, ${size} B packed, ${unpackedSize} B unpacked`)
  const attw = spawnSync(process.execPath, [ATTW, tarball, '--no-definitely-typed', '--profile', 'strict'], {
    cwd: ROOT,
    stdio: 'inherit',
  })
  if (process.argv.includes('--keep')) console.log(`kept ${tarball}`)
  return attw.status ?? 1
}
try {
  // The library (its prepack builds dist/), then the gateway staged from that build.
  const library = check(ROOT, true)
  const staged = spawnSync(process.execPath, [path.join(ROOT, 'scripts/stage-gateway.mjs')], {
    stdio: 'inherit',
  })
  if (staged.status !== 0) throw new Error('scripts/stage-gateway.mjs failed')
  const gateway = check(path.join(ROOT, 'packages/gateway'), false)
  process.exitCode = library || gateway
} finally {
  if (!process.argv.includes('--keep')) rmSync(dir, { recursive: true, force: true })
}
