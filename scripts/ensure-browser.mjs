#!/usr/bin/env node
// Makes sure a Chromium the browser tests can drive is installed (test/gateway/dashboard.test.ts drives
// it with playwright-core; no browser is downloaded). On CI (root with apt-get) it installs Debian's
// `chromium`; elsewhere, or when apt-get fails, it says so in one line and exits 0: the browser tests
// then skip with that reason (TOLLGATE_CHROMIUM names another binary).
/* global process, URL */
import { spawnSync } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import path from 'node:path'

const CANDIDATES = ['chromium', 'chromium-browser', 'google-chrome-stable', 'google-chrome']

/** The browser binary: TOLLGATE_CHROMIUM, else the first candidate on PATH. */
export function findChromium() {
  const given = process.env.TOLLGATE_CHROMIUM
  if (given) return executable(given) ? given : undefined
  for (const name of CANDIDATES) {
    for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
      if (!dir) continue
      const file = path.join(dir, name)
      if (executable(file)) return file
    }
  }
  return undefined
}

function executable(file) {
  try {
    accessSync(file, constants.X_OK)
    return true
  } catch {
    return false
  }
}

function run(cmd, args) {
  const result = spawnSync(cmd, args, {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  })
  return result.status === 0
}

function main() {
  if (findChromium()) return
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
  const apt = spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status === 0
  if (!isRoot || !apt) {
    process.stderr.write(
      'ensure-browser: no chromium on PATH and no root apt-get to install it: the browser tests will skip (apt-get install chromium, or set TOLLGATE_CHROMIUM)\n',
    )
    return
  }
  process.stderr.write('ensure-browser: chromium missing, installing it with apt-get\n')
  if (!run('apt-get', ['install', '-y', '--no-install-recommends', 'chromium'])) {
    run('apt-get', ['update'])
    run('apt-get', ['install', '-y', '--no-install-recommends', 'chromium'])
  }
  if (!findChromium())
    process.stderr.write('ensure-browser: chromium still missing: the browser tests will skip\n')
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname))
  main()
