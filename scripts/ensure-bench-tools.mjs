#!/usr/bin/env node
// Before `npm run bench`: nginx and wrk, the gateway benchmark's peer and load generator, from Debian
// packages. Installed with apt-get when running as root (CI, this machine); otherwise a missing one is
// reported and the gateway benchmark runs without it (its report says so). Never fails the bench.
/* global process */
import { spawnSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import path from 'node:path'

const TOOLS = [
  { command: 'nginx', pkg: 'nginx', dirs: ['/usr/sbin', '/sbin'] },
  { command: 'wrk', pkg: 'wrk', dirs: [] },
]

function found(command, extraDirs) {
  for (const dir of [...(process.env.PATH ?? '').split(path.delimiter), ...extraDirs]) {
    if (!dir) continue
    try {
      accessSync(path.join(dir, command), constants.X_OK)
      return true
    } catch {
      // not here
    }
  }
  return false
}

const missing = TOOLS.filter((tool) => !found(tool.command, tool.dirs))
if (missing.length === 0) process.exit(0)
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
const names = missing.map((tool) => tool.pkg).join(' ')
if (!isRoot || !found('apt-get', [])) {
  process.stderr.write(
    `ensure-bench-tools: ${names} missing (install: sudo apt-get install ${names}); the gateway bench runs without them\n`,
  )
  process.exit(0)
}
process.stderr.write(`ensure-bench-tools: installing ${names} with apt-get\n`)
const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
spawnSync('apt-get', ['update'], { stdio: 'inherit', env })
const result = spawnSync(
  'apt-get',
  ['install', '-y', '--no-install-recommends', ...missing.map((t) => t.pkg)],
  {
    stdio: 'inherit',
    env,
  },
)
if (result.status !== 0)
  process.stderr.write(
    `ensure-bench-tools: apt-get install ${names} failed; the gateway bench runs without them\n`,
  )
process.exit(0)
