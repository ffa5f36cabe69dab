// A tiny watchdog process that outlives us only to clean up after us: we tell it over its stdin which
// PIDs and temp dirs we own; when that pipe closes (we exited, even by SIGKILL) it SIGKILLs the PIDs
// still registered and removes the dirs. Covers what exit/signal handlers cannot.
import { type ChildProcess, spawn } from 'node:child_process'
import type { Socket } from 'node:net'

const REAPER_SCRIPT = `
const fs = require('node:fs')
const pids = new Set()
const dirs = new Set()
let buffered = ''
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => {})
process.stdin.setEncoding('utf8')
process.stdin.on('data', (chunk) => {
  buffered += chunk
  let end
  while ((end = buffered.indexOf('\\n')) >= 0) {
    const { op, pid, dir } = JSON.parse(buffered.slice(0, end))
    buffered = buffered.slice(end + 1)
    const set = pid === undefined ? dirs : pids
    if (op === 'add') set.add(pid ?? dir)
    else set.delete(pid ?? dir)
  }
})
process.stdin.on('end', () => {
  for (const pid of pids) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
  for (const dir of dirs) {
    try { fs.rmSync(dir, { recursive: true, force: true }) } catch {}
  }
  process.exit(0)
})
`

let reaper: ChildProcess | undefined

function send(message: { op: 'add' | 'del'; pid?: number; dir?: string }): void {
  if (!reaper) {
    reaper = spawn(process.execPath, ['-e', REAPER_SCRIPT], { stdio: ['pipe', 'ignore', 'ignore'] })
    reaper.on('error', () => {})
    reaper.stdin?.on('error', () => {})
    // Neither the watchdog nor the pipe to it may keep this process alive.
    reaper.unref()
    ;(reaper.stdin as Socket | null)?.unref()
  }
  reaper.stdin?.write(`${JSON.stringify(message)}\n`)
}

/** Has `pid` SIGKILLed if this process dies without cleaning up; returns a function that cancels it. */
export function reapPidOnDeath(pid: number): () => void {
  send({ op: 'add', pid })
  return () => send({ op: 'del', pid })
}

/** Has `dir` removed if this process dies without cleaning up; returns a function that cancels it. */
export function reapDirOnDeath(dir: string): () => void {
  send({ op: 'add', dir })
  return () => send({ op: 'del', dir })
}
