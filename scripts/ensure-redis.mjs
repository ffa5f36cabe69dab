#!/usr/bin/env node
// Makes sure redis-server (>= 7) and redis-cli are on PATH before tests or benchmarks run.
// On CI (root with apt-get) it installs them; elsewhere it fails with one clear line. It never skips.
/* global process */
import { execFileSync, spawnSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import path from 'node:path'

const MIN_MAJOR = 7
const HINT = `tollgate tests need redis-server (>= ${MIN_MAJOR}) and redis-cli on PATH: install them, e.g. "sudo apt-get install redis-server"`

function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue
    try {
      accessSync(path.join(dir, name), constants.X_OK)
      return true
    } catch {
      // not in this directory
    }
  }
  return false
}

function serverMajor() {
  try {
    const out = execFileSync('redis-server', ['--version'], { encoding: 'utf8' })
    const match = /v=(\d+)\./.exec(out)
    return match ? Number(match[1]) : 0
  } catch {
    return 0
  }
}

function ready() {
  return onPath('redis-server') && onPath('redis-cli') && serverMajor() >= MIN_MAJOR
}

function run(cmd, args) {
  const result = spawnSync(cmd, args, {
    stdio: 'inherit',
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  })
  if (result.status !== 0) {
    process.stderr.write(`ensure-redis: "${cmd} ${args.join(' ')}" failed (status ${result.status})\n`)
  }
  return result.status === 0
}

function fail(detail) {
  process.stderr.write(`${HINT}${detail ? ` (${detail})` : ''}\n`)
  process.exit(1)
}

if (ready()) process.exit(0)

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
if (!isRoot || !onPath('apt-get')) fail()

process.stderr.write(
  'ensure-redis: redis-server >= 7 or redis-cli missing, installing redis-server with apt-get\n',
)
run('apt-get', ['update']) // a failed update may leave usable package lists: try the install anyway
if (!run('apt-get', ['install', '-y', 'redis-server'])) fail('apt-get install failed')
if (!ready()) {
  const major = serverMajor()
  fail(major > 0 ? `apt-get installed redis-server ${major}.x` : 'still not found after apt-get install')
}
process.exit(0)
